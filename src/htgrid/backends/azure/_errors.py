"""Azure failures as htgrid errors, translated from azure-core at one boundary.

AzureError (an HTGridError)
├── AzureArgumentError     (a request's arguments are malformed: permanent, no call was made)
└── AzureServiceError      (Azure, the network or the credentials said no)

Every error knows the provider's `code`, the HTTP `status` (None when no response came)
and whether it is `transient` (worth retrying later: throttling, a busy or failing
service, no connection) or permanent (quota, bad request, missing resource, bad
credentials). `error_string()` is the one-field form result lines carry
(`htgrid.gahp.commands.azure.Failure`, which the grid manager reads back):

    Error creating VM: QuotaExceeded (HTTP 409, permanent): Operation could not be ...
    Error listing VMs: TooManyRequests (HTTP 429, transient): Rate limit exceeded
    Error deleting VM: ResourceNotFound (HTTP 404, permanent): ... could not be found.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from htgrid.errors import HTGridError
from htgrid.gahp.commands import azure

__all__ = [
    "AzureArgumentError",
    "AzureError",
    "AzureServiceError",
    "translate_errors",
]

# HTTP statuses that say "later" rather than "no" (throttling, timeouts, a sick service).
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Error codes Azure uses for conditions that clear by themselves. Capacity shortages
# (AllocationFailed) count: the same request usually succeeds a little later.
_TRANSIENT_CODES = frozenset(
    {
        "AllocationFailed",
        "InternalExecutionError",
        "InternalServerError",
        "OperationPreempted",
        "RetryableError",
        "ServerBusy",
        "ServerTimeout",
        "ServiceUnavailable",
        "TooManyRequests",
        "ZonalAllocationFailed",
    }
)


class AzureError(HTGridError):
    """An Azure GAHP operation failed."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "Error",
        status: int | None = None,
        transient: bool = False,
    ) -> None:
        self.code = code
        self.status = status
        self.transient = transient
        self.detail = message
        super().__init__(message)

    def error_string(self, what: str) -> str:
        """The result line's error field: what failed, the code, the kind, the message."""
        return azure.Failure(what, self.code, self.status, self.transient, self.detail).text()


class AzureArgumentError(AzureError):
    """The request's arguments are malformed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="InvalidArgument")


class AzureServiceError(AzureError):
    """Azure refused or failed the request, or could not be reached."""


def _classify(code: str, status: int | None) -> bool:
    return code in _TRANSIENT_CODES or status in _TRANSIENT_STATUS


def _from_http(err: HttpResponseError) -> AzureServiceError:
    status = err.status_code
    odata: Any = err.error
    code = getattr(odata, "code", None) or (err.reason or "HttpResponseError").replace(" ", "")
    message = getattr(odata, "message", None) or err.message or str(err)
    if isinstance(err, ClientAuthenticationError):
        # azure-identity raises it for a refused token request (no HTTP status of ARM's).
        code = code if odata is not None else "AuthenticationFailed"
        return AzureServiceError(str(message), code=code, status=status or 401)
    return AzureServiceError(
        str(message), code=str(code), status=status, transient=_classify(str(code), status)
    )


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Turn azure-core's exceptions raised inside into AzureServiceError."""
    try:
        yield
    except AzureError:
        raise
    except HttpResponseError as err:
        # ClientAuthenticationError is one too: azure-identity's refused token request.
        raise _from_http(err) from err
    except (ServiceRequestError, ServiceResponseError) as err:
        # No answer at all: DNS, TCP, TLS or a dropped connection. Try again later.
        raise AzureServiceError(
            str(err.message or err), code="ConnectionError", transient=True
        ) from err
    except OSError as err:
        # A local file named in the request (auth file, key, custom data) is unreadable.
        raise AzureServiceError(
            f"{err.strerror or err}: {err.filename or ''}", code="LocalError"
        ) from err
