"""A job ad as GRAM RSL (globusjob.cpp's buildSubmitRSL, for GRAM5 job managers).

Files move through the GAHP's GASS server (`<gass-url>/<absolute local path>`): the
executable (unless transfer_executable = false), stdin and transfer_input_files are
staged into the job's scratch directory; stdout and stderr go to the job manager's cache
and are staged out at the end (GRAM5's way, HTCondor's for gt5) or, for a GRAM2 job
manager, streamed to the GASS server as the job writes them; transfer_output_files are
staged out. `(two_phase=...)` makes the request wait for the grid manager's commit (the
job contact is saved first) and keeps the finished job until COMMIT_END; the job's own
`globus_rsl` (GlobusRSL) is appended as written.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from htgrid.classad import ClassAd
from htgrid.grid._errors import GridError
from htgrid.grid._values import as_str
from htgrid.submit import split_v2_raw

__all__ = ["TWO_PHASE", "RslError", "job_rsl", "rsl_string", "stdio_update"]


class RslError(GridError, ValueError):
    """A job ad no RSL can be made from."""


#: Seconds the job manager waits for the commit (and, once the job ended, for COMMIT_END).
TWO_PHASE = 600
_NULL_FILES = ("", "/dev/null", "NUL")


def rsl_string(text: str) -> str:
    """A quoted RSL string literal (a double quote doubled)."""
    return '"' + text.replace('"', '""') + '"'


def _arguments(ad: ClassAd) -> list[str]:
    v2 = as_str(ad.get("Arguments"))
    if v2 is not None:
        return split_v2_raw(v2)
    return (as_str(ad.get("Args")) or "").split()


def _files(ad: ClassAd, attr: str) -> list[str]:
    text = as_str(ad.get(attr)) or ""
    return [w.strip() for w in text.replace(",", " ").split() if w.strip() and "://" not in w]


def _remaps(ad: ClassAd) -> dict[str, str]:
    remaps: dict[str, str] = {}
    for entry in (as_str(ad.get("TransferOutputRemaps")) or "").split(";"):
        name, sep, dest = entry.partition("=")
        if sep and name.strip() and dest.strip():
            remaps[name.strip()] = dest.strip()
    return remaps


def _environment(ad: ClassAd) -> list[tuple[str, str]]:
    v2 = as_str(ad.get("Environment"))
    entries = split_v2_raw(v2) if v2 is not None else (as_str(ad.get("Env")) or "").split(";")
    pairs = []
    for entry in entries:
        name, sep, value = entry.strip().partition("=")
        if sep and name:
            pairs.append((name, value))
    return pairs


def _output_parts(ad: ClassAd, url: Callable[[str], str], *, gram5: bool) -> list[str]:
    """stdout, stderr and file_stage_out: where the output goes (`url` of a local path)."""
    parts: list[str] = []
    stage_out: list[tuple[str, str]] = []
    for attr, name, cached in (
        ("Out", "stdout", "$(GLOBUS_CACHED_STDOUT)"),
        ("Err", "stderr", "$(GLOBUS_CACHED_STDERR)"),
    ):
        local = as_str(ad.get(attr)) or ""
        if local in _NULL_FILES:
            continue
        if gram5:
            parts.append(f"({name}={cached})")
            stage_out.append((cached, url(local)))
        else:
            parts.append(f"({name}={url(local)})")
    remaps = _remaps(ad)
    stage_out += [
        (rsl_string(name), url(remaps.get(name, os.path.basename(name))))
        for name in _files(ad, "TransferOutput")
    ]
    if stage_out:
        parts.append("(file_stage_out=" + "".join(f"({r} {u})" for r, u in stage_out) + ")")
    return parts


def _url_maker(ad: ClassAd, gass_url: str) -> Callable[[str], str]:
    iwd = as_str(ad.get("Iwd"))
    if not iwd:
        raise RslError("Iwd not defined")
    gass = gass_url.rstrip("/")

    def url(path: str) -> str:
        return rsl_string(gass + (path if os.path.isabs(path) else os.path.join(iwd, path)))

    return url


def stdio_update(ad: ClassAd, gass_url: str, *, gram5: bool) -> str:
    """The RSL of a STDIO_UPDATE signal: the job's output sent to a new GASS server (the
    GAHP's, after it was restarted)."""
    return "&" + "".join(_output_parts(ad, _url_maker(ad, gass_url), gram5=gram5))


def job_rsl(ad: ClassAd, gass_url: str, *, gram5: bool) -> str:
    """The job's RSL, its files through the GASS server at `gass_url`; RslError if the ad
    cannot make one."""
    cmd = as_str(ad.get("Cmd"))
    if not cmd:
        raise RslError("Cmd not defined")
    url = _url_maker(ad, gass_url)
    parts = ["&"]
    transfer_exe = ad.get("TransferExecutable", True) is not False
    parts.append(f"(executable={url(cmd) if transfer_exe else rsl_string(cmd)})")
    args = _arguments(ad)
    if args:
        parts.append("(arguments=" + " ".join(rsl_string(a) for a in args) + ")")
    env = _environment(ad)
    if env:
        parts.append("(environment=" + "".join(f"({n} {rsl_string(v)})" for n, v in env) + ")")
    # The job runs in a scratch directory of its own, removed with the job.
    parts.append("(scratch_dir=$(HOME))(directory=$(SCRATCH_DIRECTORY))")
    stdin = as_str(ad.get("In")) or ""
    if stdin not in _NULL_FILES:
        parts.append(f"(stdin={url(stdin)})")
    inputs = _files(ad, "TransferInput")
    parts.extend(_output_parts(ad, url, gram5=gram5))
    if inputs:
        parts.append(
            "(file_stage_in="
            + "".join(f"({url(f)} {rsl_string(os.path.basename(f))})" for f in inputs)
            + ")"
        )
    parts.append(f"(save_state=yes)(two_phase={TWO_PHASE})")
    extra = as_str(ad.get("GlobusRSL"))
    if extra:
        parts.append(extra.strip())
    return "".join(parts)
