"""A schedd killed (kill -9) or stopped (`htgrid down`) while a job runs on an execute
node of another host: the job runs on there, and the restarted schedd reconnects to it
(022, 023) and sees it through, once. Past the job's lease (JobLeaseDuration) the node
kills the job and frees its slot by itself, and the schedd, told the claim is gone,
gives the run up (024) and runs the job again; a node it cannot reach keeps the job
from running again until the lease has surely run out there."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import htcondor2
import pytest

from htgrid.classad import ClassAd, Value
from htgrid.startd import StartdClient
from htgrid.testing import PersonalPool, run_cli, wait_for
from htgrid.testing.node import CENTRAL_MANAGER, ExecuteNode
from htgrid.testing.ports import free_port

from .conftest import FAST
from .test_remote_jobs import _history, _script, _submit

# The job counts its starts; it takes a lock on start, and a start that finds it taken
# (another run of the same job alive) says so: the job's own witness of running twice.
_JOB = """exec 9>>{lock}
if flock -n 9; then echo "start $$" >> {starts}; else echo "OVERLAP $$" >> {starts}; fi
while [ ! -e {go} ]; do sleep 0.1; done
echo "done $$"
"""
# HTCondor's reasons in the events, as its shadow and schedd write them.
RESTARTED = "Local schedd and job shadow died, schedd now running again"
CUT = "Socket between submit and execute hosts closed unexpectedly"
LEASE = 20  # seconds: condor_submit's least job_lease_duration


@pytest.fixture()
def pool(tmp_path: Path) -> Iterator[PersonalPool]:
    # A fixed collector port: the nodes find the pool again after its restart.
    config = {**FAST, "COLLECTOR_HOST": f"127.0.0.1:{free_port()}"}
    with PersonalPool(
        tmp_path / "pool", kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=config
    ) as running:
        yield running


def _node(pool: PersonalPool, tmp_path: Path, name: str, address: str) -> ExecuteNode:
    node = ExecuteNode(pool, tmp_path / name, name, address)
    node.start()
    node.joined()
    return node


def _runs(where: Path, name: str) -> set[int]:
    """The runs of the job's script (by its name: unique to each test) now alive in a
    sandbox under `where` (the test's tmp_path: other test runs on the host may run the
    same test): the sessions of its processes (each run is a session of its own; a
    shell's child, forked and not yet exec'd, shows the script's command line too)."""
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if name.encode() not in f.read():
                        continue
                if Path(os.readlink(f"/proc/{entry.name}/cwd")).is_relative_to(where):
                    found.add(os.getsid(int(entry.name)))
            except OSError:
                continue
    return found


def _job(pool: PersonalPool, job: str) -> ClassAd:
    with pool.client() as schedd:
        return schedd.get(job)


def _started(pool: PersonalPool, job: str) -> ClassAd:
    """The job's ad once its start is recorded: the node answers the activation once the
    job's process runs, which may have written its line first."""

    def recorded() -> ClassAd | None:
        ad = _job(pool, job)
        return ad if "RemoteHost" in ad else None

    return wait_for(recorded, timeout=30, what=f"the start of {job} recorded")


def _events(log: Path, job: str) -> list[int]:
    """The types of the job's events, once its log has its end (005): the log is written
    from the queue's changes, just after them (a job is in the history a moment before)."""

    def ended() -> list[int] | None:
        types = [int(event.type) for event in _read(log, job)]
        return types if types[-1:] == [5] else None

    return wait_for(ended, 30, what=f"job {job}'s 005 in {log}")


def _read(log: Path, job: str) -> list[htcondor2.JobEvent]:
    """The job's events, as htcondor2.JobEventLog reads them."""
    return [
        event
        for event in htcondor2.JobEventLog(str(log)).events(stop_after=0)
        if f"{event.cluster}.{event.proc}" == job
    ]


def _claims(node: ExecuteNode) -> int:
    """The claims the node holds now, as it says on its own socket."""

    async def ask() -> int:
        async with StartdClient(node.config.socket) as startd:
            return int((await startd.health())["claims"])

    return asyncio.run(ask())


def _submit_job(
    pool: PersonalPool, tmp_path: Path, name: str, lease: int = LEASE
) -> tuple[str, Path, Path]:
    work = tmp_path / "work"
    starts, go = work / "starts", work / "go"
    body = _JOB.format(lock=work / "lock", starts=starts, go=go)
    _script(work / name, body)
    cluster = _submit(
        pool,
        work,
        f"executable = {name}\nshould_transfer_files = YES\nlog = job.log\noutput = job.out\n"
        f"request_memory = 16\njob_max_vacate_time = 1\njob_lease_duration = {lease}\nqueue\n",
    )
    return f"{cluster}.0", starts, go


def _renewal(pool: PersonalPool, job: str) -> int:
    """The job's LastJobLeaseRenewal, as `htgrid q -l` shows it (0: none yet)."""
    status, out, err = run_cli(pool.home, "q", "-l", job)
    assert status == 0, err
    lines = [line for line in out.splitlines() if line.startswith("LastJobLeaseRenewal = ")]
    return int(lines[0].split(" = ", 1)[1]) if lines else 0


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def _waits_for_the_lease(pool: PersonalPool, job: str, starts: Path) -> None:
    """The schedd finds the job's node unreachable and keeps the job Running, disconnected;
    -better-analyze says why; and, free nodes notwithstanding, it is not run again while
    the old claim may still run it, until shortly before the lease's end (a stopped node
    cannot enforce it: the test lets it go on by then)."""
    deadline = time.monotonic() + 90
    while not (ad := _job(pool, job)).get("JobLeaseExpiration"):
        assert ad["JobStatus"] == 2 and len(_lines(starts)) == 1
        assert time.monotonic() < deadline, "the schedd did not find the node unreachable"
        time.sleep(0.2)
    assert ad["JobStatus"] == 2 and isinstance(ad["JobDisconnectedDate"], int)
    status, out, err = run_cli(pool.home, "q", "-better-analyze", job)
    assert status == 0, err
    assert "could not be reached" in out and "is not matched again until the lease" in out
    while time.time() < ad["JobLeaseExpiration"] - 4:
        assert _job(pool, job)["JobStatus"] == 2
        assert len(_lines(starts)) == 1
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_restarted_schedd_reconnects_to_the_job_running_on_its_node(
    pool: PersonalPool, tmp_path: Path, how: str
) -> None:
    node = _node(pool, tmp_path, "node2", "127.0.0.2")
    try:
        job, starts, go = _submit_job(pool, tmp_path, "once_a.sh")
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        (first,) = _runs(tmp_path, "once_a.sh")
        # The schedd records when the claim's lease was last renewed (first with the
        # job's start, perhaps after the job's own line), and renews it.
        started = wait_for(lambda: _renewal(pool, job), 30, what="the job's start recorded")
        renewed = wait_for(
            lambda: (r := _renewal(pool, job)) > started and r, 30, what="a lease renewal"
        )
        if how == "kill":
            pool.kill()
        else:
            pool.stop()  # htgrid down: jobs with a lease are left to run
        assert first in _runs(tmp_path, "once_a.sh")  # the job outlives the schedd on its node
        pool.start()
        ad = wait_for(
            lambda: (a := _job(pool, job)).get("NumJobReconnects") == 1 and a,
            timeout=60,
            what="the schedd to reconnect to the job",
        )
        assert ad["JobStatus"] == 2 and ad.eval("JobDisconnectedDate") is Value.Undefined
        assert ad["LastJobLeaseRenewal"] >= renewed  # kept, and renewed at the reconnection
        assert _runs(tmp_path, "once_a.sh") == {first}  # the same run, never a second one
        go.touch()
        done = wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert done["JobStatus"] == 4 and done["ExitCode"] == 0
        assert done["NumJobStarts"] == 1
        assert [line.split()[0] for line in _lines(starts)] == ["start"]
        assert (tmp_path / "work" / "job.out").read_text() == f"done {first}\n"
        # Started, disconnected by the restart, reconnected, terminated: once each.
        log = tmp_path / "work" / "job.log"
        assert _events(log, job) == [0, 1, 22, 23, 5]
        lost, back = (e for e in _read(log, job) if int(e.type) in (22, 23))
        assert lost["DisconnectReason"] == RESTARTED
        assert lost["StartdAddr"].startswith("<127.0.0.2:") and "node2" in lost["StartdName"]
        assert back["StartdAddr"] == lost["StartdAddr"]
        assert back["StartdName"] == lost["StartdName"]
        # The claim is released after the job's end is recorded: its record then goes.
        claims = pool.config.spool / "claims"
        wait_for(lambda: not list(claims.glob("*.claim")), 30, what="the claim released")
    finally:
        node.close()


def test_past_its_lease_the_node_ends_the_job_and_the_restarted_schedd_runs_it_again(
    pool: PersonalPool, tmp_path: Path
) -> None:
    # The node tries its collector again each UPDATE_INTERVAL while it is down: short.
    node = ExecuteNode(
        pool, tmp_path / "node2", "node2", "127.0.0.2", config={"UPDATE_INTERVAL": 2}
    )
    node.start()
    node.joined()
    try:
        job, starts, go = _submit_job(pool, tmp_path, "once_c.sh")
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        _started(pool, job)  # its 001 and 004 are asserted: recorded before the kill
        assert _claims(node) == 1
        pool.kill()  # and it stays down beyond the job's lease
        # The node enforces the lease by itself: the job killed, the slot free.
        wait_for(
            lambda: not _runs(tmp_path, "once_c.sh"), timeout=LEASE + 30, what="the job killed"
        )
        wait_for(lambda: _claims(node) == 0, timeout=30, what="the claim released")
        assert "within the lease: vacating" in node.log()
        pool.start()
        wait_for(lambda: len(_lines(starts)) == 2, timeout=90, what="the job to run again")
        go.touch()
        done = wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert done["JobStatus"] == 4 and done["ExitCode"] == 0
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
        # Its JobLeaseDuration passed since its LastJobLeaseRenewal: as HTCondor's, the
        # restarted schedd tries no reconnection (no 022, 024), the job goes back to idle.
        assert _events(tmp_path / "work" / "job.log", job) == [0, 1, 4, 1, 5]
    finally:
        node.close()


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_job_with_no_lease_is_not_reconnected_to_it_runs_again_once(
    pool: PersonalPool, tmp_path: Path, how: str
) -> None:
    """job_lease_duration = 0: HTCondor's schedd never reconnects to such a job. Its run
    is ended on the node (by the stopping schedd, or the restarted one) before the job
    runs again, never beside it."""
    # The node advertises its slot again soon to the restarted collector.
    node = ExecuteNode(
        pool, tmp_path / "node2", "node2", "127.0.0.2", config={"UPDATE_INTERVAL": 2}
    )
    node.start()
    node.joined()
    try:
        job, starts, go = _submit_job(pool, tmp_path, "nolease_a.sh", lease=0)
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        _started(pool, job)  # its 001 and 004 are asserted: recorded before the kill
        assert _job(pool, job)["JobLeaseDuration"] == 0
        if how == "kill":
            pool.kill()
        else:
            pool.stop()  # htgrid down vacates it: it would not be reconnected to
            assert not _runs(tmp_path, "nolease_a.sh")
        pool.start()
        wait_for(lambda: len(_lines(starts)) == 2, timeout=90, what="the job to run again")
        go.touch()
        done = wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert done["JobStatus"] == 4 and done["NumJobStarts"] == 2
        assert "NumJobReconnects" not in done
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]  # no OVERLAP
        assert _events(tmp_path / "work" / "job.log", job) == [0, 1, 4, 1, 5]
    finally:
        node.close()


_SLOW_TO_DIE = """trap 'echo term >> {terms}; sleep 12; exit 143' TERM
echo "start $$" >> {starts}
while [ ! -e {go} ]; do sleep 0.1; done
"""


def test_a_node_ending_the_claim_at_the_restart_is_asked_again_not_disconnected(
    pool: PersonalPool, tmp_path: Path
) -> None:
    """The schedd comes back while the node is ending the claim (its lease ran out, its
    job slow to die): the node answers, so the job is not disconnected (022, 024); the
    schedd asks again until the claim is gone, then the job runs again."""
    node = ExecuteNode(
        pool, tmp_path / "node2", "node2", "127.0.0.2", config={"UPDATE_INTERVAL": 2}
    )
    node.start()
    node.joined()
    try:
        work = tmp_path / "work"
        starts, go, terms = work / "starts", work / "go", work / "terms"
        _script(work / "slow_die.sh", _SLOW_TO_DIE.format(starts=starts, go=go, terms=terms))
        cluster = _submit(
            pool,
            work,
            "executable = slow_die.sh\nshould_transfer_files = YES\nlog = job.log\n"
            "request_memory = 16\njob_max_vacate_time = 30\njob_lease_duration = 0\nqueue\n",
        )
        job = f"{cluster}.0"
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        _started(pool, job)  # its 001 and 004 are asserted: recorded before the kill
        pool.kill()
        # The claim's lease runs out on the node, which starts ending it (TERM, ignored).
        wait_for(lambda: _lines(terms), timeout=90, what="the node to end the claim")
        pool.start()
        wait_for(lambda: len(_lines(starts)) == 2, timeout=90, what="the job to run again")
        go.touch()
        wait_for(lambda: _history(pool, cluster), timeout=60)
        assert _events(work / "job.log", job) == [0, 1, 4, 1, 5]
    finally:
        node.close()


def test_a_job_whose_node_cannot_be_reached_at_the_restart_waits_for_its_lease(
    pool: PersonalPool, tmp_path: Path
) -> None:
    node2 = _node(pool, tmp_path, "node2", "127.0.0.2")
    node3: ExecuteNode | None = None
    try:
        job, starts, go = _submit_job(pool, tmp_path, "once_b.sh")
        wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
        # The node answers the activation once the job's process runs: the start is
        # recorded after its line, perhaps.
        wait_for(
            lambda: str(_job(pool, job).get("StartdIpAddr", "")).startswith("<127.0.0.2:"),
            timeout=30,
            what="the job's start recorded",
        )
        node3 = _node(pool, tmp_path, "node3", "127.0.0.3")  # free, and would take it
        assert node2.process is not None
        os.kill(node2.process.pid, signal.SIGSTOP)  # the node is cut off from the schedd
        pool.kill()
        pool.start()
        _waits_for_the_lease(pool, job, starts)
        # The node comes back: its lease ran out, it kills the job and says the claim is
        # gone; then, and only then, the job runs again.
        os.kill(node2.process.pid, signal.SIGCONT)
        wait_for(lambda: len(_lines(starts)) == 2, timeout=90, what="the job to run again")
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
        ad = _job(pool, job)
        assert ad.eval("JobLeaseExpiration") is Value.Undefined  # no longer waiting
        go.touch()
        wait_for(lambda: _history(pool, int(job.split(".")[0])), timeout=60)
        assert _events(tmp_path / "work" / "job.log", job) == [0, 1, 22, 24, 4, 1, 5]
        assert [line.split()[0] for line in _lines(starts)] == ["start", "start"]
    finally:
        if node2.process is not None:
            os.kill(node2.process.pid, signal.SIGCONT)
        node2.close()
        if node3 is not None:
            node3.close()


def _submit_procs(pool: PersonalPool, work: Path, script: str, log: str, count: int) -> int:
    """`count` jobs of `script` (its argument the proc), each its own output."""
    return _submit(
        pool,
        work,
        f"executable = {script}\narguments = $(Process)\nshould_transfer_files = YES\n"
        f"output = out.$(Process)\nlog = {log}\nrequest_memory = 16\n"
        # long enough that no node ends a job while the schedd is down under load
        f"job_max_vacate_time = 1\njob_lease_duration = 300\nqueue {count}\n",
    )


_MANY = """echo "start $$" >> {starts}/$1
while [ ! -e {go} ]; do sleep 0.5; done
echo "out $1"
"""


def test_kill_9_of_the_schedd_while_50_jobs_run_on_5_nodes_runs_each_once(
    pool: PersonalPool, tmp_path: Path
) -> None:
    nodes = []
    try:
        for n in range(2, 7):
            node = ExecuteNode(
                pool, tmp_path / f"node{n}", f"node{n}", f"127.0.0.{n}", config={"NUM_CPUS": 10}
            )
            nodes.append(node)
            node.start()
        for node in nodes:
            node.joined()
        work, jobs = tmp_path / "work", 50
        starts, go = work / "starts", work / "go"
        starts.mkdir(parents=True)
        _script(work / "many_a.sh", _MANY.format(starts=starts, go=go))
        cluster = _submit_procs(pool, work, "many_a.sh", "many.log", jobs)
        wait_for(
            lambda: len(list(starts.iterdir())) == jobs, timeout=300, what="all the jobs to start"
        )
        wait_for(lambda: len(_runs(tmp_path, "many_a.sh")) == jobs, timeout=30, what="all to run")
        with pool.client() as schedd:
            where = {ad["StartdIpAddr"].split(":")[0] for ad in schedd.query("JobStatus == 2")}
        assert where == {f"<127.0.0.{n}" for n in range(2, 7)}  # on all five nodes
        running = _runs(tmp_path, "many_a.sh")
        pool.kill()
        pool.start()

        def reconnected() -> bool:
            with pool.client() as schedd:
                ads = schedd.query(f"ClusterId == {cluster}")
            return len(ads) == jobs and all(ad.get("NumJobReconnects") == 1 for ad in ads)

        wait_for(reconnected, timeout=120, what="the schedd to reconnect to every job")
        assert _runs(tmp_path, "many_a.sh") == running  # the same runs, none started again
        go.touch()

        def finished() -> list[ClassAd]:
            with pool.client() as schedd:
                return schedd.history(f"ClusterId == {cluster}")

        done = wait_for(lambda: len(finished()) == jobs and finished(), timeout=120)
        assert {ad["ProcId"] for ad in done} == set(range(jobs))
        assert all(ad["ExitCode"] == 0 and ad["NumJobStarts"] == 1 for ad in done)
        for proc in range(jobs):
            assert [line.split()[0] for line in _lines(starts / str(proc))] == ["start"]
            assert (work / f"out.{proc}").read_text() == f"out {proc}\n"
            assert _events(work / "many.log", f"{cluster}.{proc}") == [0, 1, 22, 23, 5]
    finally:
        for node in nodes:
            node.close()


_GATED = """echo "start $$" >> {starts}/$1
while [ ! -e {gates}/$1 ]; do sleep 0.1; done
echo "out $1"
"""


def test_a_job_on_a_reused_claim_is_reconnected_to_after_kill_9_its_record_kept(
    pool: PersonalPool, tmp_path: Path
) -> None:
    """The claim's record is written once (not per job it runs), and a restart finds the
    claim's second job by its PublicClaimId: reconnected to, never run again. The claim
    reconnected to then runs the third job, as any claim (no new match)."""
    node = ExecuteNode(pool, tmp_path / "node2", "node2", "127.0.0.2", config={"NUM_CPUS": 1})
    node.start()
    node.joined()
    try:
        work = tmp_path / "work"
        starts, gates = work / "starts", work / "gates"
        starts.mkdir(parents=True)
        gates.mkdir()
        _script(work / "reused_a.sh", _GATED.format(starts=starts, gates=gates))
        cluster = _submit_procs(pool, work, "reused_a.sh", "reused.log", 3)
        wait_for(lambda: (starts / "0").exists(), timeout=90, what="the first job to start")
        (record,) = (pool.config.spool / "claims").glob("*.claim")
        written = record.stat()
        (gates / "0").touch()
        wait_for(lambda: (starts / "1").exists(), timeout=90, what="the second job to start")
        second = _started(pool, f"{cluster}.1")
        assert second["RemoteHost"] == _history(pool, cluster)["RemoteHost"]  # the same claim
        assert second["PublicClaimId"] == record.name.removesuffix(".claim")
        now = record.stat()
        assert (now.st_ino, now.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
        running = _runs(tmp_path, "reused_a.sh")
        pool.kill()
        pool.start()
        wait_for(
            lambda: _job(pool, f"{cluster}.1").get("NumJobReconnects") == 1,
            timeout=60,
            what="the schedd to reconnect to the second job",
        )
        assert _runs(tmp_path, "reused_a.sh") == running  # the same run, none started again
        (gates / "1").touch()
        wait_for(lambda: (starts / "2").exists(), timeout=90, what="the third job to start")
        third = _started(pool, f"{cluster}.2")
        assert (third["RemoteHost"], third["PublicClaimId"]) == (
            second["RemoteHost"],
            second["PublicClaimId"],
        )
        (gates / "2").touch()
        wait_for(lambda: len(_all(pool, cluster)) == 3, timeout=60, what="the jobs to end")
        assert all(ad["NumJobStarts"] == 1 for ad in _all(pool, cluster))
        assert _lines(starts / "1")[0].startswith("start") and len(_lines(starts / "1")) == 1
        assert (work / "out.1").read_text() == "out 1\n"
        assert (work / "out.2").read_text() == "out 2\n"
        assert _events(work / "reused.log", f"{cluster}.1") == [0, 1, 22, 23, 5]
        assert _events(work / "reused.log", f"{cluster}.2") == [0, 1, 5]
        wait_for(lambda: not list((pool.config.spool / "claims").glob("*.claim")), timeout=30)
    finally:
        node.close()


def _all(pool: PersonalPool, cluster: int) -> list[ClassAd]:
    with pool.client() as schedd:
        return schedd.history(f"ClusterId == {cluster}")
