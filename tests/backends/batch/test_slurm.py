"""Slurm: parsers on output captured from Slurm 22.05 (Debian 12), then the back end
against the real thing (.ci/slurm-up.sh: single node, slurmdbd accounting, MinJobAge=10).

The slow cases (a walltime kill takes 60-90 s; a finished job leaves squeue within about
a minute) are submitted first, by a module fixture, and checked last, so the waits
overlap the other tests.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from htgrid.backends.batch._base import BatchJobSpec, JobState, NativeStatus
from htgrid.backends.batch._command import CountingRunner
from htgrid.backends.batch.slurm import SlurmBackend, parse_sacct, parse_squeue

T = TypeVar("T")

# --- parsers, on real output ------------------------------------------------------------

SQUEUE = """\
5|RUNNING|None|1:13|w.sh
2|PENDING|JobHeldUser|0:00|wrap
3|PENDING|job requeued in held state|0:00|wrap
6|FAILED|NonZeroExitCode|0:00|wrap
8|COMPLETED|None|0:01|1.0
4|CANCELLED|None|0:00|wrap
"""

SACCT = """\
5|TIMEOUT|0:0|79|w.sh
6|FAILED|3:0|0|wrap
7|FAILED|0:9|0|wrap
2|CANCELLED by 0|0:0|0|wrap
1|COMPLETED|0:0|1|htgrid-up
"""


def test_parse_squeue() -> None:
    found = parse_squeue(SQUEUE, ["2", "3", "4", "5", "6", "8", "99"])
    assert {k: v.state for k, v in found.items()} == {
        "5": JobState.RUNNING,
        "2": JobState.HELD,
        "3": JobState.HELD,
        "6": JobState.COMPLETED,
        "8": JobState.COMPLETED,
        "4": JobState.REMOVED,
    }
    assert found["5"].wallclock_seconds == 73
    assert found["8"].exit_code == 0
    assert found["6"].exit_code is None  # squeue shows no exit code: the file or sacct will


def test_parse_sacct() -> None:
    found = parse_sacct(SACCT, ["1", "2", "5", "6", "7"])
    assert (found["5"].state, found["5"].reason) == (JobState.COMPLETED, "walltime exceeded")
    assert (found["6"].exit_code, found["6"].exit_signal) == (3, None)
    assert (found["7"].exit_code, found["7"].exit_signal) == (None, 9)
    assert found["2"].state == JobState.REMOVED
    assert (found["1"].exit_code, found["1"].wallclock_seconds) == (0, 1)


# --- the real Slurm -----------------------------------------------------------------------

# The real batch systems are one host's, with a CPU or two: their tests never run side by
# side under pytest -n (tests/README.md).
pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("batch-systems")]
slurm = pytest.mark.usefixtures("slurm_cluster")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def new_tag() -> str:
    return f"t{uuid.uuid4().hex[:12]}.0"


async def wait_until(
    backend: SlurmBackend, nid: str, done: Callable[[NativeStatus], bool], seconds: float
) -> tuple[NativeStatus, set[JobState]]:
    """Poll until `done`; returns the last status and every state seen on the way."""
    seen: set[JobState] = set()
    deadline = time.monotonic() + seconds
    while True:
        status = (await backend.status([nid]))[nid]
        seen.add(status.state)
        if done(status):
            return status, seen
        assert time.monotonic() < deadline, f"job {nid} still {status} after {seconds}s"
        await asyncio.sleep(0.3)


def finished(s: NativeStatus) -> bool:
    return s.state in (JobState.COMPLETED, JobState.REMOVED)


@dataclass
class Env:
    registry: Path
    root: Path

    def backend(self, **kw: Any) -> SlurmBackend:
        return SlurmBackend(registry=self.registry, **kw)

    def spec(self, *args: str, **kw: Any) -> BatchJobSpec:
        tag = kw.pop("tag", None) or new_tag()
        job_dir = self.root / tag
        job_dir.mkdir()
        return BatchJobSpec(
            tag=tag,
            job_dir=job_dir,
            executable="/bin/sh",
            arguments=("-c", *args),
            stdout="out",
            stderr="err",
            **kw,
        )


@dataclass
class Early:
    walltime_id: str
    walltime_start: float
    gone_id: str
    gone_tag: str


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, slurm_cluster: None) -> Env:
    root = tmp_path_factory.mktemp("slurm")
    return Env(registry=root / "registry", root=root)


@pytest.fixture(scope="module")
def early(env: Env) -> Iterator[Early]:
    backend = env.backend()
    walltime = env.spec("sleep 300", runtime_seconds=60)
    gone = env.spec("exit 7")
    wid = run(backend.submit(walltime))
    start = time.monotonic()
    gid = run(backend.submit(gone))
    yield Early(wid, start, gid, gone.tag)
    run(env.backend().cancel(wid))


@slurm
def test_submit_status_transitions_and_exit_code(env: Env, early: Early) -> None:
    backend = env.backend()
    s = env.spec(
        'sleep 2; echo "$GREETING $1"; exit 3', "sh", "world", environment={"GREETING": "hello"}
    )
    nid = run(backend.submit(s))
    status, seen = run(wait_until(backend, nid, finished, 120))
    assert (status.state, status.exit_code, status.exit_signal) == (JobState.COMPLETED, 3, None)
    assert JobState.RUNNING in seen
    assert (s.job_dir / "out").read_text() == "hello world\n"


@slurm
def test_killed_by_signal(env: Env, early: Early) -> None:
    backend = env.backend()
    nid = run(backend.submit(env.spec("kill -9 $$")))
    status, _ = run(wait_until(backend, nid, finished, 120))
    assert (status.state, status.exit_code, status.exit_signal) == (JobState.COMPLETED, None, 9)


@slurm
def test_cancel_reports_removed(env: Env, early: Early) -> None:
    backend = env.backend()
    nid = run(backend.submit(env.spec("sleep 300")))
    run(wait_until(backend, nid, lambda s: s.state == JobState.RUNNING, 60))
    run(backend.cancel(nid))
    status, _ = run(wait_until(backend, nid, finished, 120))
    assert status.state == JobState.REMOVED
    run(backend.cancel(nid))  # cancelling a job that is gone is not an error


@slurm
def test_hold_and_resume(env: Env, early: Early) -> None:
    backend = env.backend()
    nid = run(backend.submit(env.spec("sleep 1; exit 0", extra_args="--hold")))
    run(wait_until(backend, nid, lambda s: s.state == JobState.HELD, 30))
    run(backend.resume(nid))
    status, _ = run(wait_until(backend, nid, finished, 120))
    assert (status.state, status.exit_code) == (JobState.COMPLETED, 0)
    # A running job is requeued held: it stops running.
    nid = run(backend.submit(env.spec("sleep 300")))
    run(wait_until(backend, nid, lambda s: s.state == JobState.RUNNING, 60))
    run(backend.hold(nid))
    run(wait_until(backend, nid, lambda s: s.state == JobState.HELD, 30))
    run(backend.cancel(nid))


@slurm
def test_find_by_tag(env: Env, early: Early) -> None:
    backend = env.backend()
    s = env.spec("sleep 1", extra_args="--hold")
    nid = run(backend.submit(s))
    assert run(backend.find_by_tag(s.tag)) == nid
    assert run(backend.find_by_tag(new_tag())) is None
    run(backend.cancel(nid))


@slurm
def test_many_jobs_one_status_command(env: Env, early: Early) -> None:
    runner = CountingRunner()
    backend = env.backend(runner=runner)

    async def submit_all() -> list[str]:
        specs = [env.spec("true", extra_args="--hold") for _ in range(30)]
        return list(await asyncio.gather(*(backend.submit(s) for s in specs)))

    ids = run(submit_all())
    try:
        for subset in (ids[:3], ids):
            runner.commands.clear()
            found = run(backend.status(subset))
            assert {s.state for s in found.values()} == {JobState.HELD}
            assert [c[0] for c in runner.commands] == ["squeue"]
    finally:

        async def cancel_all() -> None:
            await asyncio.gather(*(backend.cancel(nid) for nid in ids))

        run(cancel_all())


@slurm
def test_walltime_kill_is_reported_as_walltime(env: Env, early: Early) -> None:
    backend = env.backend()
    left = 200 - (time.monotonic() - early.walltime_start)
    status, _ = run(wait_until(backend, early.walltime_id, finished, left))
    assert (status.state, status.reason) == (JobState.COMPLETED, "walltime exceeded")
    assert status.exit_signal == 15  # the wrapper saw SIGTERM reach the job


@slurm
def test_job_gone_from_queue_is_found_in_history(env: Env, early: Early) -> None:
    backend = env.backend()
    deadline = time.monotonic() + 150

    def purged() -> bool:
        found = run(backend.status([early.gone_id]))[early.gone_id]
        return found.source != "queue"

    while not purged():
        assert time.monotonic() < deadline, "job never left squeue"
        time.sleep(1)
    with_sacct = run(backend.status([early.gone_id]))[early.gone_id]
    assert (with_sacct.state, with_sacct.exit_code) == (JobState.COMPLETED, 7)
    # The exit-code file answers first: sacct is only asked about unexplained jobs.
    assert with_sacct.source == "exit-file"
    # Without the file, sacct has it.
    (env.registry / "slurm" / early.gone_id).unlink()
    from_sacct = run(backend.status([early.gone_id]))[early.gone_id]
    assert (from_sacct.state, from_sacct.exit_code, from_sacct.source) == (
        JobState.COMPLETED,
        7,
        "history",
    )
    # Accounting off (or absent): nothing is known; UNKNOWN, never COMPLETED.
    no_acct = env.backend(accounting=False)
    assert run(no_acct.status([early.gone_id]))[early.gone_id].state == JobState.UNKNOWN
    # find_by_tag reaches the accounting records once squeue has forgotten the job.
    assert run(backend.find_by_tag(early.gone_tag)) == early.gone_id
