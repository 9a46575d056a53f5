"""The `fork` back end: jobs run on this host, detached from the GAHP server.

Each job gets a wrapper (`_forkrun.py`) that leads its own session, runs the job in its own
process group and writes an exit record into the job directory, so a job's fate survives a
GAHP restart. The native id is the wrapper's pid (with `.2`, `.3`... should a pid come
round again); `<state_dir>/<native id>` links to the job directory.

status: the exit record if there is one, else the process table (the wrapper alive, and
started when we started it: pids are reused), else UNKNOWN. cancel: SIGTERM to the job's
process group, SIGKILL after a grace period (the wrapper does that, and records it).
hold/resume: SIGSTOP/SIGCONT to the job's process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from htgrid.backends.batch import _forkrun
from htgrid.backends.batch._base import (
    BackendError,
    BackendUnavailable,
    BatchBackend,
    BatchJobSpec,
    JobState,
    NativeStatus,
)
from htgrid.backends.batch._registry import BackendOptions

__all__ = ["ForkBackend", "create_backend"]

_META = ".htgrid-fork.json"
_CANCELLED = ".htgrid-fork-cancelled"
_HELD = ".htgrid-fork-held"
_RUNNER = Path(_forkrun.__file__)


def create_backend(options: BackendOptions) -> ForkBackend:
    """The registry's factory."""
    return ForkBackend(options.state_dir)


@dataclass(frozen=True, slots=True)
class _Job:
    native_id: str
    job_dir: Path
    wrapper_pid: int
    wrapper_start: int | None

    def path(self, name: str) -> Path:
        return self.job_dir / name

    def job_pid(self) -> int | None:
        """The job's pid (also its process group), once the wrapper has started it."""
        try:
            return int(self.path(_forkrun.JOB_PID).read_text(encoding="ascii"))
        except (OSError, ValueError):
            return None

    def exit_record(self) -> dict[str, Any] | None:
        try:
            record = json.loads(self.path(_forkrun.EXIT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def wrapper_alive(self) -> bool:
        return _alive(self.wrapper_pid, self.wrapper_start)


class ForkBackend(BatchBackend):
    """Jobs as detached processes on this host."""

    name = "fork"

    def __init__(self, state_dir: Path, *, grace: float = 10.0, python: str | None = None) -> None:
        self.state_dir = state_dir
        self.grace = grace
        self.python = python or sys.executable
        (state_dir / "tags").mkdir(parents=True, exist_ok=True)

    async def submit(self, spec: BatchJobSpec) -> str:
        if not spec.job_dir.is_dir():
            raise BackendError(f"job directory {spec.job_dir} does not exist")
        job_spec = {
            "executable": spec.executable,
            "arguments": list(spec.arguments),
            "environment": dict(spec.environment),
            "stdin": spec.stdin,
            "stdout": spec.stdout,
            "stderr": spec.stderr,
            "runtime": spec.runtime_seconds,
            "grace": self.grace,
        }
        _write_json(spec.job_dir / _forkrun.SPEC, job_spec)
        try:
            launcher = await asyncio.create_subprocess_exec(
                self.python,
                "-I",
                "-S",
                str(_RUNNER),
                str(spec.job_dir),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            out, err = await launcher.communicate()
        except OSError as exc:
            raise BackendUnavailable(f"cannot start {self.python}: {exc.strerror or exc}") from exc
        text = out.decode(errors="replace").strip()
        if launcher.returncode != 0 or not text.isdigit():
            detail = err.decode(errors="replace").strip() or text
            raise BackendError(f"the fork wrapper did not start: {detail}", code=1)
        pid = int(text)
        native_id = self._claim(pid, spec.job_dir)
        meta = {"native_id": native_id, "pid": pid, "start": _start_ticks(pid), "tag": spec.tag}
        _write_json(spec.job_dir / _META, meta)
        tag_file = self.state_dir / "tags" / _safe(spec.tag)
        _write_text(tag_file, native_id)
        return native_id

    async def status(self, native_ids: Sequence[str]) -> dict[str, NativeStatus]:
        # Small file reads and /proc lookups, but many of them: keep them off the loop.
        return await asyncio.to_thread(self._statuses, list(native_ids))

    async def cancel(self, native_id: str) -> None:
        job = self._job(native_id)
        if job is None:
            raise BackendError(f"job {native_id} not found", code=1)
        if job.exit_record() is not None:
            return
        job.path(_CANCELLED).touch()
        job_pid = job.job_pid()
        if job.wrapper_alive():
            # The wrapper forwards SIGTERM to the job, then SIGKILLs it after the grace.
            with contextlib.suppress(ProcessLookupError):
                os.kill(job.wrapper_pid, signal.SIGTERM)
        elif job_pid is not None:
            _killpg(job_pid, signal.SIGKILL)

    async def hold(self, native_id: str) -> None:
        job = self._running(native_id)
        job_pid = job.job_pid()
        if job_pid is None:
            raise BackendUnavailable(f"job {native_id} has not started yet")
        job.path(_HELD).touch()
        _killpg(job_pid, signal.SIGSTOP)

    async def resume(self, native_id: str) -> None:
        job = self._running(native_id)
        job_pid = job.job_pid()
        if job_pid is not None:
            _killpg(job_pid, signal.SIGCONT)
        with contextlib.suppress(FileNotFoundError):
            job.path(_HELD).unlink()

    async def ping(self) -> None:
        if not os.access(self.python, os.X_OK):
            raise BackendUnavailable(f"{self.python} cannot be run")
        if not os.access(self.state_dir, os.W_OK):
            raise BackendUnavailable(f"{self.state_dir} is not writable")

    async def find_by_tag(self, tag: str) -> str | None:
        try:
            native_id = (self.state_dir / "tags" / _safe(tag)).read_text(encoding="utf-8")
        except OSError:
            return None
        return native_id if self._job(native_id) is not None else None

    # ---- the job's files ---------------------------------------------------------------------

    def _claim(self, pid: int, job_dir: Path) -> str:
        """A native id for wrapper `pid`: its pid, unless an old job had that pid."""
        number = 1
        while True:
            native_id = str(pid) if number == 1 else f"{pid}.{number}"
            try:
                (self.state_dir / native_id).symlink_to(job_dir)
            except FileExistsError:
                number += 1
                continue
            return native_id

    def _job(self, native_id: str) -> _Job | None:
        if not native_id or "/" in native_id or native_id.startswith("."):
            return None
        job_dir = self.state_dir / native_id
        try:
            meta = json.loads((job_dir / _META).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("native_id") != native_id:
            return None
        start = meta.get("start")
        return _Job(native_id, job_dir, int(meta["pid"]), start if isinstance(start, int) else None)

    def _running(self, native_id: str) -> _Job:
        job = self._job(native_id)
        if job is None:
            raise BackendError(f"job {native_id} not found", code=1)
        if job.exit_record() is not None or not job.wrapper_alive():
            raise BackendError(f"job {native_id} has finished", code=1)
        return job

    def _statuses(self, native_ids: list[str]) -> dict[str, NativeStatus]:
        return {native_id: self._status(native_id) for native_id in native_ids}

    def _status(self, native_id: str) -> NativeStatus:
        job = self._job(native_id)
        if job is None:
            return NativeStatus(native_id, JobState.UNKNOWN, source="none")
        alive = job.wrapper_alive()
        record = job.exit_record()
        if record is None and not alive:
            # The wrapper may have written its record just after we looked.
            record = job.exit_record()
        cancelled = job.path(_CANCELLED).exists()
        if record is not None:
            return _from_record(native_id, record, cancelled)
        if alive:
            state = JobState.HELD if job.path(_HELD).exists() else JobState.RUNNING
            return NativeStatus(native_id, state, source="queue")
        if cancelled:
            return NativeStatus(native_id, JobState.REMOVED, reason="removed", source="none")
        return NativeStatus(
            native_id,
            JobState.UNKNOWN,
            reason="the job's wrapper exited without recording how the job ended",
            source="none",
        )


def _from_record(native_id: str, record: dict[str, Any], cancelled: bool) -> NativeStatus:
    code = record.get("exit_code")
    signum = record.get("signal")
    start, end = record.get("start"), record.get("end")
    wallclock = (
        end - start if isinstance(start, int | float) and isinstance(end, int | float) else None
    )
    reason = record.get("reason")
    if cancelled:
        state = JobState.REMOVED
        reason = reason or "removed"
    elif isinstance(code, int) or isinstance(signum, int):
        state = JobState.COMPLETED
    else:
        # Neither an exit code nor a signal: never report that as a success.
        state = JobState.REMOVED
    return NativeStatus(
        native_id,
        state,
        exit_code=code if isinstance(code, int) else None,
        exit_signal=signum if isinstance(signum, int) else None,
        reason=reason if isinstance(reason, str) else None,
        wallclock_seconds=wallclock,
        source="exit-file",
    )


def _start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (None without /proc)."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    return text[text.rfind(")") + 2 :].split()


def _alive(pid: int, start: int | None) -> bool:
    fields = _proc_stat(pid)
    if fields is None:
        if Path("/proc/self/stat").exists():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] in ("Z", "X"):
        return False
    return start is None or len(fields) <= 19 or int(fields[19]) == start


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _safe(tag: str) -> str:
    return tag.replace("/", "_").lstrip(".") or "_"


def _write_json(path: Path, data: object) -> None:
    _write_text(path, json.dumps(data))


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
