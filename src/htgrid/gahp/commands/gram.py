"""The gt GAHP's commands (HTCondor's `gahp_server` for GRAM: gt2 and gt5), as the grid
manager sends them and `htgrid gahp gram` answers them. Codes are GRAM protocol error
codes (0: success; globus_gram_protocol_constants.h); states are GRAM job states.

    GRAM_PING <id> <resource-contact>                             <id> <code>
    GRAM_JOB_REQUEST <id> <resource-contact> <callback|NULL> <limited-deleg> <rsl>
                                                                  <id> <code> <job-contact|NULL>
    GRAM_JOB_STATUS <id> <job-contact>                            <id> <code> <failure> <state> [<exit>]
    GRAM_JOB_SIGNAL <id> <job-contact> <signal> <arg|NULL>        <id> <code> <failure> <state>
    GRAM_JOB_CANCEL <id> <job-contact>                            <id> <code>
    GRAM_JOB_REFRESH_PROXY <id> <job-contact> <limited-deleg>     <id> <code>
    GRAM_GET_JOBMANAGER_VERSION <id> <resource-contact>           <id> <code> (<name>=<value>)*
    GASS_SERVER_INIT <id> <port>                                  <id> <code> <url|NULL>

A job request with (two_phase=N) in its RSL answers WAITING_FOR_COMMIT (110) with the job
contact: the job runs only once GRAM_JOB_SIGNAL sends COMMIT_REQUEST, and the job manager
keeps the finished job until COMMIT_END. GRAM_JOB_STATUS's exit code (htgrid's addition,
after HTCondor's four fields) is there when the job manager reported one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from htgrid.gahp._errors import GahpProtocolError
from htgrid.gahp.commands import Spec

__all__ = [
    "ERROR_CONTACT_NOT_FOUND",
    "ERROR_STDIO_SIZE",
    "ERROR_WAITING_FOR_COMMIT",
    "GASS_SERVER_INIT",
    "GET_JOBMANAGER_VERSION",
    "JOB_CANCEL",
    "JOB_REFRESH_PROXY",
    "JOB_REQUEST",
    "JOB_SIGNAL",
    "JOB_STATUS",
    "LOCAL_FAILURE",
    "PING",
    "SIGNAL_COMMIT_END",
    "SIGNAL_COMMIT_REQUEST",
    "SIGNAL_STDIO_SIZE",
    "STATES",
    "Code",
    "JobRequest",
    "JobState",
    "Version",
    "error_text",
]

PING = Spec("GRAM_PING", 1)
JOB_REQUEST = Spec("GRAM_JOB_REQUEST", 4)
JOB_STATUS = Spec("GRAM_JOB_STATUS", 1)
JOB_SIGNAL = Spec("GRAM_JOB_SIGNAL", 3)
JOB_CANCEL = Spec("GRAM_JOB_CANCEL", 1)
JOB_REFRESH_PROXY = Spec("GRAM_JOB_REFRESH_PROXY", 2)
GET_JOBMANAGER_VERSION = Spec("GRAM_GET_JOBMANAGER_VERSION", 1)
GASS_SERVER_INIT = Spec("GASS_SERVER_INIT", 1)

#: GRAM protocol error codes both sides compare.
ERROR_WAITING_FOR_COMMIT = 110
ERROR_CONTACT_NOT_FOUND = 156
#: The code the GAHP gives a failure of its own (GLOBUS_GRAM_PROTOCOL_ERROR_GATEKEEPER_
#: MISCONFIGURED is 4; htgrid uses 7, "an authentication system error").
LOCAL_FAILURE = 7
#: Connection failures: the gatekeeper or job manager is not there (may work later).
TRANSIENT = frozenset({7, 12, 31, 79, 93, 124, 160})
SIGNAL_COMMIT_REQUEST = 5
SIGNAL_COMMIT_END = 10
SIGNAL_STDIO_SIZE = 8
ERROR_STDIO_SIZE = 129

#: GRAM job states by number, as GridJobStatus shows them.
STATES = {
    1: "PENDING",
    2: "ACTIVE",
    4: "FAILED",
    8: "DONE",
    16: "SUSPENDED",
    32: "UNSUBMITTED",
    64: "STAGE_IN",
    128: "STAGE_OUT",
}


#: The toolkit's own texts of the codes a user meets most (globus_gram_client_error_string).
_TEXTS = {
    1: "one of the RSL parameters is not supported",
    3: "an I/O operation failed",
    5: "the executable does not exist",
    7: "authentication with the remote server failed",
    8: "the user cancelled the job",
    10: "data transfer to the server failed",
    12: "the connection to the server failed (check host and port)",
    15: "the job manager received an invalid RSL",
    43: "the job manager failed to stage the executable",
    44: "the job manager failed to stage the stdin file",
    48: "the provided RSL could not be properly parsed",
    74: "the job manager failed to open stderr",
    79: "connecting to the job manager failed",
    93: "the gatekeeper failed to find the requested service",
    111: "the job manager timed out while waiting for a commit signal",
    131: "the user proxy expired (job is still running)",
    155: "the job manager could not stage out a file",
    156: "the job contact string does not match any which the job manager is handling",
}


def error_text(code: int) -> str:
    """A GRAM code as HTCondor's hold reasons show one: `Globus error 155: the job manager
    could not stage out a file`."""
    text = _TEXTS.get(code)
    return f"Globus error {code}: {text}" if text else f"Globus error {code}"


def _code(fields: Sequence[str], what: str) -> int:
    if not fields or not fields[0].lstrip("-").isdigit():
        raise GahpProtocolError(f"malformed {what} result: {' '.join(fields)!r}")
    return int(fields[0])


@dataclass(frozen=True, slots=True)
class Code:
    """A result that is only a code (PING, CANCEL, REFRESH_PROXY)."""

    code: int

    @property
    def ok(self) -> bool:
        return self.code == 0

    def fields(self) -> tuple[str, ...]:
        return (str(self.code),)

    @classmethod
    def of(cls, fields: Sequence[str]) -> Code:
        return cls(_code(fields, "GRAM"))


@dataclass(frozen=True, slots=True)
class JobRequest:
    """GRAM_JOB_REQUEST's result: the code and the job contact (with 0 or 110)."""

    code: int
    contact: str | None = None

    def fields(self) -> tuple[str, ...]:
        return (str(self.code), self.contact or "NULL")

    @classmethod
    def of(cls, fields: Sequence[str]) -> JobRequest:
        code = _code(fields, "GRAM_JOB_REQUEST")
        contact = fields[1] if len(fields) > 1 and fields[1] != "NULL" else None
        return cls(code, contact)


@dataclass(frozen=True, slots=True)
class JobState:
    """GRAM_JOB_STATUS's and GRAM_JOB_SIGNAL's result."""

    code: int
    failure: int = 0
    state: int = 0
    exit_code: int | None = None

    @property
    def name(self) -> str:
        return STATES.get(self.state, str(self.state))

    def fields(self) -> tuple[str, ...]:
        more = () if self.exit_code is None else (str(self.exit_code),)
        return (str(self.code), str(self.failure), str(self.state), *more)

    @classmethod
    def of(cls, fields: Sequence[str]) -> JobState:
        code = _code(fields, "GRAM_JOB_STATUS")
        if len(fields) < 3 or not fields[1].isdigit() or not fields[2].isdigit():
            if code != 0:
                return cls(code)  # a failed call says no more (or NULL)
            raise GahpProtocolError(f"malformed GRAM job state: {' '.join(fields)!r}")
        exit_code = None
        if len(fields) > 3 and fields[3].lstrip("-").isdigit():
            exit_code = int(fields[3])
        return cls(code, int(fields[1]), int(fields[2]), exit_code)


@dataclass(frozen=True, slots=True)
class Version:
    """GRAM_GET_JOBMANAGER_VERSION's result: the code and the job manager's extensions."""

    code: int
    extensions: dict[str, str]

    @property
    def gram5(self) -> bool:
        """Whether the job manager is GRAM5's (toolkit 5 and later: it reports a version;
        GRAM2's does not answer the request)."""
        major = self.extensions.get("toolkit-version", "").split(".")[0]
        return self.code == 0 and major.isdigit() and int(major) >= 5

    def fields(self) -> tuple[str, ...]:
        return (str(self.code), *(f"{k}={v}" for k, v in self.extensions.items()))

    @classmethod
    def of(cls, fields: Sequence[str]) -> Version:
        code = _code(fields, "GRAM_GET_JOBMANAGER_VERSION")
        pairs = (field.partition("=") for field in fields[1:])
        return cls(code, {k: v for k, sep, v in pairs if sep})
