"""The collector's errors as RFC 9457 problem documents, and back.

    {"type": "urn:htgrid:problem:invalid-ad", "title": "The collector cannot store this ad.",
     "status": 422, "detail": "UPDATE_STARTD_AD: the ad has no Name, ...", "error": "InvalidAd"}

The same shape as the queue daemon's API, so one client habit reads both. A constraint's
`ClassAdSyntaxError` also carries `reason`, `line`, `column` and `source`, so the client
raises an error with the same caret excerpt.
"""

from __future__ import annotations

import re
from typing import Any, Final

from htgrid.collector._errors import (
    CollectorError,
    CollectorUnavailable,
    InvalidAd,
    InvalidQuery,
    NotRegistered,
    ProtocolError,
    UnknownCommand,
)
from htgrid.errors import ClassAdSyntaxError, HTGridError
from htgrid.net import RequestTooLarge

__all__ = ["from_problem", "status_of", "to_problem"]

# (class, HTTP status), most specific first.
_PROBLEMS: Final[tuple[tuple[type[HTGridError], int], ...]] = (
    (UnknownCommand, 404),
    (NotRegistered, 404),
    (InvalidAd, 422),
    (InvalidQuery, 400),
    (ClassAdSyntaxError, 400),
    (ProtocolError, 400),
    (RequestTooLarge, 413),
    (CollectorUnavailable, 503),
    (CollectorError, 500),
    (HTGridError, 500),
)
_CLASSES = {cls.__name__: cls for cls, _ in _PROBLEMS}


def status_of(error: HTGridError) -> int:
    """The HTTP status an error is reported with."""
    return next(status for cls, status in _PROBLEMS if isinstance(error, cls))


def _slug(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def to_problem(error: HTGridError) -> dict[str, Any]:
    """The problem document of an error."""
    cls: type[HTGridError] = type(error)
    while cls.__name__ not in _CLASSES:
        cls = cls.__mro__[1]
    doc: dict[str, Any] = {
        "type": f"urn:htgrid:problem:{_slug(cls.__name__)}",
        "title": (cls.__doc__ or cls.__name__).strip().splitlines()[0],
        "status": status_of(error),
        "detail": str(error),
        "error": cls.__name__,
    }
    if isinstance(error, ClassAdSyntaxError):
        doc.update(reason=error.reason, line=error.line, column=error.column, source=error.source)
    return doc


def from_problem(status: int, doc: object) -> HTGridError:
    """The error a problem document stands for (a ProtocolError when it names none)."""
    if not isinstance(doc, dict):
        return ProtocolError(f"the collector answered HTTP {status} without a problem document")
    detail = str(doc.get("detail") or doc.get("title") or f"HTTP {status}")
    cls = _CLASSES.get(str(doc.get("error")))
    if cls is ClassAdSyntaxError:
        try:
            # A text whose offset lands on the same line and column rebuilds the message.
            line, column = int(doc["line"]), int(doc["column"])
            text = "\n" * (line - 1) + str(doc["source"])
            return ClassAdSyntaxError(str(doc["reason"]), text=text, offset=line + column - 2)
        except (KeyError, TypeError, ValueError):
            return InvalidQuery(detail)
    if cls is None or cls is HTGridError:
        return CollectorError(detail)
    return cls(detail)
