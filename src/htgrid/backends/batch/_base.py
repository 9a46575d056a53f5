"""The contract between the batch GAHP server and one batch system (an LRM).

Modelled on psij-python: a back end builds commands and parses their output; running
them is shared. Values are frozen dataclasses; states are HTCondor's JobStatus codes,
which is what BLAH_JOB_STATUS reports.

A job that cannot be found anywhere (queue, accounting history, exit-code file) is
UNKNOWN, never COMPLETED, and a status command that fails is not a failed job: it raises
`BackendUnavailable` and the caller keeps the previous state.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from htgrid.errors import HTGridError

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "BatchBackend",
    "BatchJobSpec",
    "CommandResult",
    "JobState",
    "NativeStatus",
    "PreparedSubmit",
    "link_name",
]


class JobState(enum.IntEnum):
    """HTCondor's JobStatus numbers, plus UNKNOWN for a job found nowhere."""

    UNKNOWN = 0
    IDLE = 1
    RUNNING = 2
    REMOVED = 3
    COMPLETED = 4
    HELD = 5
    TRANSFERRING_OUTPUT = 6
    SUSPENDED = 7


class BatchError(HTGridError):
    """The batch GAHP could not do what it was asked."""


class BackendError(BatchError):
    """The batch system refused a request (bad queue, bad option...): a permanent error.

    `code` is the blahp-style result code reported to the grid manager (non-zero).
    """

    def __init__(self, message: str, *, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class BackendUnavailable(BatchError):
    """The batch system could not be asked (command missing, timed out, daemon down).

    Transient: retry later; it says nothing about the jobs.
    """


@dataclass(frozen=True, slots=True)
class BatchJobSpec:
    """What the GAHP asks a back end to run, from the BLAH_JOB_SUBMIT ClassAd.

    Paths are absolute on the host where the batch system's commands run. `job_dir` is
    the job's working area (the sandbox); the wrapper script and the exit-code file
    live there. `tag` is the client's job id, used as the batch job name so that a
    submit can be found again after a crash.
    """

    tag: str
    job_dir: Path
    executable: str
    arguments: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    stdin: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    queue: str | None = None
    project: str | None = None
    runtime_seconds: int | None = None
    memory_mb: int | None = None
    cpus: int = 1
    nodes: int = 1
    gpus: int = 0
    extra_args: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedSubmit:
    """A submit whose files are written (`BatchBackend.prepare`), ready to be sent."""

    spec: BatchJobSpec
    #: The submit command and what to feed its standard input (command back ends).
    argv: tuple[str, ...] = ()
    stdin: str | None = None


def link_name(native_id: str) -> str:
    """The name of a job's `<native id> -> job dir` link (as the job wrapper makes it)."""
    return native_id.replace("/", "_")


@dataclass(frozen=True, slots=True)
class NativeStatus:
    """One job's state as the batch system (or its history) reports it."""

    native_id: str
    state: JobState
    exit_code: int | None = None
    exit_signal: int | None = None
    # Why the job ended when it was not an ordinary exit ("walltime exceeded", ...).
    reason: str | None = None
    wallclock_seconds: float | None = None
    # Where the answer came from: "queue", "history", "exit-file" or "none".
    source: str = "queue"


@dataclass(frozen=True, slots=True)
class CommandResult:
    """A finished command: its argv, exit code and output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class BatchBackend(abc.ABC):
    """One batch system. Implementations are stateless apart from configuration."""

    #: The name used in `grid_resource = batch <name>` and the blahp's gridtype.
    name: str
    #: The directory in which the back end links `<link_name(native id)> -> job dir` for
    #: each job it submits, if it does (the GAHP then makes no link of its own).
    links: Path | None = None

    @abc.abstractmethod
    async def submit(self, spec: BatchJobSpec) -> str:
        """Submit one job; return its native id. Raises BackendError/BackendUnavailable."""

    def prepare(self, spec: BatchJobSpec) -> PreparedSubmit:
        """The blocking part of a submit (writing the job's script): the GAHP runs it in a
        worker thread with the staging in. Raises BackendError."""
        return PreparedSubmit(spec)

    async def submit_prepared(self, prepared: PreparedSubmit) -> str:
        """Submit a job `prepare` made ready; return its native id (as `submit`)."""
        return await self.submit(prepared.spec)

    @abc.abstractmethod
    async def status(self, native_ids: Sequence[str]) -> dict[str, NativeStatus]:
        """The state of many jobs with one query of the queue (plus history for the rest).

        Every id asked for is in the answer; one found nowhere is JobState.UNKNOWN.
        Raises BackendUnavailable when the batch system cannot be asked at all.
        """

    @abc.abstractmethod
    async def cancel(self, native_id: str) -> None:
        """Remove the job from the batch system."""

    async def hold(self, native_id: str) -> None:
        """Hold the job in the batch system, where it can."""
        raise BackendError(f"{self.name} cannot hold jobs", code=1)

    async def resume(self, native_id: str) -> None:
        """Release a held job, where the batch system can."""
        raise BackendError(f"{self.name} cannot resume jobs", code=1)

    @abc.abstractmethod
    async def ping(self) -> None:
        """Check the batch system answers; raise BackendUnavailable if not."""

    async def find_by_tag(self, tag: str) -> str | None:
        """The native id of a job submitted with `tag`, if the batch system knows one.

        Used after a crash between submitting and recording the id: never submit twice.
        """
        return None
