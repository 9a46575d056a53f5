"""Construction-time checks for the event dataclasses: field types, C integer ranges."""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import fields
from typing import Annotated, Any, TypeAlias

from htgrid.eventlog._values import AdValue, EventLogError

__all__ = ["IDENTIFIER", "MAX_TIMESTAMP", "Checked", "Int64", "freeze"]

# HTCondor prints most numbers with %d (a C int); sizes with %lld.
_INT64 = "int64"
Int64: TypeAlias = Annotated[int, _INT64]
_INT_BITS = {32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}
# The header prints a four-digit year: keep timestamps before year 10000.
MAX_TIMESTAMP = 253402300800
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _int(where: str, value: Any, bits: int) -> int:
    low, high = _INT_BITS[bits]
    if isinstance(value, bool) or not isinstance(value, int):
        raise EventLogError(f"{where}: expected an integer, got {value!r}")
    if not low <= value <= high:
        raise EventLogError(f"{where}: {value} does not fit a {bits}-bit integer")
    return value


def _real(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EventLogError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise EventLogError(f"{where}: expected a finite number >= 0, got {value!r}")
    return value


def _coerce(where: str, hint: Any, value: Any) -> Any:
    """Check `value` against the field type `hint`; return it, sequences made tuples."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *meta = typing.get_args(hint)
        return _int(where, value, 64) if _INT64 in meta else _coerce(where, base, value)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is not type(None):
                try:
                    return _coerce(where, arg, value)
                except EventLogError:
                    pass
        raise EventLogError(f"{where}: expected {_describe(hint)}, got {value!r}")
    if origin in (tuple, Sequence):
        item = typing.get_args(hint)[0]
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise EventLogError(f"{where}: expected a sequence, got {value!r}")
        return tuple(_coerce(f"{where}[{i}]", item, v) for i, v in enumerate(value))
    if hint is int:
        return _int(where, value, 32)
    if hint is float:
        return _real(where, value)
    if isinstance(hint, type):  # bool, str, Rusage, ResourceUsage
        if not isinstance(value, hint):
            raise EventLogError(f"{where}: expected {hint.__name__}, got {value!r}")
        return value
    return value  # mappings: their class checks them


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) is Annotated:
        return "an integer"
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    return {int: "an integer", float: "a number", type(None): "None"}.get(hint, str(hint))


def freeze(value: AdValue) -> AdValue:
    """`value` with every list made a tuple, so an event cannot change after it is built."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(freeze(item) for item in value)
    return value


_HINTS: dict[type, dict[str, Any]] = {}


class Checked:
    """Type-checks every dataclass field on construction, then runs `_validate`."""

    def __post_init__(self) -> None:
        cls = type(self)
        hints = _HINTS.get(cls)
        if hints is None:
            hints = _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            checked = _coerce(f"{cls.__name__}.{f.name}", hints[f.name], value)
            if checked is not value:
                object.__setattr__(self, f.name, checked)
        self._validate()

    def _validate(self) -> None:
        """Checks that involve more than one field's type."""

    def _fail(self, message: str) -> typing.NoReturn:
        raise EventLogError(f"{type(self).__name__}: {message}")
