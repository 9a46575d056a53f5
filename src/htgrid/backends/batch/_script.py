"""The job script every command back end submits, and the exit-code file it leaves.

The script is the LRM's directives followed by one wrapper, the same for every LRM: it
enters `spec.job_dir`, sets the job's environment, runs the executable with its
arguments, and writes how the executable ended to `.htgrid-<native id>.exit` in the job
directory (written to a temporary name, then renamed, so a reader never sees half a
file). Batch systems forget finished jobs; this file is what is left when they have.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from htgrid.backends.batch._base import BackendError, BatchJobSpec

__all__ = [
    "ExitRecord",
    "check_spec",
    "exit_file",
    "extra_args",
    "job_name",
    "per_node",
    "read_exit_file",
    "render_job_script",
    "resolve_path",
    "script_path",
]

# Tags are client job ids (e.g. "1234.0" or "schedd#1234.0#1700000000").
_TAG = re.compile(r"[A-Za-z0-9_.+#:@-]{1,200}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A job that ran out of walltime ends within this many seconds past its limit as seen
# by the wrapper, which starts a little after the batch system counts.
_WALLTIME_SLACK = 10


@dataclass(frozen=True, slots=True)
class ExitRecord:
    """What the wrapper wrote when the executable ended."""

    job_id: str
    exit_code: int | None
    signal: int | None
    start: int | None
    end: int | None
    runtime_limit: int | None

    @property
    def elapsed(self) -> int | None:
        """Seconds the executable ran, as the wrapper saw it."""
        if self.start is None or self.end is None:
            return None
        return max(0, self.end - self.start)

    @property
    def walltime_exceeded(self) -> bool:
        """Killed by a signal at (or past) its runtime limit: the batch system's doing."""
        elapsed = self.elapsed
        return (
            self.signal is not None
            and self.runtime_limit is not None
            and elapsed is not None
            and elapsed + _WALLTIME_SLACK >= self.runtime_limit
        )


def check_spec(spec: BatchJobSpec) -> None:
    """Refuse a spec no batch system could run as asked (a permanent error)."""
    if not _TAG.fullmatch(spec.tag):
        raise BackendError(f"job tag {spec.tag!r} has characters a batch job name cannot hold")
    if not spec.job_dir.is_absolute():
        raise BackendError(f"job directory {spec.job_dir} is not an absolute path")
    if not spec.job_dir.is_dir():
        raise BackendError(f"job directory {spec.job_dir} does not exist")
    if not spec.executable:
        raise BackendError("no executable")
    for name in spec.environment:
        if not _ENV_NAME.fullmatch(name):
            raise BackendError(f"environment variable name {name!r} is not valid")
    if spec.cpus < 1 or spec.nodes < 1 or spec.gpus < 0:
        raise BackendError("cpus and nodes must be at least 1, gpus at least 0")
    if spec.runtime_seconds is not None and spec.runtime_seconds < 1:
        raise BackendError("runtime must be at least one second")
    if spec.memory_mb is not None and spec.memory_mb < 1:
        raise BackendError("memory must be at least 1 MB")
    for label, path in (("job directory", str(spec.job_dir)), *_io_paths(spec)):
        # Directive lines are split on white space by every LRM.
        if any(c.isspace() for c in path) or '"' in path or "'" in path:
            raise BackendError(f"{label} {path!r} has white space or quotes: not supported")


def _io_paths(spec: BatchJobSpec) -> list[tuple[str, str]]:
    return [(k, v) for k, v in (("stdout", spec.stdout), ("stderr", spec.stderr)) if v]


def extra_args(spec: BatchJobSpec) -> list[str]:
    """The spec's extra submit arguments, split as a shell would (nothing expanded)."""
    if not spec.extra_args:
        return []
    try:
        return shlex.split(spec.extra_args)
    except ValueError as exc:
        raise BackendError(f"extra submit arguments {spec.extra_args!r}: {exc}") from exc


def job_name(tag: str, *, letter_first: bool = False, forbidden: str = "") -> str:
    """The batch job name for `tag`: the same every time, so find_by_tag can look it up.

    Grid Engine and PBS want names that start with a letter: those get a "j" in front
    of every tag (always, so that two tags never share a name).
    """
    name = "".join("_" if c in forbidden else c for c in tag)
    return "j" + name if letter_first else name


def resolve_path(spec: BatchJobSpec, path: str | None) -> str:
    """An output path for a directive: absolute, relative ones taken in the job dir."""
    if not path:
        return "/dev/null"
    return path if os.path.isabs(path) else str(spec.job_dir / path)


def per_node(total: int, nodes: int) -> int:
    """`total` spread over `nodes`, rounded up."""
    return math.ceil(total / max(1, nodes))


def script_path(spec: BatchJobSpec, lrm: str) -> Path:
    """Where the job script is written."""
    return spec.job_dir / f".htgrid-job.{lrm}.sh"


def exit_file(job_dir: Path, native_id: str) -> Path:
    """Where the wrapper records how job `native_id` ended."""
    return job_dir / f".htgrid-{native_id.replace('/', '_')}.exit"


def read_exit_file(path: Path, native_id: str) -> ExitRecord | None:
    """The record at `path`, or None if there is none (or it is not this job's)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    # A reused job directory may hold another submission's file: check whose it is.
    if fields.get("job_id") != native_id:
        return None
    code, sig = _int(fields.get("exit_code")), _int(fields.get("signal"))
    if code is None and sig is None:
        return None
    return ExitRecord(
        job_id=native_id,
        exit_code=code,
        signal=sig,
        start=_int(fields.get("start")),
        end=_int(fields.get("end")),
        runtime_limit=_int(fields.get("runtime_limit")),
    )


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def render_job_script(
    spec: BatchJobSpec,
    *,
    directives: Sequence[str],
    job_id_var: str,
    registry: Path,
) -> str:
    """The whole job script: shebang, directives, then the wrapper.

    `job_id_var` is the variable in which the LRM tells the job its id; `registry` is
    the back end's directory of `<native id> -> job_dir` links (see CommandBackend).
    """
    q = shlex.quote
    job_dir = str(spec.job_dir)
    exports = "".join(f"export {k}={q(v)}\n" for k, v in spec.environment.items())
    args = "".join(" " + q(a) for a in spec.arguments)
    stdin = q(spec.stdin) if spec.stdin else "/dev/null"
    limit = spec.runtime_seconds if spec.runtime_seconds is not None else ""
    head = "#!/bin/bash\n" + "".join(d + "\n" for d in directives)
    return (
        head
        + f"""\
# htgrid job wrapper: run the job in its directory and record how it ended.
htgrid_id=${{{job_id_var}:-unknown}}
htgrid_id=${{htgrid_id//\\//_}}
htgrid_dir={q(job_dir)}
htgrid_exit="$htgrid_dir/.htgrid-$htgrid_id.exit"
htgrid_start=$(date +%s)
htgrid_record() {{
    printf 'job_id=%s\\nexit_code=%s\\nsignal=%s\\nstart=%s\\nend=%s\\nruntime_limit=%s\\n' \\
        "$htgrid_id" "$1" "$2" "$htgrid_start" "$(date +%s)" {q(str(limit))} \\
        >"$htgrid_exit.tmp.$$" && mv -f "$htgrid_exit.tmp.$$" "$htgrid_exit"
}}
# Lets the back end find this job's directory from its id alone (best effort: the
# registry may not be visible from the worker node).
mkdir -p {q(str(registry))} 2>/dev/null && ln -sfn "$htgrid_dir" {q(str(registry))}/"$htgrid_id" 2>/dev/null
cd "$htgrid_dir" || {{ echo "htgrid: cannot enter $htgrid_dir" >&2; htgrid_record 1 ''; exit 1; }}
{exports}htgrid_exe={q(spec.executable)}
case $htgrid_exe in */*) ;; *) [ -e "./$htgrid_exe" ] && htgrid_exe=./$htgrid_exe ;; esac
[ -f "$htgrid_exe" ] && [ ! -x "$htgrid_exe" ] && chmod u+x "$htgrid_exe" 2>/dev/null
# Cancel and walltime signal the whole job; a handler (not '', which children would
# inherit as "ignore") keeps the wrapper alive to record how the executable ended.
trap : TERM INT HUP USR1 USR2 XCPU
"$htgrid_exe"{args} <{stdin}
htgrid_rc=$?
if [ "$htgrid_rc" -gt 128 ] && [ "$htgrid_rc" -lt 193 ]; then
    htgrid_record '' "$((htgrid_rc - 128))"
else
    htgrid_record "$htgrid_rc" ''
fi
exit "$htgrid_rc"
"""
    )
