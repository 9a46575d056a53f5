"""User job event logs, read back by HTCondor's own reader (htcondor2.JobEventLog)."""

from __future__ import annotations

from pathlib import Path

import htcondor2

from htgrid.net import Jobs, ScheddClient
from htgrid.queue import JobAction, JobStatus

from ._harness import PersonalPool, event_types, finished, submit, wait_for

SUBMIT = 0
EXECUTE = 1
EVICTED = 4
TERMINATED = 5
ABORTED = 9
HELD = 12
RELEASED = 13


def _events(log: Path, job: str) -> list[htcondor2.JobEvent]:
    return [
        e
        for e in htcondor2.JobEventLog(str(log)).events(stop_after=0)
        if f"{e.cluster}.{e.proc}" == job
    ]


def _expect(log: Path, job: str, types: list[int]) -> list[htcondor2.JobEvent]:
    """Wait until the job's events are `types` (the writer follows the queue closely)."""
    wait_for(lambda: log.exists() and event_types(log, job) == types, what=f"events {types}")
    return _events(log, job)


def test_a_completed_job(pool: PersonalPool, schedd: ScheddClient, tmp_path: Path) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sh\narguments = \"-c 'exit $(Process)'\"\n"
        "log = job.log\nqueue 2\n",
    )
    log = tmp_path / "job.log"
    for proc in (0, 1):
        events = _expect(log, f"{cluster}.{proc}", [SUBMIT, EXECUTE, TERMINATED])
        assert events[2]["TerminatedNormally"] is True
        assert events[2]["ReturnValue"] == proc


def test_a_job_killed_by_a_signal(pool: PersonalPool, schedd: ScheddClient, tmp_path: Path) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sh\narguments = \"-c 'kill -KILL $$'\"\n"
        "log = job.log\nqueue\n",
    )
    events = _expect(tmp_path / "job.log", f"{cluster}.0", [SUBMIT, EXECUTE, TERMINATED])
    assert events[2]["TerminatedNormally"] is False
    assert events[2]["TerminatedBySignal"] == 9


def test_hold_release_and_remove(pool: PersonalPool, schedd: ScheddClient, tmp_path: Path) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sleep\narguments = 300\nlog = job.log\nqueue\n",
    )
    job = f"{cluster}.0"
    log = tmp_path / "job.log"
    _expect(log, job, [SUBMIT, EXECUTE])
    schedd.act(JobAction.Hold, Jobs.of([job]), "disk full")
    _expect(log, job, [SUBMIT, EXECUTE, HELD])
    schedd.act(JobAction.Release, Jobs.of([job]), "disk cleaned")
    _expect(log, job, [SUBMIT, EXECUTE, HELD, RELEASED, EXECUTE])
    schedd.act(JobAction.Remove, Jobs.of([job]), "giving up")
    events = _expect(log, job, [SUBMIT, EXECUTE, HELD, RELEASED, EXECUTE, ABORTED])
    assert events[2]["HoldReason"] == "disk full"
    assert events[2]["HoldReasonCode"] == 1
    assert events[2]["HoldReasonSubCode"] == 0
    assert events[3]["Reason"] == "disk cleaned"
    assert events[5]["Reason"] == "giving up"


def test_requeued_by_max_retries(pool: PersonalPool, schedd: ScheddClient, tmp_path: Path) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sh\narguments = \"-c 'exit 4'\"\n"
        "max_retries = 1\nlog = job.log\nqueue\n",
    )
    events = _expect(
        tmp_path / "job.log",
        f"{cluster}.0",
        [SUBMIT, EXECUTE, EVICTED, EXECUTE, TERMINATED],
    )
    assert events[2]["TerminatedAndRequeued"] is True
    assert events[2]["ReturnValue"] == 4
    assert events[4]["ReturnValue"] == 4


def test_held_at_exit(pool: PersonalPool, schedd: ScheddClient, tmp_path: Path) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sh\narguments = \"-c 'exit 1'\"\n"
        "on_exit_hold = ExitCode != 0\nlog = job.log\nqueue\n",
    )
    events = _expect(tmp_path / "job.log", f"{cluster}.0", [SUBMIT, EXECUTE, HELD])
    assert events[2]["HoldReasonCode"] == 3  # JobPolicy
    schedd.act(JobAction.Remove, Jobs.in_cluster(cluster))


def test_only_jobs_with_a_log_get_events(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    quiet = submit(pool, tmp_path / "quiet", "universe = local\nexecutable = /bin/true\nqueue\n")
    idle = submit(pool, tmp_path / "idle", "executable = /bin/true\nlog = job.log\nqueue\n")
    wait_for(lambda: finished(schedd, quiet, 1))
    _expect(tmp_path / "idle" / "job.log", f"{idle}.0", [SUBMIT])
    assert not list((tmp_path / "quiet").glob("*.log"))
    assert schedd.get(f"{idle}.0")["JobStatus"] == JobStatus.IDLE
    schedd.act(JobAction.Remove, Jobs.in_cluster(idle))
    _expect(tmp_path / "idle" / "job.log", f"{idle}.0", [SUBMIT, ABORTED])


def test_a_scheduler_universe_job_runs_and_logs_as_htcondor_logs_it(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    # HTCondor's schedd runs scheduler universe jobs itself, as local ones (the job used
    # to idle forever here); its 005 event carries zero usage and the job's exit.
    cluster = submit(
        pool,
        tmp_path,
        "universe = scheduler\nexecutable = /bin/sh\n"
        "arguments = \"-c 'echo ran; exit 3'\"\n"
        "output = out.txt\nlog = job.log\nqueue\n",
    )
    (ad,) = wait_for(lambda: finished(schedd, cluster, 1), what="the scheduler universe job")
    assert (ad["JobUniverse"], ad["JobStatus"], ad["ExitCode"]) == (7, JobStatus.COMPLETED, 3)
    assert (tmp_path / "out.txt").read_text() == "ran\n"
    events = _expect(tmp_path / "job.log", f"{cluster}.0", [SUBMIT, EXECUTE, TERMINATED])
    assert events[2]["TerminatedNormally"] is True
    assert events[2]["ReturnValue"] == 3
    text = (tmp_path / "job.log").read_text()
    assert "Usr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage" in text
    assert "Usr 0 00:00:00, Sys 0 00:00:00  -  Total Remote Usage" in text
