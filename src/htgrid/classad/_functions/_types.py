"""Type predicates, conversions (int real string bool absTime relTime) and ifThenElse."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from htgrid.classad._ad import AdBase
from htgrid.classad._functions._convert import (
    c_int,
    c_trunc32,
    c_trunc64,
    local_offset,
    to_int,
    to_real,
    to_str,
)
from htgrid.classad._functions._registry import builtin
from htgrid.classad._state import eval_in
from htgrid.classad._values import ERROR, UNDEFINED, AbsTime, ListValue, RelTime

if TYPE_CHECKING:
    from htgrid.classad._ast import Node
    from htgrid.classad._state import EvalState
    from htgrid.classad._values import Val

__all__: list[str] = []


def _is_classad(v: object) -> bool:
    return isinstance(v, AdBase)


def _type_test(name: str, test: Any) -> None:
    def fn(state: EvalState, *args: Val) -> Val:
        if len(args) != 1:
            return ERROR
        return bool(test(args[0]))

    fn.__name__ = name
    fn.__doc__ = f"`{name}(x)`: a type test; never undefined."
    builtin(name)(fn)


_type_test("isUndefined", lambda v: v is UNDEFINED)
_type_test("isError", lambda v: v is ERROR)
_type_test("isString", lambda v: type(v) is str)
_type_test("isInteger", lambda v: type(v) is int)
_type_test("isReal", lambda v: type(v) is float)
_type_test("isBoolean", lambda v: type(v) is bool)
_type_test("isList", lambda v: type(v) is ListValue)
_type_test("isClassAd", _is_classad)
_type_test("isAbstime", lambda v: type(v) is AbsTime)
_type_test("isReltime", lambda v: type(v) is RelTime)


@builtin("int")
def _int(state: EvalState, *args: Val) -> Val:
    """`int(x)`: truncating conversion; strings go through strtod."""
    if len(args) != 1:
        return ERROR
    return to_int(args[0])


@builtin("real")
def _real(state: EvalState, *args: Val) -> Val:
    """`real(x)`: conversion to a real; strings go through strtod."""
    if len(args) != 1:
        return ERROR
    return to_real(args[0])


@builtin("string")
def _string(state: EvalState, *args: Val) -> Val:
    """`string(x)`: the value as text (unparsed for non-strings)."""
    if len(args) != 1:
        return ERROR
    return to_str(args[0])


@builtin("bool")
def _bool(state: EvalState, *args: Val) -> Val:
    """`bool(x)`: numbers by truth, "true"/"false" in any case, else undefined."""
    if len(args) != 1:
        return ERROR
    v = args[0]
    t = type(v)
    if t is bool:
        return v
    if t is int or t is float:
        return v != 0
    if t is str:
        low = v.lower()  # type: ignore[union-attr]
        if low == "false":
            return False
        if low == "true":
            return True
        return UNDEFINED
    if t is RelTime:
        return c_trunc64(v.secs) != 0  # type: ignore[union-attr]
    if v is UNDEFINED:
        return UNDEFINED
    return ERROR


def current_abstime() -> AbsTime:
    """The current time, with the local zone's offset (what `absTime()` gives)."""
    now = int(time.time())
    return AbsTime(now, local_offset(now))


def _offset_arg(v: Val) -> int | None:
    """absTime's second argument: int, real or reltime seconds, as a C int."""
    t = type(v)
    if t is int:
        return c_int(v)  # type: ignore[arg-type]
    if t is float:
        return c_trunc32(v)  # type: ignore[arg-type]
    if t is RelTime:
        return c_int(c_trunc64(v.secs))  # type: ignore[union-attr]
    return None


@builtin("absTime", pure=False)
def _abstime(state: EvalState, *args: Val) -> Val:
    """`absTime([t [, offset]])`: build an absolute time."""
    n = len(args)
    if n == 0:
        return current_abstime()
    if n > 2:
        return ERROR
    v = args[0]
    offset: int | None = None
    if n == 2:
        offset = _offset_arg(args[1])
        if offset is None:
            return ERROR
    t = type(v)
    if t is int:
        secs = c_int(v)  # type: ignore[arg-type]
        if offset is None:
            offset = local_offset(secs)
        if offset == -1:
            # libclassad treats -1 as "no offset" and fails the evaluation.
            return ERROR
        return AbsTime(secs, offset)
    if t is float:
        secs = c_trunc32(v)  # type: ignore[arg-type]
        return AbsTime(secs, local_offset(secs) if offset is None else offset)
    if t is RelTime:
        secs = c_trunc64(v.secs)  # type: ignore[union-attr]
        return AbsTime(secs, local_offset(secs) if offset is None else offset)
    if t is AbsTime or t is str:
        # A string here was not a literal (those fold at parse time); the C code
        # falls through to its abstime case and hands the value back unchanged.
        return v
    if v is UNDEFINED:
        return UNDEFINED
    return ERROR


@builtin("relTime")
def _reltime(state: EvalState, *args: Val) -> Val:
    """`relTime(t)`: build a relative time."""
    if len(args) != 1:
        return ERROR
    v = args[0]
    t = type(v)
    if t is int:
        return RelTime(float(c_int(v)))  # type: ignore[arg-type]
    if t is float:
        return RelTime(v)  # type: ignore[arg-type]
    if t is RelTime:
        return v
    if t is AbsTime:
        return RelTime(float(c_trunc64(v.secs)))  # type: ignore[union-attr]
    if t is str:
        # Falls through to the abstime case in C with zero seconds.
        return RelTime(0.0)
    if v is UNDEFINED:
        return UNDEFINED
    return ERROR


@builtin("ifThenElse", lazy=True)
def _if_then_else(state: EvalState, *nodes: Node) -> Val:
    """`ifThenElse(c, a, b)`: lazy; c must be a bool or number."""
    if len(nodes) != 3:
        return ERROR
    c = eval_in(nodes[0], state)
    t = type(c)
    if t is bool or t is int or t is float:
        return eval_in(nodes[1] if c else nodes[2], state)
    if c is UNDEFINED:
        return UNDEFINED
    return ERROR
