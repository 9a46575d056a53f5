"""The fork back end running real jobs on this host."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable
from pathlib import Path

import pytest

from htgrid.backends.batch._base import BackendError, BatchJobSpec, JobState, NativeStatus
from htgrid.backends.batch.fork import ForkBackend


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def spec(tmp_path: Path, script: str, *, name: str = "job", **options: object) -> BatchJobSpec:
    job_dir = tmp_path / name
    job_dir.mkdir()
    return BatchJobSpec(
        tag=name,
        job_dir=job_dir,
        executable="/bin/sh",
        arguments=("-c", script),
        stdout="out",
        stderr="err",
        **options,  # type: ignore[arg-type]
    )


async def until(backend: ForkBackend, native_id: str, *states: JobState) -> NativeStatus:
    deadline = time.monotonic() + 15
    while True:
        status = (await backend.status([native_id]))[native_id]
        if status.state in states or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.02)


def gone(pid: int, timeout: float = 5.0) -> bool:
    """Whether `pid` is dead (a zombie nobody has reaped yet counts as dead)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if proc_state(pid) == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.02)
    return False


def proc_state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2]


def test_exit_code_output_and_environment(tmp_path: Path) -> None:
    async def main() -> None:
        backend = ForkBackend(tmp_path / "state")
        job = spec(
            tmp_path,
            'echo "$GREETING $PWD"; echo oops >&2; read line; echo "got $line"; exit 3',
            environment={"GREETING": "hello world"},
            stdin="in",
        )
        (job.job_dir / "in").write_text("input line\n")
        native_id = await backend.submit(job)
        status = await until(backend, native_id, JobState.COMPLETED)
        assert status.state is JobState.COMPLETED
        assert status.exit_code == 3 and status.exit_signal is None
        assert status.source == "exit-file"
        assert status.wallclock_seconds is not None and status.wallclock_seconds >= 0
        out = (job.job_dir / "out").read_text()
        assert out == f"hello world {job.job_dir}\ngot input line\n"
        assert (job.job_dir / "err").read_text() == "oops\n"

    run(main())


def test_killed_by_a_signal(tmp_path: Path) -> None:
    async def main() -> None:
        backend = ForkBackend(tmp_path / "state")
        native_id = await backend.submit(spec(tmp_path, "kill -USR1 $$"))
        status = await until(backend, native_id, JobState.COMPLETED)
        assert status.exit_signal == signal.SIGUSR1 and status.exit_code is None
        assert status.reason is None

    run(main())


def test_cancel_kills_the_process_group(tmp_path: Path) -> None:
    async def main() -> None:
        backend = ForkBackend(tmp_path / "state", grace=0.5)
        # The job ignores SIGTERM and has a child: both must go.
        job = spec(tmp_path, "trap '' TERM; sleep 60 & echo $! > child; wait")
        native_id = await backend.submit(job)
        assert (await until(backend, native_id, JobState.RUNNING)).state is JobState.RUNNING
        while not (job.job_dir / "child").exists():
            await asyncio.sleep(0.02)
        child = int((job.job_dir / "child").read_text())
        started = time.monotonic()
        await backend.cancel(native_id)
        status = await until(backend, native_id, JobState.REMOVED)
        assert status.state is JobState.REMOVED
        assert time.monotonic() - started < 10
        assert gone(child)
        # Cancelling a finished job is not an error.
        await backend.cancel(native_id)

    run(main())


def test_hold_and_resume(tmp_path: Path) -> None:
    async def main() -> None:
        backend = ForkBackend(tmp_path / "state", grace=0.2)
        job = spec(tmp_path, "sleep 30")
        native_id = await backend.submit(job)
        await until(backend, native_id, JobState.RUNNING)
        while not (job.job_dir / ".htgrid-fork-job.pid").exists():
            await asyncio.sleep(0.02)
        job_pid = int((job.job_dir / ".htgrid-fork-job.pid").read_text())
        await backend.hold(native_id)
        assert (await backend.status([native_id]))[native_id].state is JobState.HELD
        deadline = time.monotonic() + 5
        while proc_state(job_pid) != "T" and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert proc_state(job_pid) == "T"
        await backend.resume(native_id)
        assert (await backend.status([native_id]))[native_id].state is JobState.RUNNING
        await backend.cancel(native_id)
        assert (await until(backend, native_id, JobState.REMOVED)).state is JobState.REMOVED
        with pytest.raises(BackendError, match="finished"):
            await backend.hold(native_id)

    run(main())


def test_walltime_is_reported_as_such(tmp_path: Path) -> None:
    async def main() -> None:
        backend = ForkBackend(tmp_path / "state", grace=0.5)
        native_id = await backend.submit(spec(tmp_path, "sleep 30", runtime_seconds=1))
        status = await until(backend, native_id, JobState.COMPLETED)
        assert status.state is JobState.COMPLETED
        assert status.exit_signal == signal.SIGTERM
        assert status.reason is not None and "walltime exceeded" in status.reason
        assert status.wallclock_seconds is not None and 0.9 < status.wallclock_seconds < 5

    run(main())


def test_unknown_jobs(tmp_path: Path) -> None:
    async def main() -> None:
        backend = ForkBackend(tmp_path / "state")
        found = await backend.status(["999999999", "../etc", ""])
        assert {s.state for s in found.values()} == {JobState.UNKNOWN}
        assert found["999999999"].source == "none"
        with pytest.raises(BackendError, match="not found"):
            await backend.cancel("999999999")
        assert await backend.find_by_tag("nobody") is None

    run(main())


def test_status_survives_a_restart_and_tags_find_jobs(tmp_path: Path) -> None:
    async def main() -> None:
        first = ForkBackend(tmp_path / "state")
        running = await first.submit(spec(tmp_path, "sleep 30", name="a"))
        done = await first.submit(spec(tmp_path, "exit 7", name="b"))
        await until(first, done, JobState.COMPLETED)
        second = ForkBackend(tmp_path / "state")
        found = await second.status([running, done])
        assert found[running].state is JobState.RUNNING
        assert found[done].state is JobState.COMPLETED and found[done].exit_code == 7
        assert await second.find_by_tag("a") == running
        await second.cancel(running)
        await until(second, running, JobState.REMOVED)

    run(main())


def test_a_job_that_cannot_start(tmp_path: Path) -> None:
    async def main() -> None:
        backend = ForkBackend(tmp_path / "state")
        job = spec(tmp_path, "")
        job = BatchJobSpec(tag="x", job_dir=job.job_dir, executable="/no/such/program")
        native_id = await backend.submit(job)
        status = await until(backend, native_id, JobState.COMPLETED)
        assert status.exit_code == 127
        assert status.reason is not None and "cannot execute /no/such/program" in status.reason
        await backend.ping()

    run(main())


def test_a_vanished_wrapper_is_unknown_not_completed(tmp_path: Path) -> None:
    async def main() -> None:
        backend = ForkBackend(tmp_path / "state")
        job = spec(tmp_path, "sleep 30")
        native_id = await backend.submit(job)
        await until(backend, native_id, JobState.RUNNING)
        while not (job.job_dir / ".htgrid-fork-job.pid").exists():
            await asyncio.sleep(0.02)
        job_pid = int((job.job_dir / ".htgrid-fork-job.pid").read_text())
        os.kill(int(native_id), signal.SIGKILL)  # the wrapper, without a trace
        os.killpg(job_pid, signal.SIGKILL)
        status = await until(backend, native_id, JobState.UNKNOWN)
        assert status.state is JobState.UNKNOWN
        assert status.reason is not None and "without recording" in status.reason

    run(main())
