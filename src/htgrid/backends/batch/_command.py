"""Batch back ends that drive an LRM through its commands (psij's BatchSchedulerExecutor).

A subclass supplies only command builders and output parsers (slurm.py, sge.py, pbs.py,
lsf.py); running commands, the job script, and the status algorithm live here:

1. one bulk query of the queue for all the ids asked for;
2. for jobs gone from the queue (or finished there without an exit code), the exit-code
   file the job wrapper wrote;
3. for those still unexplained (no file, or killed by a signal: cancel? walltime?), one
   query of the LRM's history (sacct, qacct, qstat -x, bhist);
4. anything found nowhere is UNKNOWN, never COMPLETED.

A command that cannot be run, times out or fails raises BackendUnavailable: a failed
query says nothing about the jobs.

The back end finds a job's exit-code file from its native id alone through a registry:
a directory of symbolic links `<registry>/<lrm>/<native id> -> job_dir`, made at submit
and again by the wrapper when the job starts (so a job recovered with find_by_tag is
covered too).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import pwd
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypedDict, Unpack

from htgrid.backends.batch._base import (
    BackendError,
    BackendUnavailable,
    BatchBackend,
    BatchJobSpec,
    CommandResult,
    JobState,
    NativeStatus,
    PreparedSubmit,
    link_name,
)
from htgrid.backends.batch._runner import CountingRunner, Runner, run_command
from htgrid.backends.batch._script import (
    ExitRecord,
    check_spec,
    exit_file,
    read_exit_file,
    render_job_script,
    script_path,
)

__all__ = ["CommandBackend", "CommandOptions", "CountingRunner", "Runner", "run_command"]

WALLTIME = "walltime exceeded"


class CommandOptions(TypedDict, total=False):
    """Settings every command back end takes (all optional)."""

    #: Runs the commands (default: real subprocesses); tests inject their own.
    runner: Runner
    #: Seconds one command may take before the LRM counts as unreachable.
    timeout: float
    #: Commands in flight at once.
    max_commands: int
    #: Whose jobs to list (default: the user running the back end).
    user: str


def _current_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def _default_registry() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "htgrid" / "batch"


class CommandBackend(BatchBackend):
    """A batch system driven through its command-line tools."""

    #: The variable in which the LRM gives a running job its id.
    job_id_var: str
    #: Text in a failed command's output meaning "the LRM is unreachable: retry later".
    transient_errors: tuple[str, ...] = ()
    #: Text in a failed cancel's output meaning the job is already gone (success).
    gone_errors: tuple[str, ...] = ()

    def __init__(self, *, registry: Path | None = None, **options: Unpack[CommandOptions]) -> None:
        """`registry`: where the `<lrm>/<native id> -> job_dir` links live (by default
        ~/.local/state/htgrid/batch); the GAHP server passes its state directory."""
        self.runner: Runner = options.get("runner", run_command)
        self.registry: Path = registry or _default_registry()
        # One subdirectory per LRM: a state directory shared by several back ends would
        # otherwise mix up Slurm's job 123 and Grid Engine's.
        self.links: Path = self.registry / self.name
        self.timeout: float = options.get("timeout", 60.0)
        self.user: str = options.get("user") or _current_user()
        self.max_commands: int = options.get("max_commands", 16)
        # Bounds the LRM commands in flight, as blah_max_threaded_cmds does; one per
        # event loop, since an asyncio semaphore belongs to the loop that first waits.
        self._slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}

    # --- what an LRM module supplies ------------------------------------------------------

    @abc.abstractmethod
    def directives(self, spec: BatchJobSpec) -> list[str]:
        """The job script's directive lines (#SBATCH ..., #$ ..., #PBS ..., #BSUB ...)."""

    @abc.abstractmethod
    def submit_command(self, spec: BatchJobSpec, script: Path) -> tuple[list[str], str | None]:
        """The submit argv, and what to feed its standard input (None: nothing)."""

    @abc.abstractmethod
    def parse_submit(self, result: CommandResult) -> str:
        """The native id in a successful submit's output."""

    @abc.abstractmethod
    def queue_command(self, ids: Sequence[str]) -> list[str]:
        """One command that reports the queued/running state of all `ids`."""

    @abc.abstractmethod
    def parse_queue(self, result: CommandResult, ids: Sequence[str]) -> dict[str, NativeStatus]:
        """The states found in the queue; raise BackendUnavailable if the query failed."""

    def history_command(self, ids: Sequence[str]) -> list[str] | None:
        """One command that looks `ids` up in the LRM's history, or None if it has none."""
        return None

    def parse_history(self, result: CommandResult, ids: Sequence[str]) -> dict[str, NativeStatus]:
        """The final states found in the history."""
        return {}

    @abc.abstractmethod
    def cancel_command(self, native_id: str) -> list[str]:
        """The command that removes a job."""

    def hold_command(self, native_id: str) -> list[str] | None:
        """The command that holds a job, if the LRM can."""
        return None

    def resume_command(self, native_id: str) -> list[str] | None:
        """The command that releases a held job, if the LRM can."""
        return None

    @abc.abstractmethod
    def ping_command(self) -> list[str]:
        """A cheap command that succeeds only when the LRM answers."""

    # --- running commands ---------------------------------------------------------------------

    async def run(self, argv: Sequence[str], *, stdin: str | None = None) -> CommandResult:
        """Run one LRM command under the concurrency bound."""
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            self._slots = {k: v for k, v in self._slots.items() if not k.is_closed()}
            slots = self._slots[loop] = asyncio.Semaphore(self.max_commands)
        async with slots:
            return await self.runner(argv, stdin=stdin, timeout=self.timeout)

    def is_transient(self, result: CommandResult) -> bool:
        """Whether a failed command's output says the LRM could not be reached."""
        text = result.stderr + result.stdout
        return any(marker in text for marker in self.transient_errors)

    def failure(self, result: CommandResult, what: str) -> BackendError | BackendUnavailable:
        """The exception for a failed command: transient or permanent."""
        detail = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()
        message = f"{what} failed (exit {result.returncode}): {' '.join(detail)[:500]}"
        if self.is_transient(result) or result.returncode < 0:
            return BackendUnavailable(message)
        return BackendError(message, code=result.returncode if 0 < result.returncode < 256 else 1)

    def unavailable(self, result: CommandResult, what: str) -> BackendUnavailable:
        """A failed query: never a failed job."""
        detail = " ".join((result.stderr.strip() or result.stdout.strip()).splitlines())
        return BackendUnavailable(f"{what} failed (exit {result.returncode}): {detail[:500]}")

    # --- BatchBackend ---------------------------------------------------------------------------

    async def submit(self, spec: BatchJobSpec) -> str:
        return await self.submit_prepared(await asyncio.to_thread(self.prepare, spec))

    def prepare(self, spec: BatchJobSpec) -> PreparedSubmit:
        check_spec(spec)
        path = script_path(spec, self.name)
        text = render_job_script(
            spec,
            directives=self.directives(spec),
            job_id_var=self.job_id_var,
            registry=self.links,
        )
        # Written in place: the script is sent only once it is whole, and a submit sent
        # again after a crash writes it again (the GAHP's is in a new job directory).
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise BackendError(f"cannot write the job script {path}: {exc}") from exc
        argv, stdin = self.submit_command(spec, path)
        return PreparedSubmit(spec, tuple(argv), stdin)

    async def submit_prepared(self, prepared: PreparedSubmit) -> str:
        argv = prepared.argv
        result = await self.run(argv, stdin=prepared.stdin)
        if result.returncode != 0:
            raise self.failure(result, f"{argv[0]}")
        native_id = self.parse_submit(result)
        self._register(native_id, prepared.spec.job_dir)
        return native_id

    async def status(self, native_ids: Sequence[str]) -> dict[str, NativeStatus]:
        ids = list(dict.fromkeys(native_ids))
        if not ids:
            return {}
        queue = self.parse_queue(await self.run(self.queue_command(ids)), ids)
        records: dict[str, ExitRecord | None] = {}
        for nid in ids:
            q = queue.get(nid)
            if q is None or q.state in (JobState.COMPLETED, JobState.REMOVED):
                records[nid] = self._exit_record(nid)
        wanted = [nid for nid in records if self._needs_history(queue.get(nid), records[nid])]
        history: dict[str, NativeStatus] = {}
        argv = self.history_command(wanted) if wanted else None
        if argv is not None:
            history = self.parse_history(await self.run(argv), wanted)
        answer: dict[str, NativeStatus] = {}
        for nid in ids:
            q = queue.get(nid)
            if nid not in records and q is not None:
                answer[nid] = q
                continue
            seen, h = q, history.get(nid)
            if h is not None:
                # The history has the exit code the queue lacked.
                seen = h if q is None else replace(h, reason=h.reason or q.reason)
            answer[nid] = _resolve(nid, seen, records.get(nid))
        return answer

    async def cancel(self, native_id: str) -> None:
        result = await self.run(self.cancel_command(native_id))
        if result.returncode == 0:
            return
        text = result.stderr + result.stdout
        # Cancelling a job that has already left is what was wanted.
        if any(marker in text for marker in self.gone_errors):
            return
        raise self.failure(result, f"cancel of {native_id}")

    async def hold(self, native_id: str) -> None:
        argv = self.hold_command(native_id)
        if argv is None:
            await super().hold(native_id)
            return
        result = await self.run(argv)
        if result.returncode != 0:
            raise self.failure(result, f"hold of {native_id}")

    async def resume(self, native_id: str) -> None:
        argv = self.resume_command(native_id)
        if argv is None:
            await super().resume(native_id)
            return
        result = await self.run(argv)
        if result.returncode != 0:
            raise self.failure(result, f"release of {native_id}")

    async def ping(self) -> None:
        result = await self.run(self.ping_command())
        if result.returncode != 0:
            raise self.unavailable(result, f"{self.name} ping")

    # --- the registry and exit-code files ----------------------------------------------------

    def _link(self, native_id: str) -> Path:
        return self.links / link_name(native_id)

    def _register(self, native_id: str, job_dir: Path) -> None:
        link = self._link(native_id)
        try:
            try:
                link.symlink_to(job_dir)  # the usual case: one system call
            except FileNotFoundError:
                self.links.mkdir(parents=True, exist_ok=True)
                link.symlink_to(job_dir)
        except FileExistsError:
            # An id reused after the LRM's state was wiped: replace the old link.
            tmp = link.with_name(f".{link.name}.{os.getpid()}")
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(job_dir)
                tmp.replace(link)
        except OSError:
            # Not fatal: the wrapper makes the same link when the job starts.
            pass

    def _exit_record(self, native_id: str) -> ExitRecord | None:
        try:
            job_dir = Path(os.readlink(self._link(native_id)))
        except OSError:
            return None
        return read_exit_file(exit_file(job_dir, native_id), native_id)

    @staticmethod
    def _needs_history(queued: NativeStatus | None, record: ExitRecord | None) -> bool:
        if queued is not None:
            # Finished in the queue: only the exit code may be missing.
            return (
                queued.state == JobState.COMPLETED
                and record is None
                and queued.exit_code is None
                and queued.exit_signal is None
            )
        # An ordinary exit in the file says all; a signal may be a cancel or the walltime.
        return record is None or record.signal is not None


def _resolve(native_id: str, seen: NativeStatus | None, record: ExitRecord | None) -> NativeStatus:
    """Combine what the LRM says (queue or history) with the wrapper's exit record."""
    if seen is None:
        if record is None:
            return NativeStatus(native_id, JobState.UNKNOWN, source="none")
        return NativeStatus(
            native_id,
            JobState.COMPLETED,
            exit_code=record.exit_code,
            exit_signal=record.signal,
            reason=WALLTIME if record.walltime_exceeded else None,
            wallclock_seconds=record.elapsed,
            source="exit-file",
        )
    if record is None or seen.state not in (JobState.COMPLETED, JobState.REMOVED):
        return seen
    # The LRM knows why the job ended; the wrapper knows how the executable ended (the
    # LRM sees only the wrapper, which exits 128+n for a signal n).
    return replace(
        seen,
        exit_code=record.exit_code,
        exit_signal=record.signal,
        reason=seen.reason or (WALLTIME if record.walltime_exceeded else None),
        wallclock_seconds=(
            seen.wallclock_seconds if seen.wallclock_seconds is not None else record.elapsed
        ),
    )
