"""A batch job's proxy renewed in place while it runs reaches the batch job's copy
(BLAH_JOB_REFRESH_PROXY, as HTCondor's INFNBatchJob refreshes it), and
DelegatedProxyExpiration says which one it has."""

from __future__ import annotations

import asyncio

from htgrid.client.x509 import make_proxy, read_proxy
from htgrid.queue import JobStatus

from ._harness import Grid, running, wait_for
from .test_proxy_hold import _credential

# The job copies its proxy to $1, then waits (at most 60 s) for its copy to change and
# copies the new one to $2.
_SCRIPT = """#!/bin/sh
cp "$X509_USER_PROXY" "$1.tmp" && mv "$1.tmp" "$1"
n=0
while cmp -s "$X509_USER_PROXY" "$1" && [ $n -lt 300 ]; do sleep 0.2; n=$((n + 1)); done
cp "$X509_USER_PROXY" "$2"
"""


def test_a_proxy_renewed_in_place_reaches_the_batch_jobs_copy(grid: Grid) -> None:
    credential = _credential(5)
    proxy = grid.work / "x509up"
    proxy.write_bytes(make_proxy(*credential, lifetime=3600))
    script = grid.work / "job.sh"
    script.write_text(_SCRIPT)
    script.chmod(0o755)
    first, second = grid.work / "first.pem", grid.work / "second.pem"
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = {script}\narguments = {first} {second}\n"
        "log = job.log"
    )

    async def main() -> None:
        async with running(grid):
            await wait_for("the batch job running", first.exists)
            # The batch job has the proxy it was submitted with (saved with its id).
            submitted = read_proxy(proxy).expiration
            await wait_for(
                "the submit saved",
                lambda: grid.ad(job).get("DelegatedProxyExpiration") == submitted,
            )
            proxy.write_bytes(make_proxy(*credential, lifetime=7200))
            await wait_for("the job to end", lambda: not grid.in_queue(job), 60)

    asyncio.run(main())
    ad = grid.ad(job)
    assert ad["JobStatus"] == JobStatus.COMPLETED
    assert second.read_bytes() == proxy.read_bytes()
    assert first.read_bytes() != proxy.read_bytes()
    assert ad["DelegatedProxyExpiration"] == read_proxy(proxy).expiration
