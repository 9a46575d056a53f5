"""IBM Spectrum LSF: bsub, bjobs -a -json -o, bhist -l, bkill, bstop, bresume.

The queue is one `bjobs -a -json -o "<fields>" <ids>` (-a keeps finished jobs for
CLEAN_PERIOD, an hour by default); older jobs are looked up with one `bhist -a -l <ids>`
(the current event log), then the exit-code file.

STAT (bjobs(1)): PEND/WAIT/PROV -> IDLE, PSUSP -> HELD, RUN -> RUNNING, USUSP/SSUSP ->
SUSPENDED, DONE/EXIT -> COMPLETED, or REMOVED when the exit reason is a kill by the
owner or an administrator (TERM_OWNER, TERM_ADMIN...); TERM_RUNLIMIT is the walltime.
"""

from __future__ import annotations

import json
import re
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

__all__ = ["LSFBackend", "lsf_state", "parse_bhist", "parse_bjobs_json"]

_FIELDS = "jobid stat exit_code exit_reason job_name run_time"
_SUBMITTED = re.compile(r"Job <(\d+)> is submitted")
_REMOVED_BY = ("TERM_OWNER", "TERM_ADMIN", "TERM_FORCE_OWNER", "TERM_FORCE_ADMIN")

_STATES: dict[str, tuple[JobState, str | None]] = {
    "PEND": (JobState.IDLE, None),
    "WAIT": (JobState.IDLE, None),
    "PROV": (JobState.IDLE, None),
    "PSUSP": (JobState.HELD, None),
    "RUN": (JobState.RUNNING, None),
    "USUSP": (JobState.SUSPENDED, None),
    "SSUSP": (JobState.SUSPENDED, None),
    "DONE": (JobState.COMPLETED, None),
    "EXIT": (JobState.COMPLETED, None),
    "UNKWN": (JobState.RUNNING, "execution host unreachable"),
    "ZOMBI": (JobState.REMOVED, "zombie: killed while its host was unreachable"),
}


def _ending(reason_text: str) -> tuple[JobState | None, str | None]:
    """What an exit reason such as "TERM_RUNLIMIT: job killed after ..." means."""
    term = reason_text.split(":")[0].strip()
    if term == "TERM_RUNLIMIT":
        return None, WALLTIME
    if term in _REMOVED_BY:
        return JobState.REMOVED, reason_text.strip()
    return None, reason_text.strip() or None


def lsf_state(record: Mapping[str, Any]) -> NativeStatus:
    """A NativeStatus from one bjobs -json record."""
    native_id = str(record.get("JOBID", "")).strip()
    stat = str(record.get("STAT", "")).strip()
    state, reason = _STATES.get(stat, (JobState.UNKNOWN, f"unknown LSF state {stat!r}"))
    run = str(record.get("RUN_TIME", "")).split()
    wallclock = float(run[0]) if run and run[0].isdigit() else None
    code: int | None = None
    if stat in ("DONE", "EXIT"):
        text = str(record.get("EXIT_CODE", "")).strip()
        # DONE means exit 0; LSF leaves the field empty then.
        code = int(text) if text.isdigit() else (0 if stat == "DONE" else None)
        changed, reason = _ending(str(record.get("EXIT_REASON", "")))
        state = changed or state
    return NativeStatus(
        native_id,
        state,
        exit_code=code if state == JobState.COMPLETED else None,
        reason=reason,
        wallclock_seconds=wallclock,
        source="queue",
    )


def parse_bjobs_json(text: str, ids: Sequence[str]) -> dict[str, NativeStatus]:
    """`bjobs -json -o ...` -> states of the jobs asked for (ERROR records skipped)."""
    if not text.strip().startswith("{"):
        return {}
    data = json.loads(text, strict=False)
    wanted = set(ids)
    found: dict[str, NativeStatus] = {}
    for record in data.get("RECORDS", []) if isinstance(data, dict) else []:
        if not isinstance(record, dict) or "ERROR" in record:
            continue
        status = lsf_state(record)
        if status.native_id in wanted:
            found[status.native_id] = status
    return found


def parse_bhist(text: str, ids: Sequence[str]) -> dict[str, NativeStatus]:
    """`bhist -l` -> final states of the jobs asked for that have ended.

    bhist wraps lines at 80 columns, even inside words: each job's block is matched
    with all white space removed.
    """
    wanted = set(ids)
    found: dict[str, NativeStatus] = {}
    for block in re.split(r"^-{20,}\s*$", text, flags=re.MULTILINE):
        flat = re.sub(r"\s+", "", block)
        match = re.search(r"Job<(\d+)", flat)
        if match is None or match.group(1) not in wanted:
            continue
        nid = match.group(1)
        code: int | None = None
        signal: int | None = None
        if m := re.search(r"exitcode(\d+)", flat):
            code = int(m.group(1))
        elif m := re.search(r"Exitedbysignal(\d+)", flat):
            signal = int(m.group(1))
        elif "Donesuccessfully" in flat:
            code = 0
        else:
            continue  # still pending or running, as far as this log goes
        state, reason = JobState.COMPLETED, None
        if "TERM_RUNLIMIT" in flat:
            reason = WALLTIME
        elif term := next((t for t in _REMOVED_BY if t in flat), None):
            state, reason = JobState.REMOVED, term
        found[nid] = NativeStatus(
            nid,
            state,
            exit_code=code if state == JobState.COMPLETED else None,
            exit_signal=signal if state == JobState.COMPLETED else None,
            reason=reason,
            source="history",
        )
    return found


def _not_found_only(result: CommandResult) -> bool:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return all("not found" in line or "No job found" in line for line in lines)


class LSFBackend(CommandBackend):
    """IBM Spectrum LSF through its commands (bjobs -json needs LSF 10.1.0.2 or later)."""

    name = "lsf"
    job_id_var = "LSB_JOBID"
    transient_errors = (
        "LSF is down",
        "Cannot connect to LSF",
        "not responding",
        "Please wait",
        "Failed in an LSF library call",
    )
    gone_errors = ("has already finished", "is not found", "No matching job found")

    def directives(self, spec: BatchJobSpec) -> list[str]:
        d = [
            f"-J {job_name(spec.tag)}",
            f"-cwd {spec.job_dir}",
            # -oo/-eo overwrite, as HTCondor does with a job's output.
            f"-oo {resolve_path(spec, spec.stdout)}",
            f"-eo {resolve_path(spec, spec.stderr)}",
        ]
        if spec.queue:
            d.append(f"-q {spec.queue}")
        if spec.project:
            d.append(f"-P {spec.project}")
        if spec.runtime_seconds is not None:
            minutes = per_node(spec.runtime_seconds, 60)
            d.append(f"-W {minutes // 60}:{minutes % 60:02d}")
        if spec.memory_mb is not None:
            d.append(f"-M {spec.memory_mb}MB")
        if spec.cpus > 1 or spec.nodes > 1:
            d.append(f"-n {max(spec.cpus, spec.nodes)}")
            span = "hosts=1" if spec.nodes == 1 else f"ptile={per_node(spec.cpus, spec.nodes)}"
            d.append(f'-R "span[{span}]"')
        if spec.gpus:
            d.append(f'-gpu "num={per_node(spec.gpus, spec.nodes)}"')
        return [f"#BSUB {x}" for x in d]

    def submit_command(self, spec: BatchJobSpec, script: Path) -> tuple[list[str], str | None]:
        # bsub reads #BSUB directives only from a script on its standard input.
        return ["bsub", *extra_args(spec)], script.read_text(encoding="utf-8")

    def parse_submit(self, result: CommandResult) -> str:
        match = _SUBMITTED.search(result.stdout)
        if match is None:
            raise BackendError(f"bsub printed no job id: {result.stdout.strip()[:200]!r}", code=8)
        return match.group(1)

    def queue_command(self, ids: Sequence[str]) -> list[str]:
        return ["bjobs", "-a", "-json", "-o", _FIELDS, *ids]

    def parse_queue(self, result: CommandResult, ids: Sequence[str]) -> dict[str, NativeStatus]:
        # bjobs may exit 255 when an id is not found (LSB_BJOBS_CONSISTENT_EXIT_CODE).
        if result.returncode != 0 and not _not_found_only(result):
            raise self.unavailable(result, "bjobs")
        try:
            return parse_bjobs_json(result.stdout, ids)
        except ValueError as exc:
            raise self.unavailable(result, f"bjobs (unreadable JSON: {exc})") from exc

    def history_command(self, ids: Sequence[str]) -> list[str] | None:
        return ["bhist", "-a", "-l", *ids]

    def parse_history(self, result: CommandResult, ids: Sequence[str]) -> dict[str, NativeStatus]:
        if result.returncode != 0 and not _not_found_only(result):
            raise self.unavailable(result, "bhist")
        return parse_bhist(result.stdout, ids)

    def cancel_command(self, native_id: str) -> list[str]:
        return ["bkill", native_id]

    def hold_command(self, native_id: str) -> list[str] | None:
        return ["bstop", native_id]

    def resume_command(self, native_id: str) -> list[str] | None:
        return ["bresume", native_id]

    def ping_command(self) -> list[str]:
        return ["bqueues"]

    async def find_by_tag(self, tag: str) -> str | None:
        argv = ["bjobs", "-a", "-json", "-o", "jobid", "-J", job_name(tag)]
        result = await self.run(argv)
        if result.returncode != 0 and not _not_found_only(result):
            raise self.unavailable(result, "bjobs")
        try:
            data = json.loads(result.stdout, strict=False) if result.stdout.strip() else {}
        except ValueError as exc:
            raise self.unavailable(result, f"bjobs (unreadable JSON: {exc})") from exc
        records = data.get("RECORDS", []) if isinstance(data, dict) else []
        ids = [
            str(r.get("JOBID", "")).strip()
            for r in records
            if isinstance(r, dict) and "ERROR" not in r
        ]
        ids = [i for i in ids if i.isdigit()]
        return max(ids, key=int) if ids else None
