"""The execute node's errors, all `StartdError`s (and so `HTGridError`s).

StartdError
├── StartdUnavailable     (nothing answers on the startd's socket)
├── CallerRefused         (the caller is not the execute node's user, nor root)
├── ClaimRefused          (the slot will not take this claim: too small, START false...)
├── ClaimNotFound         (no such claim: released, expired, or the startd restarted)
├── ClaimStateError       (the claim cannot do that now: activated twice, output too soon)
└── StartdProtocolError   (a request or an answer that is not what the API promises)

They cross the startd's API as problem documents (`to_problem`/`from_problem`) and come
back as the same classes.
"""

from __future__ import annotations

import re
from typing import Any, Final

from htgrid.errors import HTGridError
from htgrid.net import RequestTooLarge

__all__ = [
    "CallerRefused",
    "ClaimNotFound",
    "ClaimRefused",
    "ClaimStateError",
    "StartdError",
    "StartdProtocolError",
    "StartdUnavailable",
    "from_problem",
    "status_of",
    "to_problem",
]


class StartdError(HTGridError):
    """The execute node could not do what was asked."""


class StartdUnavailable(StartdError):
    """The execute node does not answer."""


class CallerRefused(StartdError):
    """Only the execute node's own user (or root) may call it."""


class ClaimRefused(StartdError):
    """The execute node refuses the claim."""


class ClaimNotFound(StartdError):
    """The execute node has no such claim."""


class ClaimStateError(StartdError):
    """The claim cannot do that in its current state."""


class StartdProtocolError(StartdError):
    """The message is not what the execute node's API promises."""


_PROBLEMS: Final[tuple[tuple[type[HTGridError], int], ...]] = (
    (CallerRefused, 403),
    (ClaimNotFound, 404),
    (ClaimRefused, 409),
    (ClaimStateError, 409),
    (StartdProtocolError, 400),
    (RequestTooLarge, 413),
    (StartdUnavailable, 503),
    (StartdError, 500),
    (HTGridError, 500),
)
_CLASSES = {cls.__name__: cls for cls, _ in _PROBLEMS}


def status_of(error: HTGridError) -> int:
    """The HTTP status an error is reported with."""
    return next(status for cls, status in _PROBLEMS if isinstance(error, cls))


def to_problem(error: HTGridError) -> dict[str, Any]:
    """The RFC 9457 problem document of an error."""
    cls: type[HTGridError] = type(error)
    while cls.__name__ not in _CLASSES:
        cls = cls.__mro__[1]
    slug = re.sub(r"(?<!^)(?=[A-Z])", "-", cls.__name__).lower()
    return {
        "type": f"urn:htgrid:problem:{slug}",
        "title": (cls.__doc__ or cls.__name__).strip().splitlines()[0],
        "status": status_of(error),
        "detail": str(error),
        "error": cls.__name__,
    }


def from_problem(status: int, doc: object) -> StartdError:
    """The error a problem document stands for."""
    if not isinstance(doc, dict):
        return StartdProtocolError(f"the execute node answered HTTP {status}")
    detail = str(doc.get("detail") or doc.get("title") or f"HTTP {status}")
    cls = _CLASSES.get(str(doc.get("error")))
    if cls is None or not issubclass(cls, StartdError):
        return StartdError(detail)
    return cls(detail)
