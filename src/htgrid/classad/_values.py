"""ClassAd values as the evaluator sees them.

A value is one of: `UNDEFINED`, `ERROR` (the two `Value` members), `bool`, `int` (64-bit,
wrapping), `float`, `str`, `ListValue`, a ClassAd, `AbsTime` or `RelTime`. Python's `bool`
is a subclass of `int`, so type tests here always use `type(v) is int`, never isinstance.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from htgrid.classad._ast import Literal
from htgrid.classad._state import charge, eval_in

if TYPE_CHECKING:
    from htgrid.classad._ast import Node
    from htgrid.classad._classad import ClassAd
    from htgrid.classad._state import EvalState

__all__ = [
    "ERROR",
    "INT64_MAX",
    "INT64_MIN",
    "UNDEFINED",
    "AbsTime",
    "ListValue",
    "RelTime",
    "Val",
    "Value",
    "is_number",
    "wrap64",
]


class Value(enum.IntEnum):
    """The two special ClassAd values, as classad2 names them.

    Neither is true as a condition (`if ad.eval("x"):`), as in the version-1 module
    (classad2's are true, being non-zero ints).
    """

    Error = 1 << 0
    Undefined = 1 << 1

    def __bool__(self) -> bool:
        return False


UNDEFINED = Value.Undefined
ERROR = Value.Error

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_MASK64 = (1 << 64) - 1


def wrap64(n: int) -> int:
    """Wrap an integer to a signed 64-bit value, as C's int64 arithmetic does."""
    if INT64_MIN <= n <= INT64_MAX:
        return n
    n &= _MASK64
    return n - (1 << 64) if n > INT64_MAX else n


@dataclass(frozen=True, slots=True)
class AbsTime:
    """An absolute time: seconds since the epoch (UTC) and the zone's offset in seconds."""

    secs: float
    offset: int = 0


@dataclass(frozen=True, slots=True)
class RelTime:
    """A relative time (a duration) in seconds."""

    secs: float


class ListValue:
    """A list value: item expressions, evaluated on access in the scope the list came from.

    `items` are AST nodes; `state` is the evaluation state the list literal was evaluated
    in (None for lists built from plain values, whose items are literals).
    """

    __slots__ = ("_cache", "items", "state")

    def __init__(self, items: tuple[Node, ...], state: EvalState | None) -> None:
        self.items = items
        self.state = state
        self._cache: list[Val] | None = None

    @classmethod
    def from_values(cls, values: list[Val]) -> ListValue:
        """A list of values already computed (a function's result, a Python list)."""
        lv = cls(tuple(Literal(v) for v in values), None)
        lv._cache = list(values)
        return lv

    def values(self) -> list[Val]:
        """The items' values, evaluated in the list's own scope."""
        cache = self._cache
        if cache is None:
            state = self.state
            if state is not None:
                charge(state, len(self.items))  # an evaluation's steps, as attributes are
            cache = [eval_in(node, state) for node in self.items]
            self._cache = cache
        return cache

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"ListValue({self.items!r})"


Val: TypeAlias = "Value | bool | int | float | str | ListValue | ClassAd | AbsTime | RelTime"


def is_number(v: Any) -> bool:
    """True for int, float and bool: the values arithmetic and comparison accept."""
    t = type(v)
    return t is int or t is float or t is bool


def real_is_integral(x: float) -> bool:
    return math.isfinite(x) and x == math.floor(x)
