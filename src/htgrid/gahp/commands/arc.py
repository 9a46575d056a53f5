"""The ARC CE GAHP's commands (HTCondor's `arc_gahp_protocol.txt`, ARC CE's REST 1.0
interface), as the grid manager sends them and the ARC GAHP server answers them.

Every request is `CMD <id> <service-url> ...`; every result line starts with the
request id, a three-digit HTTP status (499 for a local failure) and its message; a
status not starting with 2 ends the line there:

    ARC_PING <id> <url>                                   <id> <code> <msg>
    ARC_JOB_NEW <id> <url> <ADL or xRSL>                  <id> 201 <msg> <job-id> <state>
    ARC_JOB_STATUS <id> <url> <job-id>                    <id> 200 <msg> <state>
    ARC_JOB_STATUS_ALL <id> <url> <states|NULL>           <id> 200 <msg> <n> (<job-id> <state>)*
    ARC_JOB_INFO <id> <url> <job-id>                      <id> 200 <msg> <ComputingActivity JSON>
    ARC_JOB_STAGE_IN <id> <url> <job-id> <n> <local-path>*          <id> <code> <msg>
    ARC_JOB_STAGE_OUT <id> <url> <job-id> <n> (<remote> <local>)*   <id> <code> <msg>
    ARC_JOB_KILL <id> <url> <job-id>                      <id> 202 <msg>
    ARC_JOB_CLEAN <id> <url> <job-id>                     <id> 202 <msg>
    ARC_DELEGATION_NEW <id> <url> <proxy-file>            <id> 201 <msg> <delegation-id>
    ARC_DELEGATION_RENEW <id> <url> <deleg-id> <proxy-file>   <id> <code> <msg>

The service URL needs only the host: `service_url` fills in https, port 443 and
/arex/rest/1.0 as HTCondor's fillURL does (and /rest/1.0 after a bare `/arex`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from htgrid.gahp._errors import GahpProtocolError
from htgrid.gahp.commands import Spec

__all__ = [
    "DELEGATION_NEW",
    "DELEGATION_RENEW",
    "JOB_CLEAN",
    "JOB_INFO",
    "JOB_KILL",
    "JOB_NEW",
    "JOB_STAGE_IN",
    "JOB_STAGE_OUT",
    "JOB_STATUS",
    "JOB_STATUS_ALL",
    "LOCAL_FAILURE",
    "PING",
    "Answer",
    "JobCreated",
    "StatusAll",
    "service_url",
]

PING = Spec("ARC_PING", 1)
JOB_NEW = Spec("ARC_JOB_NEW", 2)
JOB_STATUS = Spec("ARC_JOB_STATUS", 2)
JOB_STATUS_ALL = Spec("ARC_JOB_STATUS_ALL", 2)
JOB_INFO = Spec("ARC_JOB_INFO", 2)
JOB_STAGE_IN = Spec("ARC_JOB_STAGE_IN", 3, variadic=True)
JOB_STAGE_OUT = Spec("ARC_JOB_STAGE_OUT", 3, variadic=True)
JOB_KILL = Spec("ARC_JOB_KILL", 2)
JOB_CLEAN = Spec("ARC_JOB_CLEAN", 2)
DELEGATION_NEW = Spec("ARC_DELEGATION_NEW", 2)
DELEGATION_RENEW = Spec("ARC_DELEGATION_RENEW", 3)

#: The status the GAHP gives a failure of its own (no HTTP answer, a bad one).
LOCAL_FAILURE = 499

_URL = re.compile(r"(?P<scheme>[^:]+://)?(?P<host>[^:/]+)(?P<port>:[0-9]*)?(?P<path>.*)")


def service_url(url: str) -> str:
    """The REST interface's base URL from a GridResource's: `host` alone is enough."""
    match = _URL.fullmatch(url)
    if match is None:
        return url
    scheme = match["scheme"] or "https://"
    port = match["port"] or ":443"
    path = match["path"].rstrip("/")
    if not path:
        path = "/arex/rest/1.0"
    elif path.endswith("/arex"):
        path += "/rest/1.0"
    return f"{scheme}{match['host']}{port}{path}"


@dataclass(frozen=True, slots=True)
class Answer:
    """A result's status and message, and the fields that follow on success."""

    code: int
    message: str
    more: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return 200 <= self.code < 300

    @property
    def error(self) -> str:
        """The failure as a hold reason or log line shows it."""
        return f"{self.message} (HTTP {self.code})" if self.code != LOCAL_FAILURE else self.message

    def fields(self) -> tuple[str, ...]:
        return (str(self.code), self.message or "NULL", *(self.more if self.ok else ()))

    @classmethod
    def of(cls, fields: Sequence[str]) -> Answer:
        if len(fields) < 2 or not fields[0].isdigit() or len(fields[0]) != 3:
            raise GahpProtocolError(f"malformed ARC GAHP result: {' '.join(fields)!r}")
        return cls(int(fields[0]), fields[1], tuple(fields[2:]))

    @classmethod
    def failure(cls, code: int, message: str) -> Answer:
        return cls(code, message)


@dataclass(frozen=True, slots=True)
class JobCreated:
    """ARC_JOB_NEW's result: the job's id and first state, or the failure."""

    answer: Answer
    job_id: str | None = None
    state: str | None = None

    @classmethod
    def of(cls, fields: Sequence[str]) -> JobCreated:
        answer = Answer.of(fields)
        if not answer.ok:
            return cls(answer)
        if len(answer.more) != 2:
            raise GahpProtocolError(f"ARC_JOB_NEW result without id and state: {fields!r}")
        return cls(answer, answer.more[0], answer.more[1])


@dataclass(frozen=True, slots=True)
class StatusAll:
    """ARC_JOB_STATUS_ALL's result: every job's state, by id, or the failure."""

    answer: Answer
    states: dict[str, str]

    @classmethod
    def of(cls, fields: Sequence[str]) -> StatusAll:
        answer = Answer.of(fields)
        if not answer.ok:
            return cls(answer, {})
        more = answer.more
        if not more or not more[0].isdigit() or len(more) != 1 + 2 * int(more[0]):
            raise GahpProtocolError(f"malformed ARC_JOB_STATUS_ALL result: {fields[:4]!r}...")
        return cls(answer, {more[i]: more[i + 1] for i in range(1, len(more), 2)})

    @staticmethod
    def result(answer: Answer, states: Sequence[tuple[str, str]]) -> tuple[str, ...]:
        flat = [word for pair in states for word in pair]
        return Answer(answer.code, answer.message, (str(len(states)), *flat)).fields()
