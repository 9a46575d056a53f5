"""Many requests at once: one lookup, one connection pool per remote schedd."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import htgrid.classad as classad
from htgrid.backends.condor._http import RemoteSettings
from htgrid.backends.condor.server import MAX_PROXY_BYTES, CondorGahp, CondorOptions
from htgrid.gahp import Call, Credentials

from .conftest import SCHEDD_NAME, RemotePool


def test_200_status_requests_in_flight_share_one_pool(remote: RemotePool) -> None:
    options = CondorOptions(
        remote=RemoteSettings(
            pool=remote.collector, ca_files=(str(remote.ca_file),), max_connections=4
        ),
        token_dirs=(remote.tokens_dir,),
    )

    async def scenario() -> tuple[list[list[str]], int, int]:
        gahp = CondorGahp(options)
        try:
            calls = [
                Call("CONDOR_JOB_STATUS_CONSTRAINED", i, (SCHEDD_NAME, "true"), Credentials())
                for i in range(1, 201)
            ]
            results = await asyncio.gather(*(gahp.status(call) for call in calls))
            own = await gahp.submit(
                Call(
                    "CONDOR_JOB_SUBMIT", 201, (SCHEDD_NAME, '[ Cmd = "/bin/true" ]'), Credentials()
                )
            )
            assert own[0] == "S", own
            return [list(r) for r in results], gahp.remotes.pools, len(results)
        finally:
            await gahp.aclose()

    results, pools, count = asyncio.run(scenario())
    assert count == 200
    first = results[0]
    assert all(r[:2] == ["S", "NULL"] and len(r) == 3 + int(r[2]) for r in results)
    assert all(r[2] == first[2] for r in results)  # one queue, one answer
    for text in first[3:]:
        assert isinstance(classad.ClassAd(text)["ServerTime"], int)
    # The collector and the one schedd: every request reused the schedd's client.
    assert pools == 2


def test_refresh_proxy_says_what_failed(remote: RemotePool, tmp_path: Path) -> None:
    """CONDOR_JOB_REFRESH_PROXY sends the file to the remote schedd; an unreadable file, a
    file too large to be a proxy and a job that has no proxy there each fail with why."""
    options = CondorOptions(
        remote=RemoteSettings(pool=remote.collector, ca_files=(str(remote.ca_file),)),
        token_dirs=(remote.tokens_dir,),
    )
    proxy, huge = tmp_path / "x509up", tmp_path / "huge"
    proxy.write_bytes(b"renewed")
    huge.write_bytes(b"x" * (MAX_PROXY_BYTES + 1))

    async def scenario() -> list[Sequence[str]]:
        gahp = CondorGahp(options)
        try:
            submitted = await gahp.submit(
                Call("CONDOR_JOB_SUBMIT", 1, (SCHEDD_NAME, '[ Cmd = "/bin/true" ]'), Credentials())
            )
            assert submitted[0] == "S", submitted
            job = submitted[1]
            return [
                await gahp.refresh_proxy(
                    Call(
                        "CONDOR_JOB_REFRESH_PROXY", n, (SCHEDD_NAME, job, str(path)), Credentials()
                    )
                )
                for n, path in enumerate((tmp_path / "missing", huge, proxy), start=2)
            ]
        finally:
            await gahp.aclose()

    missing, too_large, no_proxy_there = asyncio.run(scenario())
    assert missing[0] == "F" and "cannot read" in missing[1] and "missing" in missing[1]
    assert too_large[0] == "F" and "not a proxy" in too_large[1]
    assert no_proxy_there[0] == "F" and "no x509userproxy" in no_proxy_there[1]
