"""The condor GAHP's errors, and the one place httpx's exceptions become them.

HTGridError
└── CondorGahpError         (a request that failed: its text is the F result's error field)
    ├── LocateError         ("Error locating schedd NAME: ..."; the collector lookup failed)
    ├── ConnectFailure      ("Failed to connect to schedd NAME at URL: ..."; nothing answered)
    ├── RemoteRefusal       (the remote daemon answered with an error: its problem text)
    └── SandboxError        (a local file of a stage-in or stage-out: what and where)

The grid manager reads "Error locating schedd" and "Failed to connect to" in an error as
"the resource is down" (condorresource.cpp), so those two prefixes are kept exactly.
A sandbox the remote daemon refuses as too large (HTTP 413, over its MAX_TRANSFER_INPUT_MB
or MAX_TRANSFER_OUTPUT_MB) fails the stage-in or stage-out with an error that starts with
`htgrid.gahp.commands.condor`'s INPUT_TOO_LARGE or OUTPUT_TOO_LARGE, then the daemon's own
text: no retry will fit it, and the grid manager holds the job with HTCondor's code 32 or
33 for it.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import Iterator

import httpx

from htgrid.errors import HTGridError

__all__ = [
    "CondorGahpError",
    "ConnectFailure",
    "LocateError",
    "RemoteRefusal",
    "SandboxError",
    "refusal_message",
    "refusal_of",
    "translate",
]


class CondorGahpError(HTGridError):
    """A condor GAHP request that could not be carried out."""


class LocateError(CondorGahpError):
    """The remote schedd's address could not be found through its pool's collector."""


class ConnectFailure(CondorGahpError):
    """The remote daemon (schedd or collector) did not answer, or TLS failed."""


class SandboxError(CondorGahpError):
    """A local sandbox file could not be read (stage in) or written (stage out)."""


class RemoteRefusal(CondorGahpError):
    """The remote daemon answered with an HTTP error; `detail` is its problem text."""

    def __init__(self, message: str, *, status: int, error: str, detail: str) -> None:
        self.status = status
        self.error = error  # the problem document's class name, e.g. "JobNotFound"
        self.detail = detail
        super().__init__(message)


def refusal_of(what: str, response: httpx.Response) -> RemoteRefusal:
    """The error an HTTP error answer stands for; `what` names the daemon."""
    detail = ""
    error = ""
    try:
        doc = json.loads(response.content)
    except (json.JSONDecodeError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict):
        detail = str(doc.get("detail") or doc.get("title") or "")
        error = str(doc.get("error") or "")
    if not detail:
        detail = response.text.strip()[:300] or response.reason_phrase
    status = response.status_code
    message = refusal_message(what, status, detail)
    return RemoteRefusal(message, status=status, error=error, detail=detail)


def refusal_message(what: str, status: int, detail: str) -> str:
    """How a refusal with HTTP `status` reads (also for one job's part of a batch answer)."""
    if status == 401:
        return f"Authentication failed at {what}: {detail}"
    if status == 403:
        return f"Permission denied by {what}: {detail}"
    return f"{what} answered HTTP {status}: {detail}"


@contextlib.contextmanager
def translate(what: str) -> Iterator[None]:
    """Turn httpx's transport errors inside into ConnectFailure naming `what`."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ConnectFailure(
            f"Failed to connect to {what}: timed out ({type(exc).__name__})"
        ) from None
    except httpx.ConnectError as exc:
        raise ConnectFailure(f"Failed to connect to {what}: {_reason(exc)}") from None
    except httpx.TransportError as exc:
        raise ConnectFailure(f"Failed to connect to {what}: {_reason(exc)}") from None
    except ssl.SSLError as exc:
        raise ConnectFailure(f"Failed to connect to {what}: TLS failed: {exc}") from None


def _reason(exc: BaseException) -> str:
    # httpx wraps the OSError or SSL error; the innermost one says what went wrong.
    inner: BaseException = exc
    while inner.__cause__ is not None or inner.__context__ is not None:
        nxt = inner.__cause__ or inner.__context__
        assert nxt is not None
        inner = nxt
    text = str(inner) or str(exc) or type(exc).__name__
    if isinstance(inner, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted: {text}"
    return text
