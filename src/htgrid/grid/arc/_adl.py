"""A job's ADL (the EMI-ES Activity Description Language ARC CE takes) and its file
lists, as HTCondor's ArcJob::buildJobADL, buildStageInList and buildStageOutList make
them: the executable (its base name when it is transferred), arguments, stdin, stdout
and stderr (`_condor_stdout`, `_condor_stderr` at the CE), environment, ArcApplication;
Resources from RequestCpus, RequestMemory, BatchQueue, ArcRte and ArcResources;
DataStaging with the delegation, the input and output files and ArcDataStaging.

A job with NordugridRSL gets xRSL instead (the old nordugrid type's way): the same
parts as xRSL relations, with the user's RSL appended.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from xml.sax.saxutils import escape

from htgrid.classad import ClassAd
from htgrid.grid._errors import GridError
from htgrid.grid._values import as_int, as_str
from htgrid.submit import split_v2_raw

__all__ = ["STDERR", "STDOUT", "BadJobAd", "Staging", "job_description", "staging"]

#: The names stdout and stderr have in the job's session directory (REMOTE_STDOUT_NAME).
STDOUT = "_condor_stdout"
STDERR = "_condor_stderr"
_NULL_FILES = ("", "/dev/null")


class BadJobAd(GridError, ValueError):
    """A job ad the ARC CE's job description cannot be made from."""


@dataclass(frozen=True, slots=True)
class Staging:
    """The files a job moves: local paths in, (session name, local path) pairs out."""

    inputs: tuple[str, ...]
    outputs: tuple[tuple[str, str], ...]


def _is_url(name: str) -> bool:
    scheme, sep, _ = name.partition("://")
    return bool(sep) and scheme.isalnum()


def _iwd(ad: ClassAd) -> str:
    iwd = as_str(ad.get("Iwd"))
    if not iwd:
        raise BadJobAd("Iwd not defined")
    return iwd


def _local(iwd: str, name: str) -> str:
    return name if os.path.isabs(name) or _is_url(name) else os.path.join(iwd, name)


def _words(text: str | None) -> list[str]:
    return [w.strip() for w in (text or "").replace(",", " ").split() if w.strip()]


def _flag(ad: ClassAd, name: str) -> bool:
    return ad.get(name, True) is not False


def _inputs(ad: ClassAd, *, with_urls: bool) -> list[str]:
    iwd = _iwd(ad)
    files = _words(as_str(ad.get("TransferInput")))
    cmd = as_str(ad.get("Cmd")) or ""
    if _flag(ad, "TransferExecutable") and cmd and cmd not in files:
        files.append(cmd)
    stdin = as_str(ad.get("In")) or ""
    if _flag(ad, "TransferIn") and stdin not in _NULL_FILES and stdin not in files:
        files.append(stdin)
    if not with_urls:
        files = [f for f in files if not _is_url(f)]
    return [_local(iwd, f) for f in files]


def staging(ad: ClassAd) -> Staging:
    """The files to put into the session directory and to fetch from it."""
    iwd = _iwd(ad)
    outputs: list[tuple[str, str]] = []
    remaps = _remaps(as_str(ad.get("TransferOutputRemaps")))
    for name in _words(as_str(ad.get("TransferOutput"))):
        base = os.path.basename(name)
        outputs.append((name, _local(iwd, remaps.get(name, base))))
    for attr, flag, remote in (("Out", "TransferOut", STDOUT), ("Err", "TransferErr", STDERR)):
        local = as_str(ad.get(attr)) or ""
        if _flag(ad, flag) and local not in _NULL_FILES:
            outputs.append((remote, _local(iwd, local)))
    outputs = [(r, loc) for r, loc in outputs if not _is_url(loc)]
    return Staging(tuple(_inputs(ad, with_urls=False)), tuple(outputs))


def _remaps(text: str | None) -> dict[str, str]:
    remaps: dict[str, str] = {}
    for entry in (text or "").split(";"):
        name, sep, dest = entry.partition("=")
        if sep and name.strip() and dest.strip():
            remaps[name.strip()] = dest.strip()
    return remaps


def _arguments(ad: ClassAd) -> list[str]:
    v2 = as_str(ad.get("Arguments"))
    if v2 is not None:
        return split_v2_raw(v2)
    return (as_str(ad.get("Args")) or "").split()


def _environment(ad: ClassAd) -> list[tuple[str, str]]:
    v2 = as_str(ad.get("Environment"))
    if v2 is not None:
        entries = split_v2_raw(v2)
    else:
        entries = (as_str(ad.get("Env")) or "").split(";")
    env = []
    for entry in entries:
        name, sep, value = entry.strip().partition("=")
        if sep and name:
            env.append((name, value))
    return env


def _stdio(ad: ClassAd) -> tuple[str | None, bool, bool]:
    """The job's stdin (its base name at the CE), and whether it has stdout and stderr."""
    stdin = as_str(ad.get("In")) or ""
    name = None if stdin in _NULL_FILES else os.path.basename(stdin)
    has_out = (as_str(ad.get("Out")) or "") not in _NULL_FILES
    return name, has_out, (as_str(ad.get("Err")) or "") not in _NULL_FILES


def _x(text: str) -> str:
    return escape(text, {'"': "&quot;"})


def job_description(ad: ClassAd, delegation_id: str | None, name: str) -> str:
    """The job's description for ARC_JOB_NEW: ADL, or xRSL for a job with NordugridRSL.
    BadJobAd if the ad lacks what it needs (HTCondor holds such a job)."""
    try:
        args = _arguments(ad)
        env = _environment(ad)
    except ValueError as err:
        raise BadJobAd(f"Failed to read job arguments or environment: {err}") from None
    if as_str(ad.get("NordugridRSL")) is not None:
        return _xrsl(ad, delegation_id, name, args, env)
    cmd = as_str(ad.get("Cmd"))
    if not cmd:
        raise BadJobAd("Cmd not defined")
    transfer_exec = _flag(ad, "TransferExecutable")
    app = [f"<Executable><Path>{_x(os.path.basename(cmd) if transfer_exec else cmd)}</Path>"]
    app += [f"<Argument>{_x(a)}</Argument>" for a in args]
    app.append("</Executable>")
    stdin, has_out, has_err = _stdio(ad)
    if stdin is not None:
        app.append(f"<Input>{_x(stdin)}</Input>")
    if has_out:
        app.append(f"<Output>{STDOUT}</Output>")
    if has_err:
        app.append(f"<Error>{STDERR}</Error>")
    app += [
        f"<Environment><Name>{_x(k)}</Name><Value>{_x(v)}</Value></Environment>" for k, v in env
    ]
    app.append(as_str(ad.get("ArcApplication")) or "")
    resources = as_str(ad.get("ArcResources")) or ""
    cpus = as_int(ad.get("RequestCpus")) or 1
    if cpus > 1:
        slots = f"<NumberOfSlots>{cpus}</NumberOfSlots><SlotsPerHost>{cpus}</SlotsPerHost>"
        at = resources.find("</SlotRequirement>")
        if at < 0:
            resources += f"<SlotRequirement>{slots}</SlotRequirement>"
        else:
            resources = resources[:at] + slots + resources[at:]
    memory = as_int(ad.get("RequestMemory"))
    if memory is not None and "<IndividualPhysicalMemory>" not in resources:
        resources += f"<IndividualPhysicalMemory>{memory * 1024 * 1024}</IndividualPhysicalMemory>"
    queue = as_str(ad.get("BatchQueue"))
    if queue:
        resources += f"<QueueName>{_x(queue)}</QueueName>"
    for rte in (as_str(ad.get("ArcRte")) or "").split(","):
        words = rte.split()
        if words:
            options = "".join(f"<Option>{_x(o)}</Option>" for o in words[1:])
            resources += (
                f"<RuntimeEnvironment><Name>{_x(words[0])}</Name>{options}</RuntimeEnvironment>"
            )
    staging_parts = []
    if delegation_id:
        staging_parts.append(f"<ng-adl:DelegationID>{_x(delegation_id)}</ng-adl:DelegationID>")
    cmd_path = _local(_iwd(ad), cmd)
    for path in _inputs(ad, with_urls=True):
        executable = (
            "<IsExecutable>true</IsExecutable>" if transfer_exec and path == cmd_path else ""
        )
        staging_parts.append(
            f"<InputFile><Name>{_x(os.path.basename(path))}</Name>{executable}</InputFile>"
        )
    for remote, _ in staging(ad).outputs:
        staging_parts.append(
            f"<OutputFile><Name>{_x(os.path.basename(remote))}</Name></OutputFile>"
        )
    staging_parts.append(as_str(ad.get("ArcDataStaging")) or "")
    return (
        '<?xml version="1.0"?>'
        '<ActivityDescription xmlns="http://www.eu-emi.eu/es/2010/12/adl" '
        'xmlns:ng-adl="http://www.nordugrid.org/es/2011/12/nordugrid-adl">'
        f"<ActivityIdentification><Name>{_x(name)}</Name></ActivityIdentification>"
        f"<Application>{''.join(app)}</Application>"
        f"<Resources>{resources}</Resources>"
        f"<DataStaging>{''.join(staging_parts)}</DataStaging>"
        "</ActivityDescription>"
    )


def _rsl_value(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _xrsl(
    ad: ClassAd,
    delegation_id: str | None,
    name: str,
    args: list[str],
    env: list[tuple[str, str]],
) -> str:
    cmd = as_str(ad.get("Cmd"))
    if not cmd:
        raise BadJobAd("Cmd not defined")
    transfer_exec = _flag(ad, "TransferExecutable")
    parts = [f"(executable={_rsl_value(os.path.basename(cmd) if transfer_exec else cmd)})"]
    if args:
        parts.append("(arguments=" + " ".join(_rsl_value(a) for a in args) + ")")
    parts.append(f"(jobname={_rsl_value(name)})")
    stdin, has_out, has_err = _stdio(ad)
    if stdin is not None:
        parts.append(f"(stdin={_rsl_value(stdin)})")
    if has_out:
        parts.append(f"(stdout={_rsl_value(STDOUT)})")
    if has_err:
        parts.append(f"(stderr={_rsl_value(STDERR)})")
    if env:
        parts.append(
            "(environment=" + "".join(f"({_rsl_value(k)} {_rsl_value(v)})" for k, v in env) + ")"
        )
    inputs = _inputs(ad, with_urls=True)
    if inputs:
        parts.append(
            "(inputfiles="
            + "".join(
                f"({_rsl_value(os.path.basename(p))} {_rsl_value(p if _is_url(p) else '')})"
                for p in inputs
            )
            + ")"
        )
    outputs = staging(ad).outputs
    if outputs:
        parts.append(
            "(outputfiles="
            + "".join(f'({_rsl_value(os.path.basename(r))} "")' for r, _ in outputs)
            + ")"
        )
    if transfer_exec:
        parts.append(f"(executables={_rsl_value(os.path.basename(cmd))})")
    queue = as_str(ad.get("BatchQueue"))
    if queue:
        parts.append(f"(queue={_rsl_value(queue)})")
    if delegation_id:
        parts.append(f"(delegationid={_rsl_value(delegation_id)})")
    user = (as_str(ad.get("NordugridRSL")) or "").strip()
    return "&" + "".join(parts) + user
