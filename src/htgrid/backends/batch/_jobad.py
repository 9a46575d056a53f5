"""The BLAH_JOB_SUBMIT ClassAd, read the way the blahp reads it (`cmd_submit_job`).

The grid manager's `INFNBatchJob::buildSubmitAd` evaluates every attribute to a literal
before sending, so plain lookups suffice. Attribute names are case-insensitive (ClassAd
rules). What the blahp requires: `gridtype` and `Cmd`; the rest is optional. `Arguments`
(V2 syntax) wins over `Args` (V1) and `Environment` (V2) over `Env` (V1), as in the blahp.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import htgrid.classad as classad
from htgrid.backends.batch._base import BatchError
from htgrid.errors import ClassAdSyntaxError

__all__ = ["InvalidSubmitAd", "SubmitRequest", "client_tag", "parse_submit_ad", "split_v2"]

# What batch job names and directory names may hold (a tag becomes both).
_TAG_CHARS = re.compile(r"[^A-Za-z0-9_.+#:@-]")
_LIST_SEP = re.compile(r"[,\s]+")
_WS = " \t\r\n"


class InvalidSubmitAd(BatchError):
    """The submit ad cannot be run as given; `code` is the blahp result code to report."""

    def __init__(self, message: str, *, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """What a BLAH_JOB_SUBMIT asks for, with paths still as the ad wrote them."""

    lrms: str
    cmd: str
    iwd: str
    tag: str
    #: The name of the job's working area under the GAHP scratch dir.
    job_dir_name: str
    #: Whether the tag came from the client (so a repeated submit can be recognised).
    tag_from_client: bool
    arguments: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    stdin: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    transfer_input: tuple[str, ...] = ()
    transfer_output: tuple[str, ...] = ()
    remaps: Mapping[str, str] = field(default_factory=dict)
    stage_cmd: bool = True
    proxy: str | None = None
    queue: str | None = None
    project: str | None = None
    runtime_seconds: int | None = None
    memory_mb: int | None = None
    cpus: int = 1
    nodes: int = 1
    gpus: int = 0
    extra_args: str | None = None


def parse_submit_ad(text: str, *, default_iwd: str, new_tag: str) -> SubmitRequest:
    """The request in the ad `text`; `new_tag` names a job whose ad names none."""
    try:
        ad = classad.ClassAd(text)
    except (ClassAdSyntaxError, ValueError, TypeError) as err:
        raise InvalidSubmitAd("Error parsing classad", code=1) from err
    lrms = _string(ad, "gridtype")
    if not lrms:
        raise InvalidSubmitAd("Missing gridtype in submission classAd", code=1)
    cmd = _string(ad, "Cmd")
    if not cmd:
        raise InvalidSubmitAd("Cannot parse Cmd attribute in classad", code=7)
    iwd = os.path.join(default_iwd, _string(ad, "Iwd") or "")
    given = _string(ad, "ClientJobId") or _string(ad, "JobDirectory")
    tag = client_tag(given) if given else new_tag
    nodes = _int(ad, "HostNumber") or 1
    granularity = _int(ad, "SMPGranularity")
    cpus = _int(ad, "NodeNumber") or (granularity * nodes if granularity else 1)
    return SubmitRequest(
        lrms=lrms.lower(),
        cmd=cmd,
        iwd=os.path.normpath(iwd),
        tag=tag,
        job_dir_name=tag,
        tag_from_client=given is not None,
        arguments=_arguments(ad),
        environment=_environment(ad),
        stdin=_path(ad, "In"),
        stdout=_path(ad, "Out"),
        stderr=_path(ad, "Err"),
        transfer_input=_list(ad, "TransferInput"),
        transfer_output=_list(ad, "TransferOutput"),
        remaps=_remaps(_string(ad, "TransferOutputRemaps")),
        stage_cmd=_bool(ad, "StageCmd", default=True),
        proxy=_string(ad, "x509UserProxy"),
        queue=_string(ad, "Queue"),
        project=_string(ad, "BatchProject"),
        runtime_seconds=_int(ad, "BatchRuntime"),
        memory_mb=_int(ad, "RequestMemory"),
        cpus=max(1, cpus),
        nodes=max(1, nodes),
        gpus=max(0, _int(ad, "GPUNumber") or 0),
        extra_args=_string(ad, "BatchExtraSubmitArgs"),
    )


# ---- attribute lookups ----------------------------------------------------------------------


def _value(ad: classad.ClassAd, name: str) -> object:
    if name not in ad:
        return None
    try:
        value = ad.eval(name)
    except (KeyError, TypeError, ValueError):
        return None
    return None if isinstance(value, classad.Value) else value


def _string(ad: classad.ClassAd, name: str) -> str | None:
    value = _value(ad, name)
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _int(ad: classad.ClassAd, name: str) -> int | None:
    value = _value(ad, name)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _bool(ad: classad.ClassAd, name: str, *, default: bool) -> bool:
    value = _value(ad, name)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
        return value.lower() in ("true", "yes")
    return default


def _path(ad: classad.ClassAd, name: str) -> str | None:
    value = _string(ad, name)
    if not value or value == "/dev/null":
        return None
    return value


def _list(ad: classad.ClassAd, name: str) -> tuple[str, ...]:
    value = _string(ad, name) or ""
    return tuple(item for item in _LIST_SEP.split(value) if item)


def _remaps(text: str | None) -> dict[str, str]:
    """`name = dest; name2 = dest2` (transfer_output_remaps)."""
    remaps: dict[str, str] = {}
    for entry in (text or "").split(";"):
        name, sep, dest = entry.partition("=")
        if sep and name.strip() and dest.strip():
            remaps[name.strip()] = dest.strip()
    return remaps


def client_tag(text: str) -> str:
    """The tag (batch job name, directory name) for a client's job id."""
    tag = _TAG_CHARS.sub("_", text)[:200]
    # "." and ".." cannot name a directory of their own.
    return tag if tag.strip(".") else f"job{tag}"


def _arguments(ad: classad.ClassAd) -> tuple[str, ...]:
    v2 = _string(ad, "Arguments")
    if v2 is not None:
        return tuple(split_v2(v2))
    v1 = _string(ad, "Args")
    if v1 is not None:
        return tuple(word.replace('\\"', '"') for word in v1.split())
    return ()


def _environment(ad: classad.ClassAd) -> dict[str, str]:
    v2 = _string(ad, "Environment")
    if v2 is not None:
        entries = split_v2(v2)
    else:
        v1 = _string(ad, "Env") or ""
        delim = _string(ad, "EnvDelim") or ";"
        entries = v1.split(delim[:1] or ";")
    env: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.strip(_WS if v2 is None else "").partition("=")
        if sep and name:
            env[name] = value
    return env


def split_v2(text: str) -> list[str]:
    """The words of a V2 argument or environment string.

    White space separates words, single quotes group them, and `''` inside quotes is
    one `'` (condor_arglist.cpp). An unbalanced quote is an error.
    """
    words: list[str] = []
    word: list[str] = []
    in_word = False
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char == "'":
            in_word = True
            end = pos + 1
            while True:
                if end >= len(text):
                    raise InvalidSubmitAd(f"Unbalanced quote in {text!r}", code=1)
                if text[end] == "'":
                    if text[end + 1 : end + 2] == "'":
                        word.append("'")
                        end += 2
                        continue
                    break
                word.append(text[end])
                end += 1
            pos = end + 1
        elif char in _WS:
            if in_word:
                words.append("".join(word))
                word, in_word = [], False
            pos += 1
        else:
            word.append(char)
            in_word = True
            pos += 1
    if in_word:
        words.append("".join(word))
    return words
