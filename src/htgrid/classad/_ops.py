"""The strict operators on values, as operators.cpp defines them in HTCondor mode.

ERROR in either operand wins over UNDEFINED, which wins over everything else.
Booleans count as 0/1 in arithmetic and comparison but not in bitwise operators.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from htgrid.classad._ad import AdBase
from htgrid.classad._values import (
    ERROR,
    INT64_MAX,
    INT64_MIN,
    UNDEFINED,
    AbsTime,
    ListValue,
    RelTime,
    Val,
    wrap64,
)

__all__ = ["BINARY_OPS", "UNARY_OPS", "fold", "identical", "truth"]

_INF: Final = math.inf


_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(s: str) -> str:
    """A string as strcasecmp compares it: ASCII letters folded, nothing else."""
    return s.lower() if s.isascii() else s.translate(_ASCII_LOWER)


def _special(a: Val, b: Val) -> Val | None:
    """ERROR or UNDEFINED when an operand is one of them (ERROR first), else None."""
    if a is ERROR or b is ERROR:
        return ERROR
    if a is UNDEFINED or b is UNDEFINED:
        return UNDEFINED
    return None


def _real(x: float) -> Val:
    # HTCondor refuses a real result of +infinity (overflow or x/0) but keeps -inf and NaN.
    return ERROR if x == _INF else x


def _num(v: Val) -> int | float | None:
    t = type(v)
    if t is int or t is float:
        return v  # type: ignore[return-value]
    if t is bool:
        return int(v)  # type: ignore[arg-type]
    return None


def _arith(op: str, a: Any, b: Any) -> Val:
    s = _special(a, b)
    if s is not None:
        return s
    ta, tb = type(a), type(b)
    if ta is AbsTime or tb is AbsTime or ta is RelTime or tb is RelTime:
        return _time_arith(op, a, b)
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return ERROR
    if type(x) is int and type(y) is int:
        if op == "+":
            return wrap64(x + y)
        if op == "-":
            return wrap64(x - y)
        if op == "*":
            return wrap64(x * y)
        if y == 0:
            return ERROR
        if x == INT64_MIN and y == -1:
            return INT64_MAX if op == "/" else 0
        q = abs(x) // abs(y)
        if (x < 0) != (y < 0):
            q = -q
        return q if op == "/" else x - q * y
    fx, fy = float(x), float(y)
    if op == "+":
        return _real(fx + fy)
    if op == "-":
        return _real(fx - fy)
    if op == "*":
        return _real(fx * fy)
    if op == "/":
        return _real(_ieee_div(fx, fy))
    return ERROR  # % on reals


def _time_arith(op: str, a: Any, b: Any) -> Val:
    # Only the combinations operators.cpp's doTimeArithmetic lists; bools are not numbers here.
    ta, tb = type(a), type(b)
    if op == "+":
        if ta is AbsTime and tb is RelTime:
            return AbsTime(a.secs + int(b.secs), a.offset)
        if ta is RelTime and tb is AbsTime:
            return AbsTime(b.secs + int(a.secs), b.offset)
        if ta is RelTime and tb is RelTime:
            return RelTime(a.secs + b.secs)
    elif op == "-":
        if ta is AbsTime and tb is AbsTime:
            return RelTime(float(a.secs - b.secs))
        if ta is AbsTime and tb is RelTime:
            return AbsTime(a.secs - int(b.secs), a.offset)
        if ta is RelTime and tb is RelTime:
            return RelTime(a.secs - b.secs)
    elif op == "*" or op == "/":
        if ta is RelTime and (tb is int or tb is float):
            x: float = a.secs
            y = float(b)
            return RelTime(x * y if op == "*" else _ieee_div(x, y))
        if op == "*" and tb is RelTime and (ta is int or ta is float):
            return RelTime(a * b.secs)
    return ERROR


def _ieee_div(x: float, y: float) -> float:
    """C's double division: by zero gives an infinity or NaN instead of an exception."""
    if y == 0.0:
        if x == 0.0 or math.isnan(x):
            return math.nan
        return math.copysign(_INF, x) * math.copysign(1.0, y)
    return x / y


def _make_arith(op: str) -> Callable[[Val, Val], Val]:
    def fn(a: Any, b: Any) -> Val:
        ta, tb = type(a), type(b)
        if ta is int and tb is int and op != "/" and op != "%":
            r = a + b if op == "+" else a - b if op == "-" else a * b
            return r if INT64_MIN <= r <= INT64_MAX else wrap64(r)
        return _arith(op, a, b)

    return fn


def _order(a: Any, b: Any) -> Any:
    """The two operands as comparable Python values, or the ERROR/UNDEFINED result."""
    s = _special(a, b)
    if s is not None:
        return s
    ta, tb = type(a), type(b)
    if ta is str and tb is str:
        return fold(a), fold(b)
    x, y = _num(a), _num(b)
    if x is not None and y is not None:
        return x, y
    if ta is AbsTime and tb is AbsTime:
        return a.secs, b.secs
    if ta is RelTime and tb is RelTime:
        return a.secs, b.secs
    return ERROR


def op_eq(a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is type(b) and (ta is int or ta is str or ta is float):
        return a == b if ta is not str else fold(a) == fold(b)
    r = _order(a, b)
    return r[0] == r[1] if type(r) is tuple else r


def op_ne(a: Val, b: Val) -> Val:
    r = op_eq(a, b)
    return (not r) if type(r) is bool else r


def op_lt(a: Any, b: Any) -> Any:
    r = _order(a, b)
    return r[0] < r[1] if type(r) is tuple else r


def op_le(a: Any, b: Any) -> Any:
    r = _order(a, b)
    return r[0] <= r[1] if type(r) is tuple else r


def op_gt(a: Any, b: Any) -> Any:
    r = _order(a, b)
    return r[0] > r[1] if type(r) is tuple else r


def op_ge(a: Any, b: Any) -> Any:
    r = _order(a, b)
    return r[0] >= r[1] if type(r) is tuple else r


def identical(a: Any, b: Any) -> Any:
    """`a =?= b`: same type and value, strings case-sensitively; two lists or ads are ERROR."""
    ta, tb = type(a), type(b)
    if ta is not tb:
        if isinstance(a, AdBase) and isinstance(b, AdBase):
            return ERROR
        return False
    if ta is ListValue:
        return ERROR
    if ta is AbsTime:
        return a.secs == b.secs and a.offset == b.offset
    if ta is RelTime:
        return a.secs == b.secs
    if isinstance(a, AdBase):
        return ERROR
    return a is b if (a is UNDEFINED or a is ERROR) else a == b


def op_isnt(a: Val, b: Val) -> Val:
    r = identical(a, b)
    return (not r) if type(r) is bool else r


def _make_bitwise(op: str) -> Callable[[Val, Val], Val]:
    def fn(a: Any, b: Any) -> Val:
        s = _special(a, b)
        if s is not None:
            return s
        if type(a) is not int or type(b) is not int:
            return ERROR
        x: int = a
        y: int = b
        if op == "&":
            return x & y
        if op == "|":
            return x | y
        if op == "^":
            return x ^ y
        # As operators.cpp does it, on x86-64 where a shift count is taken modulo 64.
        if op == "<<":
            return wrap64(x << (y & 63))
        if x >= 0:
            return x >> (y & 63)
        if op == ">>":
            # A loop of one-bit shifts that keep the sign, min(64, count) times.
            return -1 if y >= 64 else (x >> y if y > 0 else x)
        return ((x >> 1) & INT64_MAX) >> ((y - 1) & 63)  # >>> of a negative number

    return fn


BINARY_OPS: Final[dict[str, Callable[[Val, Val], Val]]] = {
    "+": _make_arith("+"),
    "-": _make_arith("-"),
    "*": _make_arith("*"),
    "/": _make_arith("/"),
    "%": _make_arith("%"),
    "==": op_eq,
    "!=": op_ne,
    "<": op_lt,
    "<=": op_le,
    ">": op_gt,
    ">=": op_ge,
    "=?=": identical,
    "=!=": op_isnt,
    "is": identical,
    "isnt": op_isnt,
    "&": _make_bitwise("&"),
    "|": _make_bitwise("|"),
    "^": _make_bitwise("^"),
    "<<": _make_bitwise("<<"),
    ">>": _make_bitwise(">>"),
    ">>>": _make_bitwise(">>>"),
}


def truth(v: Val) -> Val:
    """A value as a logical operand: a bool, UNDEFINED, or ERROR (strings, lists, ads)."""
    t = type(v)
    if t is bool:
        return v
    if t is int or t is float:
        return v != 0
    if v is UNDEFINED:
        return UNDEFINED
    return ERROR


def _neg(v: Any) -> Any:
    t = type(v)
    if t is int:
        return wrap64(-v)
    if t is float:
        return -v
    if t is RelTime:
        return RelTime(-v.secs)
    if v is UNDEFINED:
        return UNDEFINED
    return ERROR


def _pos(v: Any) -> Any:
    t = type(v)
    if t is int or t is float or t is RelTime or v is UNDEFINED:
        return v
    return ERROR


def _inv(v: Any) -> Any:
    if type(v) is int:
        return ~v
    if v is UNDEFINED:
        return UNDEFINED
    return ERROR


def _not(v: Val) -> Val:
    r = truth(v)
    return (not r) if type(r) is bool else r


UNARY_OPS: Final[dict[str, Callable[[Val], Val]]] = {
    "-": _neg,
    "+": _pos,
    "~": _inv,
    "!": _not,
}
