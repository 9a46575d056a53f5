"""Local universe jobs, end to end: a real daemon runs real processes."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from htgrid.net import Jobs, ScheddClient
from htgrid.queue import HoldReasonCode, JobAction, JobStatus

from ._harness import PersonalPool, finished, run_cli, submit, wait_for


def test_exit_codes_and_output(pool: PersonalPool, schedd: ScheddClient, tmp_path: Path) -> None:
    cluster = submit(
        pool,
        tmp_path,
        """universe = local
executable = /bin/sh
arguments = "-c 'echo hello $(Process); exit $(Process)'"
output = out.$(Process)
error = err.$(Process)
queue 3
""",
    )
    ads = wait_for(lambda: finished(schedd, cluster, 3), what="3 jobs to finish")
    assert [ad["ExitCode"] for ad in ads] == [0, 1, 2]
    assert all(ad["JobStatus"] == JobStatus.COMPLETED for ad in ads)
    assert all(ad["ExitBySignal"] is False for ad in ads)
    assert all(ad["NumJobStarts"] == 1 for ad in ads)
    assert [(tmp_path / f"out.{i}").read_text() for i in range(3)] == [
        "hello 0\n",
        "hello 1\n",
        "hello 2\n",
    ]


def test_a_signal_is_recorded_as_such(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sh\narguments = \"-c 'kill -9 $$'\"\nqueue\n",
    )
    (ad,) = wait_for(lambda: finished(schedd, cluster, 1))
    assert ad["ExitBySignal"] is True
    assert ad["ExitSignal"] == 9
    assert "ExitCode" not in ad


def test_files_environment_and_arguments_with_spaces(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "in.txt").write_text("from stdin\n")
    script = tmp_path / "show.sh"
    script.write_text(
        '#!/bin/sh\nfor a in "$@"; do echo "arg<$a>"; done\n'
        'echo "A<$A> B<$B> HOME<${HOME-unset}>"\ncat\necho oops >&2\npwd\n'
    )
    script.chmod(0o755)
    cluster = submit(
        pool,
        tmp_path,
        f"universe = local\nexecutable = {script}\n"
        'arguments = "one \'two words\' ""three"""\n'
        "environment = \"A=1 B='x y'\"\n"
        "initialdir = work\ninput = in.txt\noutput = out.txt\nerror = err.txt\nqueue\n",
    )
    (ad,) = wait_for(lambda: finished(schedd, cluster, 1))
    assert ad["ExitCode"] == 0
    # The environment is the ad's, and HOME the owner's (HTCondor's STARTER_SETS_HOME_ENV).
    home = pwd.getpwuid(os.geteuid()).pw_dir
    assert (work / "out.txt").read_text() == (
        f'arg<one>\narg<two words>\narg<"three">\nA<1> B<x y> HOME<{home}>\nfrom stdin\n{work}\n'
    )
    assert (work / "err.txt").read_text() == "oops\n"


def _pid_file_job(pool: PersonalPool, directory: Path, extra: str = "") -> tuple[int, Path]:
    pidfile = directory / "pids"
    cluster = submit(
        pool,
        directory,
        f"""universe = local
executable = /bin/sh
arguments = "-c 'echo $$ >> {pidfile}; exec sleep 300'"
{extra}
queue
""",
    )
    return cluster, pidfile


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pids(path: Path, n: int) -> list[int] | None:
    lines = path.read_text().split() if path.exists() else []
    return [int(p) for p in lines] if len(lines) >= n else None


def test_hold_release_and_remove_a_running_job(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    cluster, pidfile = _pid_file_job(pool, tmp_path)
    job = f"{cluster}.0"
    (first,) = wait_for(lambda: _pids(pidfile, 1))
    assert schedd.act(JobAction.Hold, Jobs.of([job]), "stop for now")
    wait_for(lambda: not _alive(first), what="the held job's process to die")
    ad = schedd.get(job)
    assert ad["JobStatus"] == JobStatus.HELD
    assert ad["HoldReason"] == "stop for now"
    assert ad["HoldReasonCode"] == HoldReasonCode.UserRequest

    schedd.act(JobAction.Release, Jobs.of([job]))
    _, second = wait_for(lambda: _pids(pidfile, 2), what="the released job to run again")
    assert _alive(second)
    wait_for(lambda: schedd.get(job)["JobStatus"] == JobStatus.RUNNING)

    schedd.act(JobAction.Remove, Jobs.in_cluster(cluster), "no longer needed")
    (ad,) = wait_for(lambda: finished(schedd, cluster, 1), what="the removed job to leave")
    assert not _alive(second)
    assert ad["JobStatus"] == JobStatus.REMOVED
    assert ad["RemoveReason"] == "no longer needed"
    assert ad["NumJobStarts"] == 2


def test_a_job_that_ignores_sigterm_is_killed_after_its_vacate_time(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sh\n"
        f'arguments = "-c \'trap """" TERM; echo $$ > {pidfile}; '
        "while :; do sleep 0.05; done'\"\njob_max_vacate_time = 1\nqueue\n",
    )
    (pid,) = wait_for(lambda: _pids(pidfile, 1))
    schedd.act(JobAction.Remove, Jobs.in_cluster(cluster))
    (ad,) = wait_for(lambda: finished(schedd, cluster, 1), timeout=10)
    assert not _alive(pid)
    assert ad["JobStatus"] == JobStatus.REMOVED


def test_on_exit_hold(pool: PersonalPool, schedd: ScheddClient, tmp_path: Path) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sh\narguments = \"-c 'exit 3'\"\n"
        'on_exit_hold = ExitCode == 3\non_exit_hold_reason = "bad input"\nqueue\n',
    )
    job = f"{cluster}.0"
    ad = wait_for(lambda: (a := schedd.get(job))["JobStatus"] == JobStatus.HELD and a)
    assert ad["HoldReason"] == "bad input"
    assert ad["HoldReasonCode"] == HoldReasonCode.JobPolicy
    assert ad["ExitCode"] == 3


def test_max_retries_reruns_until_success(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    counter = tmp_path / "runs"
    cluster = submit(
        pool,
        tmp_path,
        f"""universe = local
executable = /bin/sh
arguments = "-c 'echo run >> {counter}; test $(wc -l < {counter}) -ge 3'"
max_retries = 5
queue
""",
    )
    (ad,) = wait_for(lambda: finished(schedd, cluster, 1))
    assert ad["ExitCode"] == 0
    assert ad["NumJobStarts"] == 3
    assert ad["NumJobCompletions"] == 3
    assert counter.read_text().count("run") == 3


def test_max_retries_gives_up(pool: PersonalPool, schedd: ScheddClient, tmp_path: Path) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sh\narguments = \"-c 'exit 7'\"\nmax_retries = 2\nqueue\n",
    )
    (ad,) = wait_for(lambda: finished(schedd, cluster, 1))
    assert (ad["ExitCode"], ad["NumJobStarts"]) == (7, 3)


def test_periodic_remove_stops_a_running_job(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    cluster, pidfile = _pid_file_job(
        pool, tmp_path, "periodic_remove = JobStatus == 2 && NumJobStarts >= 1"
    )
    (pid,) = wait_for(lambda: _pids(pidfile, 1))
    (ad,) = wait_for(lambda: finished(schedd, cluster, 1), timeout=10)
    assert ad["JobStatus"] == JobStatus.REMOVED
    assert "PeriodicRemove" in ad["RemoveReason"]
    assert not _alive(pid)


def test_a_job_that_cannot_start_is_held_with_the_reason(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    notexec = tmp_path / "data.txt"
    notexec.write_text("not a program\n")
    cluster = submit(pool, tmp_path, f"universe = local\nexecutable = {notexec}\nqueue\n")
    job = f"{cluster}.0"
    ad = wait_for(lambda: (a := schedd.get(job))["JobStatus"] == JobStatus.HELD and a)
    assert ad["HoldReasonCode"] == HoldReasonCode.FailedToCreateProcess
    assert ad["HoldReasonSubCode"] == 13  # EACCES
    assert str(notexec) in ad["HoldReason"]


def test_an_output_file_that_cannot_be_opened_holds_the_job(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/true\noutput = no/such/dir/out\nqueue\n",
    )
    job = f"{cluster}.0"
    ad = wait_for(lambda: (a := schedd.get(job))["JobStatus"] == JobStatus.HELD and a)
    assert ad["HoldReasonCode"] == HoldReasonCode.UnableToOpenOutput
    assert ad["HoldReasonSubCode"] == 2  # ENOENT


def test_vanilla_jobs_stay_idle_and_grid_jobs_are_left_alone(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    vanilla = submit(pool, tmp_path / "v", "executable = /bin/true\nqueue\n")
    grid = submit(
        pool,
        tmp_path / "g",
        "universe = grid\ngrid_resource = batch slurm\nexecutable = /bin/true\nqueue\n",
    )
    local = submit(pool, tmp_path / "l", "universe = local\nexecutable = /bin/true\nqueue\n")
    wait_for(lambda: finished(schedd, local, 1), what="the local job, started after the others")
    for cluster in (vanilla, grid):
        ad = schedd.get(f"{cluster}.0")
        assert ad["JobStatus"] == JobStatus.IDLE
        assert ad.get("NumJobStarts", 0) == 0
    schedd.act(JobAction.Remove, Jobs.of([f"{vanilla}.0", f"{grid}.0"]))


def test_the_runner_respects_its_limit_and_runs_everything(
    tmp_path: Path,
) -> None:
    with PersonalPool(tmp_path / "pool", max_local_jobs=2, kill_grace=1, fsync=False) as small:
        marks = tmp_path / "marks"
        cluster = submit(
            small,
            tmp_path,
            f"""universe = local
executable = /bin/sh
arguments = "-c 'echo start >> {marks}; sleep 0.2; echo end >> {marks}'"
queue 6
""",
        )
        with small.client() as schedd:
            wait_for(lambda: finished(schedd, cluster, 6))
            health = schedd.health()
        assert health["local_jobs_limit"] == 2
    # At most two at once: the running count never exceeds 2 in the start/end sequence.
    running = peak = 0
    for line in marks.read_text().split():
        running += 1 if line == "start" else -1
        peak = max(peak, running)
    assert peak <= 2
    assert marks.read_text().count("end") == 6


def test_better_analyze_explains_idle_local_and_vanilla_jobs(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    cluster = submit(
        pool,
        tmp_path,
        "executable = /bin/true\nrequest_memory = 2G\nrequirements = HasDocker\nqueue\n",
    )
    rc, out, _ = run_cli(pool.home, "q", "-better-analyze", f"{cluster}.0")
    assert rc == 0
    assert "is idle" in out
    assert "No execute node has joined this pool yet" in out
    assert "TARGET.Memory >= RequestMemory" in out
    assert "RequestMemory = 2048" in out
    assert "HasDocker" in out
    schedd.act(JobAction.Hold, Jobs.of([f"{cluster}.0"]), "looking at it")
    rc, out, _ = run_cli(pool.home, "q", "-better-analyze", f"{cluster}.0")
    assert "is held: looking at it" in out
    assert f"htgrid release {cluster}.0" in out
    schedd.act(JobAction.Remove, Jobs.in_cluster(cluster))


def test_a_job_released_while_it_is_being_killed_runs_again(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    cluster = submit(
        pool,
        tmp_path,
        "universe = local\nexecutable = /bin/sh\n"
        f'arguments = "-c \'trap """" TERM; echo $$ >> {pidfile}; '
        "while :; do sleep 0.05; done'\"\njob_max_vacate_time = 1\nqueue\n",
    )
    job = f"{cluster}.0"
    (first,) = wait_for(lambda: _pids(pidfile, 1))
    schedd.act(JobAction.Hold, Jobs.of([job]))
    schedd.act(JobAction.Release, Jobs.of([job]))  # the first run ignores SIGTERM still
    _, second = wait_for(lambda: _pids(pidfile, 2), timeout=10, what="a second run")
    assert not _alive(first)
    assert schedd.get(job)["NumJobStarts"] == 2
    schedd.act(JobAction.Remove, Jobs.of([job]))
    wait_for(lambda: not _alive(second), timeout=10)
