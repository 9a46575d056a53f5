"""(Son of) Grid Engine: qsub, qstat -xml, qacct, qdel, qhold, qrls.

The queue is one `qstat -xml -u <user>` (qstat takes no list of job ids); finished jobs
are looked up with one `qacct -o <user> -d <days> -j`, which lists every job of the user
that ended in that window. qacct records a job within accounting_flush_time of its end.

States (qstat(1), sge_status(5)): a state with E (error) or h (hold) -> HELD, d (being
deleted) -> REMOVED, s/S/T (suspended) -> SUSPENDED, r/t -> RUNNING, qw -> IDLE.
In qacct, `failed 37` with h_rt exceeded is a walltime kill, `failed 100` with a signal
is a qdel of a running job; a job deleted while pending leaves no record at all.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
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

__all__ = ["SGEBackend", "parse_qacct", "parse_qstat_xml", "sge_state"]

# Characters qsub -N refuses (qsub(1)), besides a leading digit.
_FORBIDDEN = "/:@\\*?"
# Seconds a job may run past h_rt and still count as killed for it (execd polls).
_WALLTIME_SLACK = 10


def sge_state(code: str) -> tuple[JobState, str | None]:
    """JobState and reason for a qstat state code such as "qw", "hqw", "r", "Eqw"."""
    if "E" in code:
        return JobState.HELD, "error state"
    if "h" in code:
        return JobState.HELD, None
    if "d" in code:
        return JobState.REMOVED, None
    if any(c in code for c in "sST"):
        return JobState.SUSPENDED, None
    if "r" in code or "t" in code:
        return JobState.RUNNING, None
    if "q" in code or "w" in code:
        return JobState.IDLE, None
    return JobState.UNKNOWN, f"unknown Grid Engine state {code!r}"


def parse_qstat_xml(text: str) -> dict[str, tuple[str, str]]:
    """`qstat -xml` -> {job number: (state code, job name)}."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"qstat -xml output is not XML: {exc}") from exc
    jobs: dict[str, tuple[str, str]] = {}
    for job in root.iter("job_list"):
        number = (job.findtext("JB_job_number") or "").strip()
        if number:
            jobs[number] = ((job.findtext("state") or "").strip(), job.findtext("JB_name") or "")
    return jobs


def _records(text: str) -> list[dict[str, str]]:
    """qacct -j output -> one {key: value} per accounting record."""
    records: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("====="):
            if current:
                records.append(current)
            current = {}
            continue
        key, _, value = line.partition(" ")
        if key:
            current[key] = value.strip()
    if current:
        records.append(current)
    return records


def _h_rt(category: str) -> int | None:
    """The h_rt request in a qacct category ("-l h_rt=3,h_vmem=1G -pe smp 2")."""
    for word in category.replace(",", " ").split():
        if word.startswith("h_rt="):
            value = word[5:]
            parts = value.split(":")
            if all(p.isdigit() for p in parts) and 1 <= len(parts) <= 3:
                seconds = 0
                for p in parts:
                    seconds = seconds * 60 + int(p)
                return seconds
    return None


def _record_status(rec: dict[str, str]) -> NativeStatus:
    failed_text = rec.get("failed", "0")
    failed = int(failed_text.split()[0]) if failed_text.split()[0].isdigit() else 0
    status_text = rec.get("exit_status", "").split()
    exit_status = int(status_text[0]) if status_text and status_text[0].isdigit() else None
    wall_text = rec.get("ru_wallclock", "").rstrip("s")
    try:
        wallclock: float | None = float(wall_text)
    except ValueError:
        wallclock = None
    signal = exit_status - 128 if exit_status is not None and exit_status > 128 else None
    code = exit_status if signal is None else None
    state, reason = JobState.COMPLETED, None
    if failed == 100 and signal is not None:
        state, reason = JobState.REMOVED, "deleted while running"
    elif failed == 37:
        limit = _h_rt(rec.get("category", ""))
        if limit is not None and wallclock is not None and wallclock + _WALLTIME_SLACK >= limit:
            reason = WALLTIME
        else:
            reason = "resource limit exceeded: " + failed_text.partition(":")[2].strip()
    elif failed:
        reason = f"failed {failed_text}"
    return NativeStatus(
        rec.get("jobnumber", "").strip(),
        state,
        exit_code=code,
        exit_signal=signal,
        reason=reason,
        wallclock_seconds=wallclock,
        source="history",
    )


def parse_qacct(text: str, ids: Sequence[str]) -> dict[str, NativeStatus]:
    """`qacct -j` records -> final states of the jobs asked for (latest record wins)."""
    wanted = set(ids)
    found: dict[str, NativeStatus] = {}
    for rec in _records(text):
        status = _record_status(rec)
        if status.native_id in wanted:
            found[status.native_id] = status
    return found


class SGEBackend(CommandBackend):
    """Grid Engine through its commands.

    Site names: `parallel_environment` for cpus > 1, `memory_resource` (per slot) and
    `gpu_resource` for the -l requests; `history_days` bounds the qacct search.
    """

    name = "sge"
    job_id_var = "JOB_ID"
    transient_errors = (
        "unable to contact qmaster",
        "unable to send message to qmaster",
        "commlib error",
        "failed receiving gdi request",
        "can't unpack gdi request",
    )
    gone_errors = ("does not exist",)

    def __init__(
        self,
        *,
        parallel_environment: str = "smp",
        memory_resource: str = "h_vmem",
        gpu_resource: str = "gpu",
        history_days: int = 7,
        registry: Path | None = None,
        **options: Unpack[CommandOptions],
    ) -> None:
        super().__init__(registry=registry, **options)
        self.parallel_environment = parallel_environment
        self.memory_resource = memory_resource
        self.gpu_resource = gpu_resource
        self.history_days = history_days

    def job_name(self, tag: str) -> str:
        """qsub -N refuses names starting with a digit and a few characters."""
        return job_name(tag, letter_first=True, forbidden=_FORBIDDEN)

    def directives(self, spec: BatchJobSpec) -> list[str]:
        d = [
            f"-N {self.job_name(spec.tag)}",
            "-S /bin/bash",
            f"-wd {spec.job_dir}",
            f"-o {resolve_path(spec, spec.stdout)}",
            f"-e {resolve_path(spec, spec.stderr)}",
        ]
        if spec.queue:
            d.append(f"-q {spec.queue}")
        if spec.project:
            d.append(f"-P {spec.project}")
        if spec.runtime_seconds is not None:
            d.append(f"-l h_rt={spec.runtime_seconds}")
        if spec.memory_mb is not None:
            d.append(f"-l {self.memory_resource}={per_node(spec.memory_mb, spec.cpus)}M")
        if spec.cpus > 1:
            d.append(f"-pe {self.parallel_environment} {spec.cpus}")
        if spec.gpus:
            d.append(f"-l {self.gpu_resource}={spec.gpus}")
        return [f"#$ {x}" for x in d]

    def submit_command(self, spec: BatchJobSpec, script: Path) -> tuple[list[str], str | None]:
        return ["qsub", "-terse", *extra_args(spec), str(script)], None

    def parse_submit(self, result: CommandResult) -> str:
        # -terse prints the job number ("123", or "123.1-10:1" for an array).
        for line in result.stdout.splitlines():
            native_id = line.strip().split(".")[0]
            if native_id.isdigit():
                return native_id
        raise BackendError(f"qsub printed no job id: {result.stdout.strip()[:200]!r}", code=8)

    def queue_command(self, ids: Sequence[str]) -> list[str]:
        return ["qstat", "-xml", "-u", self.user]

    def parse_queue(self, result: CommandResult, ids: Sequence[str]) -> dict[str, NativeStatus]:
        if result.returncode != 0:
            raise self.unavailable(result, "qstat")
        try:
            jobs = parse_qstat_xml(result.stdout)
        except ValueError as exc:
            raise self.unavailable(result, f"qstat ({exc})") from exc
        found: dict[str, NativeStatus] = {}
        for nid in ids:
            if nid in jobs:
                state, reason = sge_state(jobs[nid][0])
                found[nid] = NativeStatus(nid, state, reason=reason, source="queue")
        return found

    def _qacct(self, *, job: str | None = None) -> list[str]:
        argv = ["qacct", "-o", self.user, "-d", str(self.history_days), "-j"]
        return [*argv, job] if job is not None else argv

    def history_command(self, ids: Sequence[str]) -> list[str] | None:
        return self._qacct()

    def parse_history(self, result: CommandResult, ids: Sequence[str]) -> dict[str, NativeStatus]:
        if result.returncode != 0:
            if _no_records(result):
                return {}
            raise self.unavailable(result, "qacct")
        return parse_qacct(result.stdout, ids)

    def cancel_command(self, native_id: str) -> list[str]:
        return ["qdel", native_id]

    def hold_command(self, native_id: str) -> list[str] | None:
        return ["qhold", native_id]

    def resume_command(self, native_id: str) -> list[str] | None:
        return ["qrls", native_id]

    def ping_command(self) -> list[str]:
        return ["qstat", "-u", self.user]

    async def find_by_tag(self, tag: str) -> str | None:
        name = self.job_name(tag)
        result = await self.run(["qstat", "-xml", "-u", self.user])
        if result.returncode != 0:
            raise self.unavailable(result, "qstat")
        try:
            jobs = parse_qstat_xml(result.stdout)
        except ValueError as exc:
            raise self.unavailable(result, f"qstat ({exc})") from exc
        queued = [nid for nid, (_, jname) in jobs.items() if jname == name]
        if queued:
            return max(queued, key=int)
        result = await self.run(self._qacct(job=name))
        if result.returncode != 0:
            if _no_records(result):
                return None
            raise self.unavailable(result, "qacct")
        numbers = [r.get("jobnumber", "").strip() for r in _records(result.stdout)]
        numbers = [n for n in numbers if n.isdigit()]
        return max(numbers, key=int) if numbers else None


def _no_records(result: CommandResult) -> bool:
    """qacct's way of saying "nothing matched" (or "nothing has ever finished")."""
    text = (result.stderr + result.stdout).lower()
    return "not found" in text or "no jobs" in text or "accounting file" in text
