"""The error of the event log, and values in old ClassAd syntax as the job ad event (028) has them.

HTCondor prints these values with its old-syntax unparser.

Readers turn each line back into a new-syntax expression by doubling every backslash,
except one that stands before a quote which is not the line's last character: that
pair stays an escaped quote. So a string may hold quotes and backslashes freely, but
a newline breaks the line, and a trailing backslash survives only when its closing
quote ends the line (a top-level value, not a list item). Those are refused rather
than written wrong.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from htgrid.errors import HTGridError

__all__ = ["AdValue", "EventLogError", "RawExpression", "old_syntax"]


class EventLogError(HTGridError):
    """A job event could not be built or written to its log."""


EventLogError.__module__ = "htgrid.eventlog"

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class RawExpression:
    """A ClassAd expression already in old syntax (e.g. `RequestMemory * 2`), written verbatim."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise EventLogError("a RawExpression needs non-blank text")
        if any(ch in self.text for ch in "\r\n\0"):
            raise EventLogError(f"a RawExpression must be one line: {self.text!r}")


AdValue: TypeAlias = bool | int | float | str | RawExpression | Sequence["AdValue"] | None

_LINE_BREAKERS = re.compile(r"[\r\n\0]")


def _string(s: str, last_on_line: bool) -> str:
    if _LINE_BREAKERS.search(s):
        raise EventLogError(f"{s!r} cannot be written in old ClassAd syntax: it breaks the line")
    if s.endswith("\\") and not last_on_line:
        raise EventLogError(
            f"{s!r} cannot be written in old ClassAd syntax: "
            "a trailing backslash would escape the closing quote"
        )
    return '"' + s.replace('"', '\\"') + '"'


def _real(x: float) -> str:
    if math.isnan(x):
        return 'real("NaN")'
    if math.isinf(x):
        return 'real("INF")' if x > 0 else 'real("-INF")'
    if x == 0.0:
        return f"{x:.1f}"  # keeps the sign of -0.0, as printf does
    text = f"{x:.16G}"  # what printf("%.16G") prints
    # %G may look like an integer; the unparser adds ".0" so it stays a real.
    if not any(c in text for c in ".Ee"):
        text += ".0"
    return text


def old_syntax(value: AdValue, *, last_on_line: bool = True) -> str:
    """The old-syntax text of `value`; EventLogError if it has none that reads back the same.

    `last_on_line` says the text ends its line, as an attribute's value does.
    """
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise EventLogError(f"{value} does not fit a ClassAd integer (64 bits)")
        return str(value)
    if isinstance(value, float):
        return _real(value)
    if isinstance(value, str):
        return _string(value, last_on_line)
    if isinstance(value, RawExpression):
        return value.text
    if isinstance(value, Sequence):
        items = (old_syntax(item, last_on_line=False) for item in value)
        return "{ " + ",".join(items) + " }"
    raise EventLogError(f"{value!r} ({type(value).__name__}) has no ClassAd form")
