"""The grid manager against a real NorduGrid ARC CE (`arc https://localhost/arex`): skipped
without one, except in CI.

CI brings the CE up with `.ci/arc-up.sh` (A-REX 6 with the fork LRMS and its REST
interface on 127.0.0.1:443, the test PKI of `.ci/grid-pki.sh`); there a missing CE is a
failure. The CE changes a job's state only when its information provider runs (about
once a minute), so every wait here has a deadline of minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Awaitable
from pathlib import Path

import pytest

from htgrid.client.x509 import make_proxy
from htgrid.grid.arc import ArcJobId
from htgrid.queue import JobAction, JobStatus

from ._harness import ROOT, Grid, running, wait_for

PKI = Path(os.environ.get("HTGRID_REALGRID_DIR", "/var/tmp/htgrid-realgrid")) / "pki"
CA_DIR = "/etc/grid-security/certificates"
CE = "https://localhost:443/arex"
REST = f"{CE}/rest/1.0"


def _context(proxy: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(capath=CA_DIR)
    context.load_cert_chain(proxy)
    return context


def _rest(proxy: Path, path: str, body: object | None = None) -> tuple[int, object]:
    """One request to the CE's REST interface with `proxy`: (status, JSON or text)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{REST}{path}",
        data=data,
        headers={"Accept": "application/json", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=_context(proxy), timeout=20) as answer:
            text = answer.read().decode()
            return answer.status, json.loads(text) if text.strip() else None
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _new_proxy(where: Path, lifetime: float = 6 * 3600) -> Path:
    proxy = where / "x509up_test"
    cert, key = (PKI / "user.pem").read_bytes(), (PKI / "user.key").read_bytes()
    proxy.write_bytes(make_proxy(cert, key, lifetime=lifetime))
    proxy.chmod(0o600)
    return proxy


def _ce_up() -> bool:
    if not (PKI / "user.pem").exists() or not (PKI / "user.key").exists():
        return False
    try:
        proxy = _new_proxy(Path(os.environ.get("TMPDIR", "/tmp")), lifetime=600)
        status, _ = _rest(proxy, "/jobs")
        proxy.unlink()
    except (OSError, ssl.SSLError, urllib.error.URLError):
        return False
    return status == 200


if not _ce_up():
    if os.environ.get("CI") == "true":
        pytest.fail("the ARC CE is not up (CI runs .ci/arc-up.sh first)", pytrace=False)
    pytest.skip("no ARC CE here", allow_module_level=True)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def _state_at_ce(proxy: Path, arc_id: str) -> str | None:
    """The job's state at the CE; None once the CE no longer knows it (cleaned)."""
    status, answer = _rest(proxy, "/jobs?action=status", {"job": [{"id": arc_id}]})
    # The CE answers 201 when a job of the list is not found (ARC 6.17).
    assert status in (200, 201), answer
    assert isinstance(answer, dict)
    record = answer["job"]
    record = record[0] if isinstance(record, list) else record
    return None if record["status-code"] == "404" else str(record["state"])


def _arc_id(grid: Grid, job_id: object) -> str | None:
    found = ArcJobId.parse(grid.ad(job_id).get("GridJobId"))  # type: ignore[arg-type]
    return None if found is None else found.job_id


@pytest.mark.timeout(900)
def test_a_job_runs_at_the_ce_its_output_comes_back_and_rm_kills_another(grid: Grid) -> None:
    proxy = _new_proxy(grid.work)
    (grid.work / "in.txt").write_text("input staged to the CE\n")
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\n"
        "executable = /bin/sh\n"
        # No $1 in the script: A-REX's job wrapper would expand it itself.
        "arguments = \"-c 'cat in.txt; echo args $(Process) two; id -un; exit 3'\"\n"
        "transfer_input_files = in.txt\n"
        "transfer_executable = false\n"
        "output = out.txt\nerror = err.txt\nlog = job.log",
        resource=f"arc {CE}",
    )
    (sleeper,) = grid.submit(
        f"x509userproxy = {proxy}\n"
        "executable = /bin/sleep\narguments = 600\ntransfer_executable = false\nlog = job.log",
        resource=f"arc {CE}",
    )

    async def main() -> None:
        async with running(grid):
            await wait_for(
                "both submits", lambda: _arc_id(grid, job) and _arc_id(grid, sleeper), 120
            )
            killed = _arc_id(grid, sleeper)
            assert killed is not None
            grid.queue.act(JobAction.Remove, sleeper, ROOT)
            await wait_for("the removed job to leave", lambda: not grid.in_queue(sleeper), 300)
            await wait_for("the job to finish", lambda: not grid.in_queue(job), 600)
            # rm reached the CE: the job was killed there and cleaned from it.
            await wait_for(
                "the CE to forget the removed job",
                lambda: _state_at_ce(proxy, killed) in (None, "KILLED", "KILLING", "FINISHING"),
                120,
            )

    run(main())
    ad = grid.ad(job)
    assert ad["JobStatus"] == JobStatus.COMPLETED
    assert ad["ExitCode"] == 3
    arc_id = ArcJobId.parse(ad["GridJobId"])
    assert arc_id is not None and arc_id.url == CE
    assert (grid.work / "out.txt").read_text() == "input staged to the CE\nargs 0 two\ngridtest\n"
    # The finished job's session was cleaned from the CE after its output came back.
    assert _state_at_ce(proxy, arc_id.job_id) is None
    log = grid.log()
    assert log.count("027 (") == 2
