"""Slurm: sbatch, squeue, sacct, scancel, scontrol.

States follow the blahp's slurm_status mapping, refined where Slurm says more:
PENDING/CONFIGURING -> IDLE (HELD when the reason is a hold), RUNNING/COMPLETING ->
RUNNING, SUSPENDED/STOPPED -> SUSPENDED, CANCELLED -> REMOVED, and every other end
(COMPLETED, FAILED, TIMEOUT, NODE_FAIL, ...) -> COMPLETED with a reason when it was not
an ordinary exit (TIMEOUT is "walltime exceeded"). Job state codes: squeue(1), sacct(1).

History is `sacct` when accounting is configured; without it (detected from sacct's
own answer) the exit-code file is all there is once squeue has purged a job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

from htgrid.backends.batch._base import (
    BackendError,
    BatchJobSpec,
    CommandResult,
    JobState,
    NativeStatus,
)
from htgrid.backends.batch._command import WALLTIME, CommandBackend, CommandOptions
from htgrid.backends.batch._script import extra_args, job_name, per_node, resolve_path

__all__ = ["SlurmBackend", "parse_sacct", "parse_squeue", "slurm_state"]

# One comma-separated argument: stay well below the kernel's 128 KiB per argument.
_MAX_LISTED_IDS = 5000
# How far back find_by_tag searches the accounting records.
_FIND_WINDOW = "now-30days"
_QUEUE_FORMAT = "%i|%T|%r|%M|%j"
_SACCT_FIELDS = "JobIDRaw,State,ExitCode,ElapsedRaw,JobName"

_STATES: dict[str, tuple[JobState, str | None]] = {
    "PENDING": (JobState.IDLE, None),
    "CONFIGURING": (JobState.IDLE, None),
    "REQUEUED": (JobState.IDLE, None),
    "REQUEUE_FED": (JobState.IDLE, None),
    "REQUEUE_HOLD": (JobState.HELD, "held"),
    "RESV_DEL_HOLD": (JobState.HELD, "reservation deleted"),
    "RUNNING": (JobState.RUNNING, None),
    "COMPLETING": (JobState.RUNNING, None),
    "SIGNALING": (JobState.RUNNING, None),
    "STAGE_OUT": (JobState.RUNNING, None),
    "RESIZING": (JobState.RUNNING, None),
    "SUSPENDED": (JobState.SUSPENDED, None),
    "STOPPED": (JobState.SUSPENDED, None),
    "CANCELLED": (JobState.REMOVED, None),
    "REVOKED": (JobState.REMOVED, "revoked by a federated sibling"),
    "COMPLETED": (JobState.COMPLETED, None),
    "FAILED": (JobState.COMPLETED, None),
    "TIMEOUT": (JobState.COMPLETED, WALLTIME),
    "DEADLINE": (JobState.COMPLETED, "deadline reached"),
    "NODE_FAIL": (JobState.COMPLETED, "node failure"),
    "BOOT_FAIL": (JobState.COMPLETED, "node boot failure"),
    "PREEMPTED": (JobState.COMPLETED, "preempted"),
    "OUT_OF_MEMORY": (JobState.COMPLETED, "out of memory"),
    "SPECIAL_EXIT": (JobState.COMPLETED, "special exit"),
}


def slurm_state(state: str, reason: str = "") -> tuple[JobState, str | None]:
    """JobState and reason for a Slurm state name ("CANCELLED by 0" -> REMOVED)."""
    name = state.split()[0].rstrip("+") if state.strip() else ""
    job_state, why = _STATES.get(name, (JobState.UNKNOWN, f"unknown Slurm state {state!r}"))
    # A held job is PENDING with a hold as its reason (scontrol hold / requeuehold).
    if job_state == JobState.IDLE and (reason.startswith("JobHeld") or "held state" in reason):
        return JobState.HELD, reason
    return job_state, why


def _duration(text: str) -> float | None:
    """Seconds in squeue's [days-][hours:]minutes:seconds."""
    days, _, rest = text.strip().rpartition("-")
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return float(seconds + (int(days) * 86400 if days.isdigit() else 0))


def parse_squeue(text: str, ids: Sequence[str]) -> dict[str, NativeStatus]:
    """`squeue -h -o '%i|%T|%r|%M|%j'` lines -> states of the jobs asked for."""
    wanted = set(ids)
    found: dict[str, NativeStatus] = {}
    for line in text.splitlines():
        fields = line.split("|", 4)
        if len(fields) < 4 or fields[0] not in wanted:
            continue
        job_state, reason = slurm_state(fields[1], fields[2])
        found[fields[0]] = NativeStatus(
            fields[0],
            job_state,
            # COMPLETED means every process exited 0 (squeue shows no exit codes).
            exit_code=0 if fields[1] == "COMPLETED" else None,
            reason=reason,
            wallclock_seconds=_duration(fields[3]),
            source="queue",
        )
    return found


def parse_sacct(text: str, ids: Sequence[str]) -> dict[str, NativeStatus]:
    """`sacct -X -n -P -o JobIDRaw,State,ExitCode,ElapsedRaw,JobName` -> final states."""
    wanted = set(ids)
    found: dict[str, NativeStatus] = {}
    for line in text.splitlines():
        fields = line.split("|", 4)
        if len(fields) < 4 or fields[0] not in wanted:
            continue
        job_state, reason = slurm_state(fields[1])
        code, _, sig = fields[2].partition(":")
        signal = int(sig) if sig.isdigit() and int(sig) > 0 else None
        exit_code = int(code) if code.isdigit() and signal is None else None
        found[fields[0]] = NativeStatus(
            fields[0],
            job_state,
            exit_code=exit_code if job_state == JobState.COMPLETED else None,
            exit_signal=signal if job_state == JobState.COMPLETED else None,
            reason=reason,
            wallclock_seconds=float(fields[3]) if fields[3].isdigit() else None,
            source="history",
        )
    return found


class SlurmBackend(CommandBackend):
    """Slurm through its commands. `accounting`: None detects whether sacct works."""

    name = "slurm"
    job_id_var = "SLURM_JOB_ID"
    transient_errors = (
        "Unable to contact slurm controller",
        "Socket timed out",
        "temporarily unable to accept job",
        "Resource temporarily unavailable",
        "Zero Bytes were transmitted",
        "Connection refused",
        "Slurm backup controller in standby mode",
    )
    gone_errors = ("Invalid job id", "already completing or completed")

    def __init__(
        self,
        *,
        accounting: bool | None = None,
        registry: Path | None = None,
        **options: Unpack[CommandOptions],
    ) -> None:
        super().__init__(registry=registry, **options)
        self.accounting = accounting

    def directives(self, spec: BatchJobSpec) -> list[str]:
        d = [
            f"--job-name={job_name(spec.tag)}",
            f"--chdir={spec.job_dir}",
            # '%' starts a Slurm file name pattern (%j...); '%%' is a literal one.
            f"--output={resolve_path(spec, spec.stdout).replace('%', '%%')}",
            f"--error={resolve_path(spec, spec.stderr).replace('%', '%%')}",
        ]
        if spec.queue:
            d.append(f"--partition={spec.queue}")
        if spec.project:
            d.append(f"--account={spec.project}")
        if spec.runtime_seconds is not None:
            # Slurm's limits are whole minutes.
            d.append(f"--time={math.ceil(spec.runtime_seconds / 60)}")
        if spec.memory_mb is not None:
            d.append(f"--mem={per_node(spec.memory_mb, spec.nodes)}M")
        if spec.nodes > 1:
            d += [f"--nodes={spec.nodes}", f"--ntasks={spec.nodes}"]
        if spec.cpus > 1:
            d.append(f"--cpus-per-task={per_node(spec.cpus, spec.nodes)}")
        if spec.gpus:
            d.append(f"--gpus={spec.gpus}")
        return [f"#SBATCH {x}" for x in d]

    def submit_command(self, spec: BatchJobSpec, script: Path) -> tuple[list[str], str | None]:
        return ["sbatch", "--parsable", *extra_args(spec), str(script)], None

    def parse_submit(self, result: CommandResult) -> str:
        # --parsable prints "<id>" or "<id>;<cluster>".
        for line in result.stdout.splitlines():
            native_id = line.strip().split(";")[0]
            if native_id.isdigit():
                return native_id
        raise BackendError(f"sbatch printed no job id: {result.stdout.strip()[:200]!r}", code=8)

    def queue_command(self, ids: Sequence[str]) -> list[str]:
        argv = ["squeue", "-h", "-t", "all", "-o", _QUEUE_FORMAT]
        if len(ids) > _MAX_LISTED_IDS:
            return [*argv, "-u", self.user]
        return [*argv, "-j", ",".join(ids)]

    def parse_queue(self, result: CommandResult, ids: Sequence[str]) -> dict[str, NativeStatus]:
        if result.returncode != 0:
            # All ids purged: squeue calls the list invalid. That is an answer: none queued.
            if "Invalid job id" in result.stderr:
                return {}
            raise self.unavailable(result, "squeue")
        return parse_squeue(result.stdout, ids)

    def history_command(self, ids: Sequence[str]) -> list[str] | None:
        if self.accounting is False:
            return None
        argv = ["sacct", "-X", "-n", "-P", "-o", _SACCT_FIELDS]
        if len(ids) > _MAX_LISTED_IDS:
            return [*argv, "-u", self.user, "-S", _FIND_WINDOW]
        return [*argv, "-j", ",".join(ids)]

    def parse_history(self, result: CommandResult, ids: Sequence[str]) -> dict[str, NativeStatus]:
        if result.returncode != 0:
            if _accounting_disabled(result):
                self.accounting = False
                return {}
            raise self.unavailable(result, "sacct")
        self.accounting = True
        return parse_sacct(result.stdout, ids)

    def cancel_command(self, native_id: str) -> list[str]:
        return ["scancel", native_id]

    async def hold(self, native_id: str) -> None:
        # `scontrol hold` only keeps a pending job from starting; a running one is
        # requeued held (HTCondor's hold stops the job).
        result = await self.run(["scontrol", "requeuehold", native_id])
        if result.returncode == 0:
            return
        if "pending" not in (result.stderr + result.stdout).lower():
            raise self.failure(result, f"hold of {native_id}")
        result = await self.run(["scontrol", "hold", native_id])
        if result.returncode != 0:
            raise self.failure(result, f"hold of {native_id}")

    def resume_command(self, native_id: str) -> list[str] | None:
        return ["scontrol", "release", native_id]

    def ping_command(self) -> list[str]:
        return ["scontrol", "ping"]

    async def find_by_tag(self, tag: str) -> str | None:
        name = job_name(tag)
        result = await self.run(
            ["squeue", "-h", "-t", "all", "-u", self.user, f"--name={name}", "-o", "%i"]
        )
        if result.returncode != 0:
            raise self.unavailable(result, "squeue")
        found = _latest(result.stdout)
        if found is not None or self.accounting is False:
            return found
        argv = ["sacct", "-X", "-n", "-P", "-u", self.user, f"--name={name}"]
        result = await self.run([*argv, "-S", _FIND_WINDOW, "-o", "JobIDRaw"])
        if result.returncode != 0:
            if _accounting_disabled(result):
                self.accounting = False
                return None
            raise self.unavailable(result, "sacct")
        return _latest(result.stdout)


def _accounting_disabled(result: CommandResult) -> bool:
    return "accounting storage is disabled" in (result.stderr + result.stdout).lower()


def _latest(text: str) -> str | None:
    """The newest job id among lines of ids (several: a duplicate happened before)."""
    ids = [line.strip() for line in text.splitlines() if line.strip().isdigit()]
    return max(ids, key=int) if ids else None
