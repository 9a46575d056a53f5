"""Errors as RFC 9457 problem documents, and back.

    {"type": "urn:htgrid:problem:job-not-found", "title": "No such job in the queue.",
     "status": 404, "detail": "job 12.0 is not in the queue", "error": "JobNotFound"}

A `ClassAdSyntaxError` also carries `reason`, `line`, `column`, `source` and `origin`,
and a `SubmitError` its `reason`, `path` and `line`, so the client can raise an error
that points at the same place as the daemon's.
"""

from __future__ import annotations

import re
from typing import Any

from htgrid.errors import ClassAdSyntaxError, HTGridError
from htgrid.net._errors import PROBLEMS, ApiError, status_of
from htgrid.submit import SubmitError

__all__ = ["from_problem", "to_problem"]

_CLASSES = {cls.__name__: cls for cls, _ in PROBLEMS}


def _slug(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def to_problem(error: HTGridError) -> dict[str, Any]:
    """The problem document of an error (its status in `status`)."""
    cls = type(error)
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
        doc.update(
            reason=error.reason,
            line=error.line,
            column=error.column,
            source=error.source,
            origin=error.origin,
        )
    elif isinstance(error, SubmitError):
        doc.update(reason=error.reason, path=error.path, line=error.line)
    return doc


def from_problem(status: int, doc: object) -> HTGridError:
    """The error a problem document stands for (ApiError when it names no known class)."""
    if not isinstance(doc, dict):
        return ApiError(
            f"the daemon answered HTTP {status} without a problem document", status=status
        )
    detail = str(doc.get("detail") or doc.get("title") or f"HTTP {status}")
    cls = _CLASSES.get(str(doc.get("error")))
    if cls is None or cls is ApiError:
        return ApiError(detail, status=status)
    try:
        if cls is ClassAdSyntaxError:
            return _syntax_error(doc)
        if cls is SubmitError:
            return SubmitError(str(doc["reason"]), path=doc.get("path"), line=int(doc["line"]))
    except (KeyError, TypeError, ValueError):
        return ApiError(detail, status=status)
    return cls(detail)


def _syntax_error(doc: dict[str, Any]) -> ClassAdSyntaxError:
    # Rebuild a text whose offset lands on the same line and column, so the message
    # (with its caret excerpt) is the one the daemon made.
    line, column = int(doc["line"]), int(doc["column"])
    text = "\n" * (line - 1) + str(doc["source"])
    return ClassAdSyntaxError(
        str(doc["reason"]),
        text=text,
        offset=line - 1 + column - 1,
        origin=str(doc.get("origin") or ""),
    )
