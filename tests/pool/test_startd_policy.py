"""The execute node's policy on running jobs, end to end: SUSPEND stops a running job
(its processes in state T, the job Suspended in the queue, 010 in its log) and CONTINUE
runs it again (011); PREEMPT vacates a job, KILL kills one that ignores its soft kill,
and the job runs again and completes once. The node's knobs are switched by `htgrid
reconfig`, through attributes of its own (STARTD_ATTRS) the expressions read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import htcondor2
import pytest

from htgrid.net import ScheddClient
from htgrid.testing import PersonalPool, run_cli, wait_for
from htgrid.testing.procs import group_states, group_stopped

from .conftest import events, submit, whole_pool

#: A job is suspended while the node's Suspendme is true; a job that says it is
#: Preemptable never is (WANT_SUSPEND is false for it): Evictme preempts it instead,
#: and a vacating job still there a second later is killed.
KNOBS: dict[str, object] = {
    "POLLING_INTERVAL": 0.2,
    "JOB_MAX_VACATE_TIME": 300,
    "STARTD_ATTRS": "Suspendme, Evictme",
    "Suspendme": "false",
    "Evictme": "false",
    "WANT_SUSPEND": "TARGET.Preemptable =!= true",
    "SUSPEND": "(TARGET.ClusterId isnt undefined) && MY.Suspendme",
    "CONTINUE": "MY.Suspendme =!= true",
    "PREEMPT": "MY.Evictme && TARGET.Preemptable =?= true",
    "MAXJOBRETIREMENTTIME": "TARGET.Retire =?= true ? 3600 : 0",
    "KILL": "time() - MY.EnteredCurrentActivity > 1",
}

# Writes its pid, then runs until the file named second appears.
_WAITS = '#!/bin/sh\necho $$ > "$1"\nwhile [ ! -e "$2" ]; do sleep 0.1; done\n'
# Ignores SIGTERM (before it says it runs) and counts its runs in the file named first;
# the first runs on, the second ends at once.
_RUNS_TWICE = (
    "#!/bin/sh\n"
    "trap '' TERM\n"
    'echo run >> "$1"\n'
    'if [ "$(wc -l < "$1")" -ge 2 ]; then exit 0; fi\n'
    "while :; do sleep 0.1; done\n"
)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    with whole_pool(tmp_path_factory.mktemp("pool"), **KNOBS) as running:
        yield running


def _set(pool: PersonalPool, **knobs: object) -> None:
    """Set `knobs` in htgrid.conf and run `htgrid reconfig`."""
    conf = pool.home / "htgrid.conf"
    lines = [line for line in conf.read_text().splitlines() if line.split(" = ")[0] not in knobs]
    lines += [f"{name} = {value}" for name, value in knobs.items()]
    conf.write_text("\n".join(lines) + "\n")
    status, _, err = run_cli(pool.home, "reconfig")
    assert status == 0, err


def _job(schedd: ScheddClient, cluster: int, *attrs: str) -> dict[str, object] | None:
    ads = schedd.query(f"ClusterId == {cluster}", ["JobStatus", *attrs])
    return dict(ads[0]) if ads else None


def _status(schedd: ScheddClient, cluster: int) -> object:
    job = _job(schedd, cluster)
    return None if job is None else job["JobStatus"]


def _runs(pid: int) -> bool:
    """Whether the job's processes run (none stopped)."""
    states = group_states(pid)
    return bool(states) and "T" not in states


def _done(schedd: ScheddClient, cluster: int) -> dict[str, object] | None:
    ads = schedd.history(
        f"ClusterId == {cluster}", ["JobStatus", "TotalSuspensions", "NumJobStarts"]
    )
    return dict(ads[0]) if ads else None


@pytest.mark.timeout(120)
def test_suspend_stops_the_job_and_continue_runs_it_again(
    pool: PersonalPool, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(_WAITS)
    (work / "job.sh").chmod(0o755)
    pid_file, release = work / "pid", work / "release"
    cluster = submit(
        pool.home,
        work,
        f"executable = job.sh\narguments = {pid_file} {release}\nlog = job.log\n"
        "should_transfer_files = NO\nrequest_memory = 16\nqueue\n",
    )
    with pool.client() as schedd:
        wait_for(
            lambda: _status(schedd, cluster) == 2 and pid_file.exists() and pid_file.read_text(),
            timeout=60,
            interval=0.1,
            what="the job running",
        )
        pid = int(pid_file.read_text())
        assert _runs(pid)

        _set(pool, Suspendme="true")
        wait_for(lambda: group_stopped(pid), timeout=30, interval=0.1, what="stopped")
        wait_for(lambda: _status(schedd, cluster) == 7, timeout=30, interval=0.1, what="7")
        job = _job(schedd, cluster, "TotalSuspensions", "LastSuspensionTime")
        assert job is not None and job["TotalSuspensions"] == 1
        assert isinstance(job["LastSuspensionTime"], int) and job["LastSuspensionTime"] > 0
        wait_for(
            lambda: (
                f"Claimed Suspended {cluster}.0"
                in run_cli(pool.home, "status", "-af", "State", "Activity", "JobId")[1]
            ),
            timeout=30,
            interval=0.2,
            what="the slot suspended in the collector",
        )

        _set(pool, Suspendme="false")
        wait_for(lambda: _runs(pid), timeout=30, interval=0.1, what="running again")
        wait_for(lambda: _status(schedd, cluster) == 2, timeout=30, interval=0.1, what="2")
        release.touch()
        done = wait_for(lambda: _done(schedd, cluster), timeout=60, interval=0.1, what="end")
    assert done["JobStatus"] == 4 and done["TotalSuspensions"] == 1
    assert events(work / "job.log")[f"{cluster}.0"] == [0, 1, 10, 11, 5]
    suspended = [
        e for e in htcondor2.JobEventLog(str(work / "job.log")).events(stop_after=0) if e.type == 10
    ]
    assert suspended[0]["NumberOfPIDs"] >= 1


@pytest.mark.timeout(120)
def test_preempt_evicts_the_job_which_runs_again_and_completes_once(
    pool: PersonalPool, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sh").write_text(_RUNS_TWICE)
    (work / "job.sh").chmod(0o755)
    runs = work / "runs"
    cluster = submit(
        pool.home,
        work,
        f"executable = job.sh\narguments = {runs}\nlog = job.log\n"
        "should_transfer_files = NO\nrequest_memory = 16\n+Preemptable = true\nqueue\n",
    )
    with pool.client() as schedd:
        wait_for(lambda: runs.exists(), timeout=60, interval=0.1, what="the first run")
        _set(pool, Evictme="true")
        wait_for(
            lambda: 4 in events(work / "job.log").get(f"{cluster}.0", []),
            timeout=30,
            interval=0.1,
            what="the eviction (004)",
        )
        _set(pool, Evictme="false")
        done = wait_for(lambda: _done(schedd, cluster), timeout=60, interval=0.1, what="end")
    assert done["JobStatus"] == 4
    numbers = events(work / "job.log")[f"{cluster}.0"]
    assert numbers.count(5) == 1 and numbers[-1] == 5
    assert numbers.count(1) == numbers.count(4) + 1  # each eviction ran again
    assert runs.read_text().count("run") == numbers.count(1)
    # The eviction says why, as HTCondor's does (VacateReasonCode StartdPreemptExpression).
    (evicted, *_) = [
        e for e in htcondor2.JobEventLog(str(work / "job.log")).events(stop_after=0) if e.type == 4
    ]
    assert evicted["Reason"] == "PREEMPT expression evaluated to True"
    assert evicted["ReasonCode"] == 1011
    # The first run ignored its soft kill: KILL, a second into Vacating, killed it.
    log = (pool.home / "log" / "StartLog").read_text()
    assert "PREEMPT is true: Claimed/Busy -> Claimed/Retiring" in log
    assert "Claimed/Retiring -> Preempting/Vacating" in log
    assert "KILL is true: Preempting/Vacating -> Preempting/Killing" in log


def _waiting_job(pool: PersonalPool, work: Path, extra: str = "") -> tuple[int, Path, Path]:
    """A job that writes its pid and runs until told: its cluster, pid file, release file."""
    work.mkdir()
    (work / "job.sh").write_text(_WAITS)
    (work / "job.sh").chmod(0o755)
    pid_file, release = work / "pid", work / "release"
    cluster = submit(
        pool.home,
        work,
        f"executable = job.sh\narguments = {pid_file} {release}\nlog = job.log\n"
        f"should_transfer_files = NO\nrequest_memory = 16\n{extra}queue\n",
    )
    return cluster, pid_file, release


def _pid(pid_file: Path) -> int:
    text = wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip(),
        timeout=60,
        interval=0.1,
        what="the job's pid",
    )
    return int(text)


@pytest.mark.timeout(120)
def test_a_preempted_job_runs_out_its_retirement_and_completes(
    pool: PersonalPool, tmp_path: Path
) -> None:
    """PREEMPT with retirement time left: the job runs on (Claimed/Retiring) and its own
    end is a completion, not an eviction."""
    work = tmp_path / "work"
    cluster, pid_file, release = _waiting_job(
        pool, work, "+Preemptable = true\n+Retire = true\njob_max_vacate_time = 1\n"
    )
    pid = _pid(pid_file)
    with pool.client() as schedd:
        _set(pool, Evictme="true")
        try:
            wait_for(
                lambda: (
                    f"Claimed Retiring {cluster}.0"
                    in run_cli(pool.home, "status", "-af", "State", "Activity", "JobId")[1]
                ),
                timeout=30,
                interval=0.2,
                what="the slot retiring",
            )
            assert _runs(pid)
            release.touch()
            done = wait_for(lambda: _done(schedd, cluster), timeout=60, interval=0.1)
        finally:
            _set(pool, Evictme="false")
    assert done["JobStatus"] == 4 and done["NumJobStarts"] == 1
    assert events(work / "job.log")[f"{cluster}.0"] == [0, 1, 5]


@pytest.mark.timeout(120)
def test_a_suspended_job_held_by_its_user_is_stopped_and_held(
    pool: PersonalPool, tmp_path: Path
) -> None:
    """condor_hold of a suspended job: the node lets it take its kill signal (it is
    continued to), and the job is held."""
    work = tmp_path / "work"
    cluster, pid_file, _ = _waiting_job(pool, work)
    pid = _pid(pid_file)
    with pool.client() as schedd:
        _set(pool, Suspendme="true")
        try:
            wait_for(lambda: _status(schedd, cluster) == 7, timeout=30, interval=0.1)
            wait_for(lambda: group_stopped(pid), timeout=30, interval=0.1, what="stopped")
            assert run_cli(pool.home, "hold", str(cluster))[0] == 0
            wait_for(lambda: _status(schedd, cluster) == 5, timeout=30, interval=0.1)
            wait_for(lambda: not group_states(pid), timeout=30, interval=0.1, what="gone")
        finally:
            _set(pool, Suspendme="false")
        assert run_cli(pool.home, "rm", str(cluster))[0] == 0
    assert events(work / "job.log")[f"{cluster}.0"][:4] == [0, 1, 10, 12]
