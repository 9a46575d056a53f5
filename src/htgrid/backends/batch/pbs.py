"""PBS Professional / OpenPBS: qsub, qstat -x -f -F json, qselect, qdel, qhold, qrls.

One `qstat -x -f -F json <ids>` answers for queued, running and (with the server's
job_history_enable) finished jobs alike, so there is no separate history query; jobs
it no longer knows are left to the exit-code file. Torque's qstat (-x means XML there)
is not supported.

job_state (qstat(1B)): Q/W/T/M -> IDLE, H -> HELD, R/E/B -> RUNNING, S/U -> SUSPENDED,
F/X -> COMPLETED, or REMOVED for substate 91 (terminated: qdel). Exit_status -29 is
JOB_EXEC_KILL_WALLTIME; other negative values are PBS failing to run the job; values
above 256 are 256 + the signal that killed the job (OpenPBS src/include/job.h).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from htgrid.backends.batch._base import (
    BackendError,
    BatchJobSpec,
    CommandResult,
    JobState,
    NativeStatus,
)
from htgrid.backends.batch._command import WALLTIME, CommandBackend
from htgrid.backends.batch._script import extra_args, job_name, per_node, resolve_path

__all__ = ["PBSBackend", "parse_qstat_json", "pbs_state"]

_FORBIDDEN = "@:#/\\"
_JOB_EXEC_KILL_WALLTIME = -29
_SUBSTATE_TERMINATED = 91

_STATES: dict[str, JobState] = {
    "Q": JobState.IDLE,
    "W": JobState.IDLE,
    "T": JobState.IDLE,
    "M": JobState.IDLE,
    "H": JobState.HELD,
    "R": JobState.RUNNING,
    "E": JobState.RUNNING,
    "B": JobState.RUNNING,
    "S": JobState.SUSPENDED,
    "U": JobState.SUSPENDED,
    "F": JobState.COMPLETED,
    "X": JobState.COMPLETED,
}


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _hms(value: object) -> float | None:
    """Seconds in PBS's [[HH:]MM:]SS."""
    parts = str(value).split(":") if value is not None else []
    if not parts or not all(p.strip().isdigit() for p in parts):
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return float(seconds)


def pbs_state(attrs: Mapping[str, Any], native_id: str) -> NativeStatus:
    """A NativeStatus from one job's qstat -f -F json attributes."""
    letter = str(attrs.get("job_state", "")).strip()
    state = _STATES.get(letter, JobState.UNKNOWN)
    used = attrs.get("resources_used")
    wallclock = _hms(used.get("walltime")) if isinstance(used, Mapping) else None
    reason: str | None = None if state != JobState.UNKNOWN else f"unknown PBS state {letter!r}"
    if state != JobState.COMPLETED:
        return NativeStatus(
            native_id, state, reason=reason, wallclock_seconds=wallclock, source="queue"
        )
    exit_status = _int(attrs.get("Exit_status"))
    code: int | None = None
    signal: int | None = None
    comment = str(attrs.get("comment", ""))
    if _int(attrs.get("substate")) == _SUBSTATE_TERMINATED:
        state, reason = JobState.REMOVED, "deleted"
    elif exit_status == _JOB_EXEC_KILL_WALLTIME or ("walltime" in comment and "exceed" in comment):
        reason = WALLTIME
    elif exit_status is not None and exit_status < 0:
        reason = f"PBS could not run the job (Exit_status {exit_status})"
    elif exit_status is not None and exit_status > 256:
        signal = exit_status - 256
    else:
        code = exit_status
    return NativeStatus(
        native_id,
        state,
        exit_code=code,
        exit_signal=signal,
        reason=reason,
        wallclock_seconds=wallclock,
        source="history",
    )


def _sequence(native_id: str) -> str:
    return native_id.split(".", 1)[0]


def parse_qstat_json(text: str, ids: Sequence[str]) -> dict[str, NativeStatus]:
    """`qstat -f -F json` -> states of the jobs asked for.

    Ids are matched on their sequence number too: qsub may print "12.pbs" where qstat
    says "12.pbs.example.com".
    """
    if not text.strip():
        return {}
    # strict=False: values (Variable_List...) may carry raw control characters.
    data = json.loads(text, strict=False)
    jobs = data.get("Jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, dict):
        return {}
    by_sequence = {_sequence(key): key for key in jobs}
    found: dict[str, NativeStatus] = {}
    for nid in ids:
        key = nid if nid in jobs else by_sequence.get(_sequence(nid))
        attrs = jobs.get(key) if key is not None else None
        if isinstance(attrs, dict):
            found[nid] = pbs_state(attrs, nid)
    return found


def _only_unknown_jobs(stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return all("Unknown Job Id" in line or "has finished" in line for line in lines)


class PBSBackend(CommandBackend):
    """OpenPBS / PBS Professional through its commands."""

    name = "pbs"
    job_id_var = "PBS_JOBID"
    transient_errors = (
        "cannot connect to server",
        "Connection refused",
        "pbs_iff",
        "End of File",
        "Communication failure",
        "Server shutting down",
    )
    gone_errors = ("Unknown Job Id", "has finished")

    def job_name(self, tag: str) -> str:
        """PBS job names must start with a letter."""
        return job_name(tag, letter_first=True, forbidden=_FORBIDDEN)

    def directives(self, spec: BatchJobSpec) -> list[str]:
        d = [
            f"-N {self.job_name(spec.tag)}",
            "-S /bin/bash",
            f"-o {resolve_path(spec, spec.stdout)}",
            f"-e {resolve_path(spec, spec.stderr)}",
        ]
        if spec.queue:
            d.append(f"-q {spec.queue}")
        if spec.project:
            d.append(f"-A {spec.project}")
        if spec.runtime_seconds is not None:
            t = spec.runtime_seconds
            d.append(f"-l walltime={t // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d}")
        chunk = f"{spec.nodes}:ncpus={per_node(spec.cpus, spec.nodes)}"
        if spec.memory_mb is not None:
            chunk += f":mem={per_node(spec.memory_mb, spec.nodes)}mb"
        if spec.gpus:
            chunk += f":ngpus={per_node(spec.gpus, spec.nodes)}"
        d.append(f"-l select={chunk}")
        return [f"#PBS {x}" for x in d]

    def submit_command(self, spec: BatchJobSpec, script: Path) -> tuple[list[str], str | None]:
        # PBS starts jobs in $HOME: the wrapper enters the job directory itself.
        return ["qsub", *extra_args(spec), str(script)], None

    def parse_submit(self, result: CommandResult) -> str:
        for line in result.stdout.splitlines():
            native_id = line.strip()
            if native_id and _sequence(native_id).split("[")[0].isdigit():
                return native_id
        raise BackendError(f"qsub printed no job id: {result.stdout.strip()[:200]!r}", code=8)

    def queue_command(self, ids: Sequence[str]) -> list[str]:
        return ["qstat", "-x", "-f", "-F", "json", *ids]

    def parse_queue(self, result: CommandResult, ids: Sequence[str]) -> dict[str, NativeStatus]:
        # qstat exits non-zero when any id is unknown, and still reports the others.
        if result.returncode != 0 and not _only_unknown_jobs(result.stderr):
            raise self.unavailable(result, "qstat")
        try:
            return parse_qstat_json(result.stdout, ids)
        except ValueError as exc:
            raise self.unavailable(result, f"qstat (unreadable JSON: {exc})") from exc

    def cancel_command(self, native_id: str) -> list[str]:
        return ["qdel", native_id]

    def hold_command(self, native_id: str) -> list[str] | None:
        return ["qhold", native_id]

    def resume_command(self, native_id: str) -> list[str] | None:
        return ["qrls", native_id]

    def ping_command(self) -> list[str]:
        return ["qstat", "-B"]

    async def find_by_tag(self, tag: str) -> str | None:
        # qselect -x includes finished jobs kept in the server's history.
        result = await self.run(["qselect", "-x", "-u", self.user, "-N", self.job_name(tag)])
        if result.returncode != 0:
            raise self.unavailable(result, "qselect")
        ids = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        ids = [i for i in ids if _sequence(i).isdigit()]
        return max(ids, key=lambda i: int(_sequence(i))) if ids else None
