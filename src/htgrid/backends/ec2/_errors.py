"""The EC2 GAHP's errors, and the one place botocore's exceptions become them.

HTGridError
└── Ec2Error                (a request that failed: its code and message go on the result line)
    ├── Ec2ServiceError     (EC2 said no; the code is EC2's own, e.g. InvalidAMIID.NotFound)
    ├── Ec2TransportError   (no usable answer, E_CURL_IO: the request may or may not have run)
    └── Ec2RequestError     (no request could be made: E_FILE_IO, E_INVALID_SERVICE_URL, ...)

Every failure is reported as HTCondor's EC2 GAHP does, `<id> 1 <code> <message>`. The code
is what the grid manager compares (`InstanceLimitExceeded`, `E_CURL_IO`, `NEED_CHECK_*`);
the message starts with the code, because the grid manager also searches the message
(`InvalidInstanceID.NotFound`, `InvalidKeyPair.Duplicate`) and shows it as HoldReason.

`transient` tells a retry later may work (throttling, 5xx, capacity, no answer): such
messages end with "(transient, N attempts)". Permanent errors (a bad AMI, no permission)
need a person.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    ConnectionError,
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)
from botocore.parsers import ResponseParserError  # type: ignore[import-untyped]

from htgrid.errors import HTGridError
from htgrid.gahp.commands import ec2

__all__ = [
    "CAPACITY_CODES",
    "THROTTLING_CODES",
    "Ec2Error",
    "Ec2RequestError",
    "Ec2ServiceError",
    "Ec2TransportError",
    "is_transient",
    "translate",
]

#: Codes EC2 uses when a caller goes too fast; botocore retries these itself first.
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "EC2ThrottledException",
        "BandwidthLimitExceeded",
        "SlowDown",
        "PriorRequestNotComplete",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)

#: Codes for "not now": capacity, quotas and service trouble clear up without a person.
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacity",
        "InstanceLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "Unavailable",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
    }
)


def is_transient(code: str, status: int = 0) -> bool:
    """Whether an EC2 error code (or HTTP status) means "try again later"."""
    return code in THROTTLING_CODES or code in CAPACITY_CODES or status >= 500


class Ec2Error(HTGridError):
    """An EC2 request failed."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        transient: bool = False,
        attempts: int = 1,
        label: str | None = None,
    ) -> None:
        self.code = code
        self.transient = transient
        self.attempts = attempts
        label = label or code
        text = f"{label}: {message}" if message else label
        self.message = ec2.transient_message(text, attempts) if transient else text
        super().__init__(text)

    def fields(self, transport_code: str | None = None) -> tuple[str, ...]:
        """The result fields after the request id: `1 <code> <message>`.

        `transport_code` replaces E_CURL_IO for commands whose request may have run
        although no answer came (HTCondor's NEED_CHECK_VM_START and friends).
        """
        code = self.code
        if transport_code is not None and isinstance(self, Ec2TransportError):
            code = transport_code
        return ec2.Failure(code, self.message).fields()


class Ec2ServiceError(Ec2Error):
    """EC2 answered with an error."""

    def __init__(self, code: str, message: str, *, status: int = 0, attempts: int = 1) -> None:
        self.status = status
        # ec2resource.cpp's ping treats "(401)" in the code as an authentication
        # failure (HTCondor's code is "E_HTTP_RESPONSE_NOT_200 (401)"); keep that working.
        super().__init__(
            f"{code} (401)" if status == 401 else code,
            message,
            transient=is_transient(code, status),
            attempts=attempts,
            label=code,
        )


class Ec2TransportError(Ec2Error):
    """No usable answer came back (connection refused, timeout, garbage)."""

    def __init__(self, message: str, *, code: str = ec2.E_CURL_IO, attempts: int = 1) -> None:
        super().__init__(code, message, transient=True, attempts=attempts)


class Ec2RequestError(Ec2Error):
    """The request could not be made: unreadable key file, bad service URL, bad argument."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)


@contextlib.contextmanager
def translate() -> Iterator[None]:
    """Turn botocore's exceptions raised inside into Ec2Errors (the only place that does)."""
    try:
        yield
    except ClientError as err:
        raise _service_error(err.response) from err
    except (ConnectionError, HTTPClientError) as err:
        raise Ec2TransportError(f"{type(err).__name__}: {err}") from err
    except ResponseParserError as err:
        # A server answering something that is not EC2's XML (moto's 500 HTML pages).
        raise Ec2TransportError(
            f"unreadable answer: {str(err)[:300]}", code=ec2.E_HTTP_RESPONSE_NOT_200
        ) from err
    except (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError) as err:
        raise Ec2RequestError("E_FILE_IO", f"no credentials: {err}") from err
    except ParamValidationError as err:
        raise Ec2RequestError("E_INVALID_PARAMETER", str(err).replace("\n", " ")) from err
    except BotoCoreError as err:
        raise Ec2RequestError("E_INTERNAL", f"{type(err).__name__}: {err}") from err


def _service_error(response: Any) -> Ec2ServiceError:
    error = response.get("Error") or {}
    meta = response.get("ResponseMetadata") or {}
    status = int(meta.get("HTTPStatusCode") or 0)
    code = str(error.get("Code") or f"{ec2.E_HTTP_RESPONSE_NOT_200} ({status})")
    message = " ".join(str(error.get("Message") or "").split())
    attempts = int(meta.get("RetryAttempts") or 0) + 1
    return Ec2ServiceError(code, message, status=status, attempts=attempts)
