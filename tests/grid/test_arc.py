"""The grid manager against a real NorduGrid ARC CE (`arc https://localhost/arex`): skipped
without one, except in CI.

CI brings the CE up with `.ci/arc-up.sh` (A-REX 6 with the fork LRMS and its REST
interface on 127.0.0.1:443, the test PKI of `.ci/grid-pki.sh`); there a missing CE is a
failure. The CE changes a job's state only when its information provider runs (about
once a minute), so every wait here has a deadline of minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Iterator
from pathlib import Path

import pytest
from cryptography import x509

from htgrid.client.x509 import make_proxy, read_proxy
from htgrid.grid.arc import ArcJob, ArcJobId, ArcState
from htgrid.grid.arc._resource import ArcStatus
from htgrid.queue import JobAction, JobId, JobStatus

from ._harness import ROOT, Grid, running, unset, wait_for
from ._oidc import Issuer

HERE = Path(__file__).parent

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
    for attempt in range(4):
        try:
            with urllib.request.urlopen(request, context=_context(proxy), timeout=20) as answer:
                text = answer.read().decode()
                return answer.status, json.loads(text) if text.strip() else None
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except (urllib.error.URLError, ssl.SSLError, ConnectionError):
            # A-REX under load drops a TLS handshake now and then: ask again.
            if attempt == 3:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


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
        # A directory of its own: two workers probing at once must not share the file.
        with tempfile.TemporaryDirectory() as where:
            status, _ = _rest(_new_proxy(Path(where), lifetime=600), "/jobs")
    except (OSError, ssl.SSLError, urllib.error.URLError):
        return False
    return status == 200


@pytest.fixture(autouse=True, scope="module")
def _ce_required() -> None:
    # Probed in a fixture, not at import: pytest-xdist's workers must collect the same
    # tests, and a probe that failed on one worker only made the whole run error.
    if not _ce_up():
        if os.environ.get("CI") == "true":
            pytest.fail("the ARC CE is not up (CI runs .ci/arc-up.sh first)", pytrace=False)
        pytest.skip("no ARC CE here")


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


def _arc_id(grid: Grid, job_id: JobId) -> str | None:
    found = ArcJobId.parse(grid.ad(job_id).get("GridJobId"))
    return None if found is None else found.job_id


def _payloads(arc_ids: set[str]) -> list[int]:
    """The processes the fork LRMS runs for these CE jobs: their `time -o <session>.diag`
    wrapper and its children (a killed CE job's payload lives on, see NOTES)."""
    marks = [f"/{arc_id}.diag".encode() for arc_id in arc_ids]
    wrappers, parents = set(), {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
        if any(mark in cmdline for mark in marks):
            wrappers.add(int(entry.name))
    return sorted(wrappers | {pid for pid, ppid in parents.items() if ppid in wrappers})


@pytest.fixture
def payloads(tmp_path: Path) -> Iterator[set[str]]:
    """CE job ids whose payloads the test's end kills, by pid, found by their session:
    once the CE is done with each job (cleaned, or ended), since a job killed while the
    CE was handing it to the LRMS still starts."""
    arc_ids: set[str] = set()
    yield arc_ids
    if not arc_ids:
        return
    proxy = _new_proxy(tmp_path, lifetime=600)
    deadline = time.monotonic() + 180
    settled: float | None = None
    while time.monotonic() < deadline:
        for pid in _payloads(arc_ids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if settled is None and all(_state_at_ce(proxy, a) in _SETTLED for a in arc_ids):
            settled = time.monotonic()
        # The LRMS submit script of a job killed as it ran may still start it: keep
        # looking a while after the CE settled.
        if settled is not None and time.monotonic() > settled + 20:
            break
        time.sleep(1.0)


#: States after which the CE starts nothing more for a job (None: cleaned away).
_SETTLED = (None, "FINISHED", "FAILED", "KILLED", "WIPED")


@pytest.mark.timeout(900)
def test_a_job_runs_at_the_ce_its_output_comes_back_and_rm_kills_another(
    grid: Grid, payloads: set[str]
) -> None:
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
            payloads.add(killed)
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
    # The finished job's session was cleaned from the CE after its output came back
    # (ARC_JOB_CLEAN queues the clean: A-REX does it at its next pass).
    deadline = time.monotonic() + 180
    while _state_at_ce(proxy, arc_id.job_id) is not None:
        assert time.monotonic() < deadline, "the CE did not clean the finished job"
        time.sleep(1.0)
    log = grid.log()
    assert log.count("027 (") == 2


@pytest.mark.timeout(600)
def test_hold_kills_the_ce_job_and_a_down_ce_makes_jobs_wait(
    grid: Grid, payloads: set[str]
) -> None:
    proxy = _new_proxy(grid.work)
    body = f"x509userproxy = {proxy}\ntransfer_executable = false\nlog = job.log\n"
    (held,) = grid.submit(body + "executable = /bin/sleep\narguments = 600", resource=f"arc {CE}")
    # Nothing listens on port 1: the resource is down (026), the job waits unsubmitted.
    (waiting,) = grid.submit(
        body + "executable = /bin/true", resource="arc https://localhost:1/arex"
    )

    async def main() -> None:
        async with running(grid):
            arc_id = await wait_for("the submit", lambda: _arc_id(grid, held), 120)
            assert isinstance(arc_id, str)
            payloads.add(arc_id)
            grid.queue.act(JobAction.Hold, held, ROOT, reason="by the test")
            await wait_for("the CE job gone", lambda: _state_at_ce(proxy, arc_id) is None, 300)
            await wait_for("the held job let go", lambda: unset(grid.ad(held), "GridJobId"), 60)
            await wait_for(
                "the down resource",
                lambda: "GridResourceUnavailableTime" in grid.ad(waiting),
                60,
            )
            assert unset(grid.ad(waiting), "GridJobId")
            assert grid.ad(waiting)["JobStatus"] == JobStatus.IDLE

    run(main())
    assert grid.ad(held)["JobStatus"] == JobStatus.HELD
    assert grid.ad(held)["HoldReason"] == "by the test"
    log = grid.log()
    assert "026 (" in log and "GridResource: arc https://localhost:1/arex" in log


def _ce_names(proxy: Path, since: float, known: set[str]) -> dict[str, str]:
    """The CE's jobs (of the test user) submitted since `since`, and those of `known` (a
    busy A-REX lists a new job late), by id, with the names they were submitted under
    (earlier tests' jobs may linger while the CE cleans them)."""
    after = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since - 1))
    status, listed = _rest(proxy, "/jobs")
    assert status == 200, listed
    records = [] if listed is None else listed["job"]  # type: ignore[index]
    records = [records] if isinstance(records, dict) else records
    names = {}
    for arc_id in {record["id"] for record in records} | known:
        status, info = _rest(proxy, "/jobs?action=info", {"job": [{"id": arc_id}]})
        job = info["job"] if isinstance(info, dict) else None  # type: ignore[index]
        if isinstance(job, dict) and job.get("status-code") == "200":
            activity = job["info_document"]["ComputingActivity"]
            # A job A-REX has not taken in yet has no SubmissionTime: it is new.
            if str(activity.get("SubmissionTime", after)) >= after:
                names[arc_id] = activity.get("Name", "")
    return names


def _start_manager(grid: Grid) -> subprocess.Popen[bytes]:
    with open(grid.home / "gridmanager.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(HERE / "arc_gm.py"), str(grid.home)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )


@pytest.mark.timeout(600)
def test_kill_9_of_the_grid_manager_makes_one_ce_job_per_job(
    grid: Grid, payloads: set[str]
) -> None:
    proxy = _new_proxy(grid.work)
    ids = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/sleep\narguments = 600\n"
        "transfer_executable = false\nlog = job.log",
        count=4,
        resource=f"arc {CE}",
    )
    rng = random.Random(7)
    started = time.time()
    manager = _start_manager(grid)
    try:
        for _ in range(4):
            time.sleep(rng.uniform(0.5, 3.0))
            manager.send_signal(signal.SIGKILL)
            manager.wait()
            manager = _start_manager(grid)
        deadline = time.monotonic() + 240
        while not all(_arc_id(grid, job_id) for job_id in ids):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline, "the jobs were not all submitted"
            time.sleep(0.5)
        arc_ids = {job_id: _arc_id(grid, job_id) for job_id in ids}
        payloads.update(a for a in arc_ids.values() if a)
        names = {job_id: grid.ad(job_id)["ArcJobName"] for job_id in ids}
        prefix = f"htgrid_{ids[0].cluster}_"
        known = {a for a in arc_ids.values() if a}
        found = _ce_names(proxy, started, known)
        at_ce = {i: n for i, n in found.items() if n.startswith(prefix)}
        payloads.update(at_ce)
        for job_id in ids:
            # Each job's name is on exactly one CE job: the one its GridJobId names.
            mine = [arc_id for arc_id, name in at_ce.items() if name == names[job_id]]
            assert mine == [arc_ids[job_id]], (job_id, mine)
        strays = set(at_ce.values()) - set(names.values())
        # Only a name a CLEAR dropped could be a stray; none was cleared here.
        assert not strays
        grid.queue.act(JobAction.Remove, ids, ROOT)
        while any(map(grid.in_queue, ids)):
            assert manager.poll() is None, "the grid manager exited"
            assert time.monotonic() < deadline + 240, "the jobs did not leave"
            time.sleep(0.5)
    finally:
        manager.send_signal(signal.SIGTERM)
        status = manager.wait(60)
    assert status == 0
    log = grid.log()
    for job_id in ids:
        assert log.count(f"027 ({job_id.cluster:03d}.{job_id.proc:03d}.000)") <= 1


def _delegation_of(arc_id: str) -> str:
    """The delegation a CE job uses, from A-REX's control file of the job."""
    local = Path("/var/spool/arc/jobstatus") / f"job.{arc_id}.local"
    for line in local.read_text().splitlines():
        if line.startswith("delegationid="):
            return line.partition("=")[2]
    raise AssertionError(f"{local} names no delegation")


def _delegated_expiration(proxy: Path, delegation: str) -> int:
    """When the proxy the CE holds under `delegation` expires."""
    request = urllib.request.Request(f"{REST}/delegations/{delegation}?action=get", data=b"")
    with urllib.request.urlopen(request, context=_context(proxy), timeout=20) as answer:
        cert = x509.load_pem_x509_certificates(answer.read())[0]
    return int(cert.not_valid_after_utc.timestamp())


@pytest.mark.timeout(600)
def test_a_renewed_proxy_is_delegated_to_the_ce_again(grid: Grid, payloads: set[str]) -> None:
    proxy = _new_proxy(grid.work, lifetime=1800)
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/sleep\narguments = 600\n"
        "transfer_executable = false\nlog = job.log",
        resource=f"arc {CE}",
    )

    async def main() -> None:
        async with running(grid):
            arc_id = await wait_for("the submit", lambda: _arc_id(grid, job), 120)
            assert isinstance(arc_id, str)
            payloads.add(arc_id)
        # A grid manager started after the submit (a restart) delegates again too: the
        # job's delegation is kept with its GridJobId, not only in the process.
        async with running(grid):
            await wait_for("a status", lambda: "LastRemoteStatusUpdate" in grid.ad(job), 180)
            # The user renews the proxy in place (as grid-proxy-init or MyProxy would).
            renewed = grid.work / "renewed"
            renewed.write_bytes(_new_proxy(grid.work / "..", lifetime=6 * 3600).read_bytes())
            renewed.replace(proxy)
            expected = read_proxy(proxy).expiration
            await wait_for(
                "the delegation renewed",
                lambda: grid.ad(job).get("DelegatedProxyExpiration") == expected,
                180,
            )
            # The CE holds the renewed proxy under the job's delegation (A-REX copies it
            # into the job when it next needs it).
            delegation = _delegation_of(arc_id)
            assert _delegated_expiration(proxy, delegation) == expected
            grid.queue.act(JobAction.Remove, job, ROOT)
            await wait_for("the job to leave", lambda: not grid.in_queue(job), 300)

    run(main())


@pytest.mark.timeout(600)
def test_a_job_with_a_token_runs_without_a_proxy(grid: Grid) -> None:
    """scitokens_file: the ARC GAHP presents the bearer token (no proxy at all); A-REX
    checks it against the issuer's keys (arc.conf's authtokens for https://localhost:8443)."""
    issuer = Issuer(8443, "/etc/grid-security/hostcert.pem", "/etc/grid-security/hostkey.pem")
    try:
        token = grid.work / "token"
        token.write_text(issuer.token(CE) + "\n")
        token.chmod(0o600)
        (job,) = grid.submit(
            f"scitokens_file = {token}\nexecutable = /bin/sh\n"
            "arguments = \"-c 'echo token job; id -un'\"\ntransfer_executable = false\n"
            "output = out.txt\nlog = job.log",
            resource=f"arc {CE}",
        )
        forged = grid.work / "forged"
        header, claims, _ = issuer.token(CE).split(".")
        forged.write_text(f"{header}.{claims}.{'A' * 342}\n")
        (refused,) = grid.submit(
            f"scitokens_file = {forged}\nexecutable = /bin/true\ntransfer_executable = false",
            resource=f"arc {CE}",
        )

        async def main() -> None:
            async with running(grid):
                await wait_for("the job to finish", lambda: not grid.in_queue(job), 420)
                await wait_for(
                    "the forged token's resource down",
                    lambda: "GridResourceUnavailableTime" in grid.ad(refused),
                    60,
                )

        run(main())
    finally:
        issuer.close()
    assert grid.ad(job)["JobStatus"] == JobStatus.COMPLETED
    assert (grid.work / "out.txt").read_text() == "token job\ngridtest\n"
    # A forged token reaches nothing: its resource is down, the job unsubmitted.
    assert unset(grid.ad(refused), "GridJobId")


def test_a_job_whose_exit_was_saved_before_a_crash_completes_with_it(grid: Grid) -> None:
    """Killed after the exit code was committed (ArcExitCode) and the CE's job cleaned:
    the next grid manager finishes the clean (the CE no longer knows the job: fine) and
    completes the job with that code, sending nothing else."""
    proxy = _new_proxy(grid.work)
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/true\ntransfer_executable = false",
        resource=f"arc {CE}",
    )
    grid.queue.update(
        job,
        {
            "GridJobId": f"arc {CE} NoSuchJobAtTheCE0123456789",
            "ArcJobName": "htgrid_1_0_0123456789ab",
            "ArcExitCode": 5,
            "Managed": "External",
        },
    )

    async def main() -> None:
        async with running(grid):
            await wait_for("the job to complete", lambda: not grid.in_queue(job), 120)

    run(main())
    ad = grid.ad(job)
    assert ad["JobStatus"] == JobStatus.COMPLETED
    assert ad["ExitCode"] == 5


@pytest.mark.timeout(600)
def test_a_job_missing_from_the_ces_list_is_asked_about_before_it_is_given_up(
    grid: Grid, payloads: set[str]
) -> None:
    """A busy A-REX lists a new job late: a job the list lacks is asked about on its own
    (ARC_JOB_STATUS); only "not found" holds it."""
    proxy = _new_proxy(grid.work)
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\nexecutable = /bin/sleep\narguments = 600\n"
        "transfer_executable = false",
        resource=f"arc {CE}",
    )

    async def main() -> None:
        async with running(grid) as manager:
            arc_id = await wait_for("the submit", lambda: _arc_id(grid, job), 120)
            assert isinstance(arc_id, str)
            payloads.add(arc_id)
            task = manager.jobs[job]
            await wait_for("a status", lambda: task.state is ArcState.SUBMITTED, 180)
            assert isinstance(task, ArcJob)
            # What a list taken before A-REX took the job in says: nothing about it.
            task.arc_status(ArcStatus(None, task.arc.poll_seq + 1, time.time()))
            await wait_for("the answer handled", lambda: not task._fresh)
            assert task.state is ArcState.SUBMITTED
            assert grid.ad(job)["JobStatus"] != JobStatus.HELD
            grid.queue.act(JobAction.Remove, job, ROOT)
            await wait_for("the job to leave", lambda: not grid.in_queue(job), 300)

    run(main())
