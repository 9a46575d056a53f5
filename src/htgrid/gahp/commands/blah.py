"""The batch GAHP's commands: the blahp's (`src/blahp/src/server.c`) and htgrid's two, as
the grid manager sends them and the batch GAHP server answers them.

    BLAH_JOB_SUBMIT <id> <ad>               <id> 0 No\\ error <lrms>/<YYYYMMDD>/<native id>
                                            <id> <code> <error> N/A
    BLAH_JOB_STATUS <id> <blah id>          <id> 0 No\\ error <JobStatus> <status ad>
                                            <id> 1 <error> 0 N/A
    BLAH_JOB_CANCEL|HOLD|RESUME <id> <blah id>              <id> <code> <message>
    BLAH_JOB_REFRESH_PROXY <id> <blah id> <proxy file>      <id> <code> <message>
    BLAH_PING <id> <lrms>                                   <id> <code> <message>

htgrid's own, which HTCondor's grid manager never sends (the blahp's BLAH_JOB_STATUS_ALL,
served only when it keeps a job registry, takes no job ids and answers one `[ad; ad...]`
field; a client tells the two apart by the version banner):

    BLAH_JOB_STATUS_ALL <id> <blah id> [<blah id> ...]
        <id> 0 No\\ error <n> <ad 1> ... <ad n>    one status ad per id asked, in order
        <id> 1 <error> 0                           nothing could be asked
    BLAH_JOB_FIND <id> <lrms> <ClientJobId>
        <id> 0 No\\ error <blah id>|NULL          the latest job submitted with that
        <id> 1 <error> NULL                        ClientJobId, whatever its state

Code 0 is success; the blahp's submit code 3 is "error executing the submission command"
(a batch system that did not answer: worth trying again).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import htgrid.classad as classad
from htgrid.errors import ClassAdSyntaxError
from htgrid.gahp._codec import null, unnull
from htgrid.gahp._errors import GahpProtocolError
from htgrid.gahp.commands import Spec

__all__ = [
    "CANCEL",
    "FIND",
    "HOLD",
    "NOT_AVAILABLE",
    "NO_ERROR",
    "PING",
    "REFRESH_PROXY",
    "RESUME",
    "STATUS",
    "STATUS_ALL",
    "SUBMIT",
    "Find",
    "Found",
    "Outcome",
    "Status",
    "StatusAd",
    "StatusAll",
    "Submitted",
    "already_gone",
    "transient_submit",
]

SUBMIT = Spec("BLAH_JOB_SUBMIT", 1)
STATUS = Spec("BLAH_JOB_STATUS", 1)
STATUS_ALL = Spec("BLAH_JOB_STATUS_ALL", 1, variadic=True)
FIND = Spec("BLAH_JOB_FIND", 2)
CANCEL = Spec("BLAH_JOB_CANCEL", 1)
HOLD = Spec("BLAH_JOB_HOLD", 1)
RESUME = Spec("BLAH_JOB_RESUME", 1)
REFRESH_PROXY = Spec("BLAH_JOB_REFRESH_PROXY", 2)
PING = Spec("BLAH_PING", 1)

NO_ERROR = "No error"
NOT_AVAILABLE = "N/A"
# What a cancel's error says when the job no longer needs one.
_ALREADY_GONE = re.compile(r"not found|completed|removed|finished", re.IGNORECASE)
# A submit error that says nothing was submitted and trying later may work.
_TRANSIENT = re.compile(r"temporar|try again|timed? ?out|unavailable|connection", re.IGNORECASE)


def already_gone(message: str) -> bool:
    """Whether a failed cancel's message says the job is gone anyway (not found, done...)."""
    return _ALREADY_GONE.search(message) is not None


def transient_submit(code: str, error: str) -> bool:
    """Whether a failed submit may work later: code 3, or an error saying the batch system
    did not answer."""
    return code == "3" or _TRANSIENT.search(error) is not None


def _code(fields: Sequence[str]) -> str:
    return fields[0] if fields else ""


def _error(fields: Sequence[str]) -> str:
    return fields[1] if len(fields) > 1 else ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """`<code> <message>`: CANCEL's, HOLD's, RESUME's, REFRESH_PROXY's and PING's result."""

    code: str
    message: str = NO_ERROR

    @property
    def ok(self) -> bool:
        return self.code == "0"

    def fields(self) -> tuple[str, ...]:
        return (self.code, self.message)

    @classmethod
    def of(cls, fields: Sequence[str]) -> Outcome:
        return cls(_code(fields), _error(fields))


@dataclass(frozen=True, slots=True)
class Submitted:
    """BLAH_JOB_SUBMIT's result: the blah id of the job submitted, or why none was."""

    code: str
    error: str = NO_ERROR
    blah_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == "0" and bool(self.blah_id)

    def fields(self) -> tuple[str, ...]:
        return (self.code, self.error, self.blah_id or NOT_AVAILABLE)

    @classmethod
    def of(cls, fields: Sequence[str]) -> Submitted:
        blah_id = unnull(fields[2]) if len(fields) > 2 else None
        return cls(_code(fields), _error(fields), None if blah_id == NOT_AVAILABLE else blah_id)


@dataclass(frozen=True, slots=True)
class Status:
    """BLAH_JOB_STATUS's result: the job's JobStatus and status ad, or why not."""

    code: str
    error: str = NO_ERROR
    #: None when the field is not a number.
    job_status: int | None = 0
    ad: str = NOT_AVAILABLE

    @property
    def ok(self) -> bool:
        return self.code == "0"

    def fields(self) -> tuple[str, ...]:
        return (self.code, self.error, str(self.job_status or 0), self.ad)

    @classmethod
    def of(cls, fields: Sequence[str]) -> Status:
        if _code(fields) == "0" and len(fields) < 4:
            raise GahpProtocolError(f"a {STATUS.name} result without its ad: {fields!r}")
        number = fields[2] if len(fields) > 2 else ""
        job_status = int(number) if number.lstrip("-").isdigit() else None
        ad = fields[3] if len(fields) > 3 else NOT_AVAILABLE
        return cls(_code(fields), _error(fields), job_status, ad)


@dataclass(frozen=True, slots=True)
class StatusAll:
    """BLAH_JOB_STATUS_ALL's result: a status ad per job asked, in order, or why none."""

    code: str
    error: str = NO_ERROR
    ads: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code == "0"

    def fields(self) -> tuple[str, ...]:
        return (self.code, self.error, str(len(self.ads)), *self.ads)

    @classmethod
    def of(cls, fields: Sequence[str]) -> StatusAll:
        if _code(fields) != "0":
            return cls(_code(fields), _error(fields))
        if len(fields) < 3 or not fields[2].isdigit():
            raise GahpProtocolError(f"a {STATUS_ALL.name} result without a count: {fields[:3]!r}")
        return cls("0", _error(fields), tuple(fields[3 : 3 + int(fields[2])]))


@dataclass(frozen=True, slots=True)
class Find:
    """BLAH_JOB_FIND's request: the job submitted to `lrms` with ClientJobId `tag`."""

    lrms: str
    tag: str

    def args(self) -> tuple[str, ...]:
        return (self.lrms, self.tag)

    @classmethod
    def of(cls, args: Sequence[str]) -> Find:
        return cls(args[0], args[1])


@dataclass(frozen=True, slots=True)
class Found:
    """BLAH_JOB_FIND's result: the blah id the tag was submitted under (None: never), or
    why the lookup failed."""

    code: str
    error: str = NO_ERROR
    blah_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == "0"

    def fields(self) -> tuple[str, ...]:
        return (self.code, self.error, null(self.blah_id))

    @classmethod
    def of(cls, fields: Sequence[str]) -> Found:
        blah_id = unnull(fields[2]) if len(fields) > 2 else None
        return cls(_code(fields), _error(fields), blah_id or None)


@dataclass(frozen=True, slots=True)
class StatusAd:
    """One job's status ad, as STATUS and STATUS_ALL carry it (new ClassAd syntax, one
    line). JobStatus 0: the batch system does not know the job, or could not be asked
    (BlahError says which). A job whose outputs could not be copied back is HELD (5)
    with HoldReason and HoldReasonCode 12."""

    job_status: int
    batch_id: str | None = None
    blah_id: str | None = None
    hold_reason: str | None = None
    hold_code: int = 0
    hold_subcode: int = 0
    exit_code: int | None = None
    exit_signal: int | None = None
    exit_reason: str | None = None
    wallclock: float | None = None
    error: str | None = None
    #: Every literal of the ad, by lower-cased name (a blahp's ads carry more: BytesSent,
    #: RemoteSysCpu...).
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def not_found(self) -> bool:
        """Whether a status 0 says the batch system does not know the job (else: no answer)."""
        return self.job_status == 0 and (self.error is None or "not found" in self.error.lower())

    def text(self) -> str:
        """The ad as the batch GAHP server writes it."""
        attrs: list[tuple[str, object]] = []
        if self.batch_id is not None:
            attrs.append(("BatchJobId", self.batch_id))
        if self.blah_id is not None:
            attrs.append(("BlahJobId", self.blah_id))
        if self.hold_reason is not None:
            attrs += [
                ("HoldReason", self.hold_reason),
                ("HoldReasonCode", self.hold_code),
                ("HoldReasonSubCode", self.hold_subcode),
            ]
        attrs.append(("JobStatus", self.job_status))
        if self.exit_signal is not None:
            attrs += [("ExitBySignal", True), ("ExitSignal", self.exit_signal)]
        elif self.exit_code is not None:
            attrs += [("ExitBySignal", False), ("ExitCode", self.exit_code)]
        if self.exit_reason:
            attrs.append(("ExitReason", self.exit_reason))
        if self.wallclock is not None:
            attrs.append(("RemoteWallClockTime", self.wallclock))
        if self.error is not None:
            attrs.append(("BlahError", self.error))
        return _unparse(attrs)

    @classmethod
    def of(cls, text: str, job_status: int | None = None) -> StatusAd:
        """Read an ad (`job_status` if it has no JobStatus); GahpProtocolError if it is none."""
        try:
            ad = classad.ClassAd(text)
        except (ClassAdSyntaxError, ValueError, TypeError) as err:
            raise GahpProtocolError(f"bad status ad {text[:200]!r}") from err
        literals = {name.lower(): value for name in ad if _plain(value := ad.get(name))}
        get = literals.get
        status = _int(get("jobstatus"))
        if status is None:
            status = job_status
        if status is None:
            raise GahpProtocolError(f"status ad without JobStatus: {text[:200]!r}")
        wallclock = _number(get("remotewallclocktime"))
        return cls(
            job_status=status,
            batch_id=_str(get("batchjobid")),
            blah_id=_str(get("blahjobid")),
            hold_reason=_str(get("holdreason")),
            hold_code=_int(get("holdreasoncode")) or 0,
            hold_subcode=_int(get("holdreasonsubcode")) or 0,
            exit_code=_int(get("exitcode")),
            exit_signal=_int(get("exitsignal")) if get("exitbysignal") is True else None,
            exit_reason=_str(get("exitreason")),
            wallclock=None if wallclock is None else float(wallclock),
            error=_str(get("blaherror")),
            attrs=literals,
        )


def _number(value: object) -> int | float | None:
    # ClassAd's Undefined and Error are ints in Python (an IntEnum), and so is True.
    if isinstance(value, bool | classad.Value) or not isinstance(value, int | float):
        return None
    return value


def _plain(value: object) -> bool:
    return isinstance(value, str | bool) or _number(value) is not None


def _int(value: object) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _unparse(attrs: Sequence[tuple[str, object]]) -> str:
    parts = []
    for name, value in attrs:
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(int(value))  # int() also flattens IntEnums such as signal.Signals
        elif isinstance(value, float):
            text = repr(float(value))
        else:
            text = classad.quote(str(value))
        parts.append(f"{name} = {text}")
    return "[" + "; ".join(parts) + "]"
