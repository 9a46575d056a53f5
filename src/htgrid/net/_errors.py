"""The errors of the API layer, and the one table mapping htgrid's errors to HTTP.

HTGridError
├── DaemonUnavailable     (nothing answers on the socket: the daemons are not running)
├── BadRequest            (a request the API cannot read: bad JSON, a missing field)
├── SandboxTooLarge       (413: a sandbox over MAX_TRANSFER_INPUT_MB/OUTPUT_MB)
├── RequestTooLarge       (413: a JSON body over MAX_API_REQUEST_MB; _limits)
├── (security.AuthError   401 (403 for InsufficientScope): a token refused, over TLS)
└── ApiError              (an answer the client cannot map back to an htgrid error)

Every error the daemon raises travels as an RFC 9457 problem document whose `error`
member names its class; the client raises the same class again (`PROBLEMS` lists the
classes that may cross the wire, most specific first).
"""

from __future__ import annotations

from typing import Final

from htgrid.errors import ClassAdSyntaxError, HTGridError, UsageError
from htgrid.net._limits import RequestTooLarge
from htgrid.net.security import (
    AuthError,
    DeniedIdentity,
    ExpiredToken,
    ForgedToken,
    InsufficientScope,
    IssuerUnavailable,
    MalformedToken,
    MissingToken,
    RevokedToken,
    TokenNotYetValid,
    UnknownKey,
    UnmappedIdentity,
    UntrustedIssuer,
    WrongAudience,
)
from htgrid.queue import (
    InvalidSubmit,
    InvalidTransition,
    InvalidValue,
    JobNotFound,
    NotAuthorized,
    ProtectedAttribute,
    QueueError,
    StoreError,
)
from htgrid.submit import SubmitError

__all__ = [
    "PROBLEMS",
    "ApiError",
    "BadRequest",
    "CedarError",
    "DaemonUnavailable",
    "RequestTooLarge",
    "SandboxTooLarge",
    "status_of",
]


class DaemonUnavailable(HTGridError):
    """The htgrid daemons do not answer; start them with `htgrid up`."""


class BadRequest(HTGridError):
    """The request is malformed."""


class SandboxTooLarge(HTGridError):
    """The sandbox is larger than the daemon transfers."""


class CedarError(HTGridError):
    """A peer broke HTCondor's CEDAR protocol (or was refused in it); the connection ends."""


class ApiError(HTGridError):
    """The daemon answered with an error this client does not know."""

    def __init__(self, message: str, *, status: int = 500) -> None:
        self.status = status
        super().__init__(message)


# (class, HTTP status), most specific first: the first class an error is an instance of
# gives its status. The client rebuilds only these classes from a problem's `error` name.
PROBLEMS: Final[tuple[tuple[type[HTGridError], int], ...]] = (
    (JobNotFound, 404),
    (InsufficientScope, 403),
    (DeniedIdentity, 403),
    *((cls, 401) for cls in (UnmappedIdentity, IssuerUnavailable, WrongAudience)),
    *((cls, 401) for cls in (MissingToken, MalformedToken, ForgedToken, UnknownKey)),
    *((cls, 401) for cls in (UntrustedIssuer, ExpiredToken, TokenNotYetValid, RevokedToken)),
    (AuthError, 401),
    (NotAuthorized, 403),
    (InvalidTransition, 409),
    (ProtectedAttribute, 422),
    (InvalidSubmit, 422),
    (InvalidValue, 400),
    (StoreError, 503),
    (QueueError, 400),
    (ClassAdSyntaxError, 400),
    (SubmitError, 400),
    (BadRequest, 400),
    (SandboxTooLarge, 413),
    (RequestTooLarge, 413),
    (UsageError, 400),
    (DaemonUnavailable, 503),
    (ApiError, 500),
    (HTGridError, 500),
)


def status_of(error: HTGridError) -> int:
    """The HTTP status an error is reported with."""
    for cls, status in PROBLEMS:
        if isinstance(error, cls):
            return status
    return 500
