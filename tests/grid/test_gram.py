"""The grid manager against a real Globus GRAM5 gatekeeper (`gt2`/`gt5
localhost:2119/jobmanager-fork`): skipped without one, except in CI.

CI brings the gatekeeper up with `.ci/gram-up.sh` (the Grid Community Toolkit's
globus-gatekeeper and fork job manager in the loopback-only network namespace
htgrid-gram, the test PKI of `.ci/grid-pki.sh`); there a missing gatekeeper is a failure.
The gt GAHP runs in the same namespace (gram_env.GRAM_GAHP). Jobs run as the mapped user
gridtest; what they leave in its home is removed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path

import pytest

from htgrid.client.x509 import make_proxy, read_proxy
from htgrid.grid import GRID_TYPES, GridManager
from htgrid.grid.gram import GramJobId, gram_grid_type
from htgrid.grid.gram._table import TABLE
from htgrid.queue import JobAction, JobId, JobStatus

from ._harness import FAST, ROOT, Grid, unset, wait_for
from ._harness import running as harness_running
from .gram_env import CONTACT, GRAM_GAHP, NETNS, PKI

HERE = Path(__file__).parent
GRIDTEST_HOME = Path("/home/gridtest")


def _new_proxy(where: Path, lifetime: float = 6 * 3600, name: str = "x509up_test") -> Path:
    proxy = where / name
    cert, key = (PKI / "user.pem").read_bytes(), (PKI / "user.key").read_bytes()
    fresh = where / f".{name}.new"
    fresh.write_bytes(make_proxy(cert, key, lifetime=lifetime))
    fresh.chmod(0o600)
    fresh.replace(proxy)
    return proxy


def _gatekeeper_up() -> bool:
    if not (PKI / "user.pem").exists():
        return False
    where = Path(os.environ.get("TMPDIR", "/tmp"))
    proxy = _new_proxy(where, lifetime=600, name=f"x509up_gramcheck_{os.getpid()}")
    env = dict(os.environ, X509_USER_PROXY=str(proxy), X509_USER_CERT=str(proxy))
    env["X509_USER_KEY"] = str(proxy)
    try:
        done = subprocess.run(
            ["ip", "netns", "exec", NETNS, "globusrun", "-a", "-r", CONTACT],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        proxy.unlink()
    return done.returncode == 0


@pytest.fixture(autouse=True, scope="module")
def _gatekeeper_required() -> None:
    # Probed in a fixture, not at import: pytest-xdist's workers must collect the same
    # tests, and a probe that failed on one worker only made the whole run error.
    if not _gatekeeper_up():
        if os.environ.get("CI") == "true":
            pytest.fail(
                "the GRAM gatekeeper is not up (CI runs .ci/gram-up.sh first)", pytrace=False
            )
        pytest.skip("no GRAM gatekeeper here")


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


TYPES = {**GRID_TYPES, "gt2": gram_grid_type(GRAM_GAHP)}


def running(grid: Grid) -> contextlib.AbstractAsyncContextManager[GridManager]:
    """A grid manager with the gt2 type's GAHP in the namespace, stopped on exit."""
    return harness_running(grid, FAST, TYPES)


def _pids(mark: str) -> list[int]:
    """The processes whose command line holds `mark`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if mark.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


@pytest.fixture
def cleanup(grid: Grid) -> Iterator[str]:
    """A mark for the test's payloads (killed at the end by pid) and its files in
    gridtest's home; the GASS servers the test's GAHPs left are stopped."""
    mark = f"htgrid-{uuid.uuid4().hex[:10]}"
    yield mark
    for pid in _pids(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for path in GRIDTEST_HOME.glob(f"{mark}*"):
        path.unlink()
    for state in (grid.home / "gram").glob("gass-*.json"):
        with contextlib.suppress(ValueError, OSError, ProcessLookupError):
            os.kill(int(json.loads(state.read_text())["pid"]), signal.SIGKILL)


def _contact(grid: Grid, job_id: JobId) -> str | None:
    found = GramJobId.parse(grid.ad(job_id).get("GridJobId"))
    return None if found is None else found.contact


def test_the_state_table_is_the_one_the_docstring_draws() -> None:
    from htgrid.grid.gram import _table

    doc = _table.__doc__ or ""
    drawn = [line.strip() for line in doc.splitlines() if line.startswith("    ")]
    assert [" ".join(line.split()) for line in drawn] == [
        " ".join(line.split()) for line in TABLE.draw()
    ]


@pytest.mark.timeout(300)
def test_jobs_run_at_the_gatekeeper_their_output_comes_back_and_rm_kills_another(
    grid: Grid, cleanup: str
) -> None:
    proxy = _new_proxy(grid.work)
    (grid.work / "in.txt").write_text("input staged to the job manager\n")
    script = grid.work / "job.sh"
    script.write_text('#!/bin/sh\necho "script $1"; id -un >&2\n')
    script.chmod(0o755)
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\n"
        "executable = /bin/sh\n"
        "arguments = \"-c 'cat in.txt; cat; echo $1 made > made.txt; id -un' - args\"\n"
        "input = in.txt\n"
        "transfer_input_files = in.txt\n"
        "transfer_output_files = made.txt\n"
        "transfer_executable = false\n"
        "output = out.txt\nerror = err.txt\nlog = job.log",
        resource=f"gt2 {CONTACT}",
    )
    (staged,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = job.sh\narguments = five\n"
        "output = script.out\nerror = script.err\nlog = job.log",
        resource=f"gt5 {CONTACT}",
    )
    (sleeper,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/bash\n"
        f"arguments = \"-c 'exec -a {cleanup} sleep 600'\"\n"
        "transfer_executable = false\nlog = job.log",
        resource=f"gt2 {CONTACT}",
    )

    async def main() -> None:
        async with running(grid):
            await wait_for(
                "the sleeper to run",
                # GridJobStatus is written before the job's own 001 and JobStatus.
                lambda: (
                    grid.ad(sleeper).get("GridJobStatus") == "ACTIVE"
                    and grid.ad(sleeper)["JobStatus"] == JobStatus.RUNNING
                    and _pids(cleanup)
                ),
                120,
            )
            grid.queue.act(JobAction.Remove, sleeper, ROOT)
            await wait_for("the removed job to leave", lambda: not grid.in_queue(sleeper), 120)
            # rm reached the job manager: the job's process is gone.
            await wait_for("the payload killed", lambda: not _pids(cleanup), 60)
            await wait_for(
                "both jobs to finish",
                lambda: not grid.in_queue(job) and not grid.in_queue(staged),
                180,
            )

    run(main())
    ad = grid.ad(job)
    assert ad["JobStatus"] == JobStatus.COMPLETED
    assert ad["ExitCode"] == 0
    grid_id = GramJobId.parse(ad["GridJobId"])
    assert grid_id is not None and grid_id.kind == "gt2" and grid_id.resource == CONTACT
    text = "input staged to the job manager\n"
    assert (grid.work / "out.txt").read_text() == f"{text}{text}gridtest\n"
    assert (grid.work / "made.txt").read_text() == "args made\n"
    assert (grid.work / "script.out").read_text() == "script five\n"
    assert (grid.work / "script.err").read_text() == "gridtest\n"
    assert GramJobId.parse(grid.ad(staged)["GridJobId"]).kind == "gt5"  # type: ignore[union-attr]
    log = grid.log()
    assert log.count("027 (") == 3


@pytest.mark.timeout(300)
def test_without_version_detection_a_gt2_job_streams_its_output_as_gram2(
    grid: Grid, cleanup: str, caplog: pytest.LogCaptureFixture
) -> None:
    """GRAM_VERSION_DETECTION = false: the gt2 resource is taken for GRAM2 without asking
    its version; stdout and stderr are streamed to the GASS server as the job writes."""
    caplog.set_level("INFO", logger="htgrid.grid")
    with open(grid.home / "htgrid.conf", "a") as conf:
        conf.write("GRAM_VERSION_DETECTION = false\n")
    proxy = _new_proxy(grid.work)
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/sh\n"
        "arguments = \"-c 'echo streamed; echo to err >&2'\"\n"
        "transfer_executable = false\noutput = out.txt\nerror = err.txt\nlog = job.log",
        resource=f"gt2 {CONTACT}",
    )

    async def main() -> None:
        async with running(grid):
            await wait_for("the job to finish", lambda: not grid.in_queue(job), 120)

    run(main())
    assert grid.ad(job)["JobStatus"] == JobStatus.COMPLETED
    assert (grid.work / "out.txt").read_text() == "streamed\n"
    assert (grid.work / "err.txt").read_text() == "to err\n"
    assert "the job manager is GRAM5" not in caplog.text


@pytest.mark.timeout(300)
def test_a_job_the_job_manager_refuses_is_held_with_globus_s_reason(
    grid: Grid, cleanup: str
) -> None:
    proxy = _new_proxy(grid.work)
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /no/such/program\n"
        "transfer_executable = false\nlog = job.log",
        resource=f"gt2 {CONTACT}",
    )

    async def main() -> None:
        async with running(grid):
            await wait_for("the hold", lambda: grid.ad(job)["JobStatus"] == JobStatus.HELD, 120)

    run(main())
    ad = grid.ad(job)
    assert ad["HoldReason"] == "Globus error 5: the executable does not exist"
    assert (ad["HoldReasonCode"], ad["HoldReasonSubCode"]) == (2, 5)  # GlobusGramError


@pytest.mark.timeout(300)
def test_hold_cancels_the_gram_job_and_a_down_gatekeeper_makes_jobs_wait(
    grid: Grid, cleanup: str
) -> None:
    proxy = _new_proxy(grid.work)
    body = f"x509userproxy = {proxy}\ntransfer_executable = false\nlog = job.log\n"
    (held,) = grid.submit(
        body + f"executable = /bin/bash\narguments = \"-c 'exec -a {cleanup} sleep 600'\"",
        resource=f"gt2 {CONTACT}",
    )
    # Nothing listens on port 2120: the resource is down (026), the job waits unsubmitted.
    (waiting,) = grid.submit(
        body + "executable = /bin/true", resource="gt2 localhost:2120/jobmanager"
    )

    async def main() -> None:
        async with running(grid):
            await wait_for("the payload to run", lambda: _pids(cleanup), 120)
            grid.queue.act(JobAction.Hold, held, ROOT, reason="by the test")
            await wait_for("the payload killed", lambda: not _pids(cleanup), 120)
            await wait_for("the held job let go", lambda: unset(grid.ad(held), "GridJobId"), 60)
            await wait_for(
                "the down resource", lambda: "GridResourceUnavailableTime" in grid.ad(waiting), 60
            )
            assert unset(grid.ad(waiting), "GridJobId")
            assert grid.ad(waiting)["JobStatus"] == JobStatus.IDLE

    run(main())
    assert grid.ad(held)["JobStatus"] == JobStatus.HELD
    assert grid.ad(held)["HoldReason"] == "by the test"
    log = grid.log()
    assert "026 (" in log and "GridResource: gt2 localhost:2120/jobmanager" in log


def _start_manager(grid: Grid) -> subprocess.Popen[bytes]:
    with open(grid.home / "gridmanager.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(HERE / "gram_gm.py"), str(grid.home)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )


@pytest.mark.timeout(400)
def test_kill_9_of_the_grid_manager_or_its_gahp_runs_each_job_once(
    grid: Grid, cleanup: str
) -> None:
    """The grid manager killed at random moments while it submits, then the GAHP server
    killed while the jobs run: each job runs exactly once (each run appends a line to
    its own file) and its output still comes back."""
    proxy = _new_proxy(grid.work)
    ids = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/sh\n"
        f"arguments = \"-c 'echo run >> $HOME/{cleanup}.$(Process); sleep 6; echo done'\"\n"
        "transfer_executable = false\noutput = out.$(Process)\nlog = job.log",
        count=4,
        resource=f"gt2 {CONTACT}",
    )
    rng = random.Random(11)
    manager = _start_manager(grid)
    try:
        for _ in range(4):
            time.sleep(rng.uniform(0.3, 2.5))
            manager.send_signal(signal.SIGKILL)
            manager.wait()
            manager = _start_manager(grid)
        deadline = time.monotonic() + 180
        while not all(grid.ad(j).get("GridJobStatus") == "ACTIVE" for j in ids):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline, "the jobs did not all run"
            time.sleep(0.2)
        # The states may be an earlier grid manager's: wait for this one's GAHP server,
        # past its start-up (a server killed in its handshake is another story).
        log_file = grid.home / "gridmanager.log"

        def started() -> list[int]:
            log = log_file.read_text() if log_file.exists() else ""
            mine = [p for p in _pids("gahp") if _parent(p) == manager.pid]
            return [p for p in mine if f"started (pid {p})" in log]

        while not (gahps := started()):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline, "no GAHP server under the grid manager"
            time.sleep(0.2)
        for pid in gahps:
            os.kill(pid, signal.SIGKILL)
        while any(map(grid.in_queue, ids)):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline + 120, "the jobs did not finish"
            time.sleep(0.3)
    finally:
        manager.send_signal(signal.SIGTERM)
        status = manager.wait(60)
    assert status == 0
    for job_id in ids:
        assert grid.ad(job_id)["JobStatus"] == JobStatus.COMPLETED
        runs = GRIDTEST_HOME / f"{cleanup}.{job_id.proc}"
        assert runs.read_text() == "run\n", job_id
        assert (grid.work / f"out.{job_id.proc}").read_text() == "done\n"
    log = (grid.home / "gridmanager.log").read_text()
    assert "is gone: restarting" in log


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rpartition(")")[2].split()[1])


@pytest.mark.timeout(300)
def test_a_renewed_proxy_is_delegated_to_the_job_again_and_an_expired_one_holds(
    grid: Grid, cleanup: str
) -> None:
    proxy = _new_proxy(grid.work, lifetime=1800)
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/bash\n"
        f"arguments = \"-c 'exec -a {cleanup} sleep 600'\"\n"
        "transfer_executable = false\nlog = job.log",
        resource=f"gt2 {CONTACT}",
    )

    async def main() -> None:
        async with running(grid):
            await wait_for(
                "the job to run", lambda: grid.ad(job).get("GridJobStatus") == "ACTIVE", 120
            )
            # The user renews the proxy in place (as grid-proxy-init or MyProxy would).
            _new_proxy(grid.work, lifetime=6 * 3600)
            expected = read_proxy(proxy).expiration
            await wait_for(
                "the proxy delegated again",
                lambda: grid.ad(job).get("DelegatedProxyExpiration") == expected,
                60,
            )
            # The job manager holds the renewed proxy for the job.
            held = [
                read_proxy(path).expiration
                for path in (GRIDTEST_HOME / ".globus" / "job").rglob("x509_user_proxy")
            ]
            assert expected in held
            # An expired proxy holds the job with a clear reason. Nothing can reach the
            # job manager with it: the job is cancelled there once the proxy is renewed.
            _new_proxy(grid.work, lifetime=-60)
            await wait_for("the hold", lambda: grid.ad(job)["JobStatus"] == JobStatus.HELD, 60)
            reason = grid.ad(job)["HoldReason"]
            assert "proxy" in reason.lower() and "expired" in reason.lower()
            assert _pids(cleanup)
            _new_proxy(grid.work)
            await wait_for("the payload killed", lambda: not _pids(cleanup), 120)
            await wait_for("the job let go", lambda: unset(grid.ad(job), "GridJobId"), 60)

    run(main())


def _gahp(proxy: Path, state_dir: Path, *requests: tuple[str, ...]) -> list[list[str]]:
    """Each request through a gt GAHP server of its own (in the namespace), answered in
    order: the result's fields after the request id."""
    from htgrid.gahp._codec import decode_fields, encode_request

    gahp = subprocess.Popen(
        [*GRAM_GAHP, "--proxy", str(proxy), "--state-dir", str(state_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert gahp.stdin is not None and gahp.stdout is not None
    try:
        gahp.stdout.readline()  # the banner
        results: dict[int, list[str]] = {}
        for number, (name, *args) in enumerate(requests, 1):
            gahp.stdin.write(encode_request(name, args, number))
            gahp.stdin.flush()
            assert gahp.stdout.readline().startswith(b"S")
        deadline = time.monotonic() + 120
        while len(results) < len(requests):
            assert time.monotonic() < deadline, "the GAHP server did not answer"
            gahp.stdin.write(b"RESULTS\n")
            gahp.stdin.flush()
            count = int(gahp.stdout.readline().split()[1])
            for _ in range(count):
                fields = decode_fields(gahp.stdout.readline().rstrip(b"\r\n"))
                results[int(fields[0])] = fields[1:]
            if len(results) < len(requests):
                time.sleep(0.1)
        gahp.stdin.write(b"QUIT\n")
        gahp.stdin.flush()
    finally:
        gahp.stdin.close()
        gahp.wait(30)
        gahp.stdout.close()
    return [results[n] for n in range(1, len(requests) + 1)]


@pytest.mark.timeout(300)
def test_a_saved_but_uncommitted_submit_is_committed_after_a_restart_and_runs_once(
    grid: Grid, cleanup: str
) -> None:
    """The grid manager died between saving the job contact and the commit: the next one
    asks the job manager, finds the job uncommitted, commits it; it runs once, its output
    comes back. A request that was never saved (the crash came before) stays uncommitted
    at the job manager, which never runs it."""
    from htgrid.grid.gram._rsl import job_rsl

    proxy = _new_proxy(grid.work)
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/sh\n"
        f"arguments = \"-c 'echo run >> $HOME/{cleanup}.saved; echo out'\"\n"
        "transfer_executable = false\noutput = out.txt\nlog = job.log",
        resource=f"gt2 {CONTACT}",
    )
    orphan_rsl = f'&(executable=/bin/sh)(arguments=-c "echo run >> $HOME/{cleanup}.orphan")'
    orphan_rsl += "(two_phase=600)"
    state = grid.home / "gram"
    (gass,) = _gahp(proxy, state, ("GASS_SERVER_INIT", "0"))
    assert gass[0] == "0"
    rsl = job_rsl(grid.ad(job), gass[1], gram5=True)
    saved, orphan = _gahp(
        proxy,
        state,
        ("GRAM_JOB_REQUEST", CONTACT, "NULL", "1", rsl),
        ("GRAM_JOB_REQUEST", CONTACT, "NULL", "1", orphan_rsl),
    )
    assert saved[0] == orphan[0] == "110"  # waiting for the commit
    grid_id = f"gt2 {CONTACT} {saved[1]}"
    grid.queue.update(
        job, {"GridJobId": grid_id, "GridJobStatus": "UNSUBMITTED", "Managed": "External"}
    )

    async def main() -> None:
        async with running(grid):
            await wait_for(
                "the job to finish",
                lambda: not grid.in_queue(job) or grid.ad(job)["JobStatus"] == JobStatus.HELD,
                120,
            )

    run(main())
    assert grid.ad(job).get("HoldReason") is None, grid.ad(job).get("HoldReason")
    assert grid.ad(job)["JobStatus"] == JobStatus.COMPLETED
    assert grid.ad(job)["GridJobId"] == grid_id  # the same GRAM job, not a new one
    assert (GRIDTEST_HOME / f"{cleanup}.saved").read_text() == "run\n"
    assert (grid.work / "out.txt").read_text() == "out\n"
    # The unsaved request is still waiting for a commit nobody will send.
    (status,) = _gahp(proxy, state, ("GRAM_JOB_STATUS", orphan[1]))
    assert status[0] == "0" and status[2] == "32", status  # UNSUBMITTED
    assert not (GRIDTEST_HOME / f"{cleanup}.orphan").exists()
    (cancel,) = _gahp(proxy, state, ("GRAM_JOB_CANCEL", orphan[1]))
    assert cancel == ["0"]

    # Killed after DONE and the exit code were saved, before (or after) COMMIT_END: the
    # next grid manager ends the GRAM job (which the job manager may have forgotten)
    # and completes the job with that code.
    (done,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/true\ntransfer_executable = false",
        resource=f"gt2 {CONTACT}",
    )
    grid.queue.update(
        done,
        {"GridJobId": grid_id, "GridJobStatus": "DONE", "GlobusExitCode": 4, "Managed": "External"},
    )

    async def finish() -> None:
        async with running(grid):
            await wait_for("the done job to complete", lambda: not grid.in_queue(done), 120)

    run(finish())
    assert grid.ad(done)["JobStatus"] == JobStatus.COMPLETED
    assert grid.ad(done)["ExitCode"] == 4
