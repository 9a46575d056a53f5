"""Math functions: floor ceiling round pow quantize random sum avg min max."""

from __future__ import annotations

import math
import random as _random
from typing import TYPE_CHECKING

from htgrid.classad._functions._convert import c_int, c_trunc64, cdiv, to_real
from htgrid.classad._functions._registry import builtin
from htgrid.classad._ops import BINARY_OPS
from htgrid.classad._values import ERROR, UNDEFINED, ListValue, wrap64

if TYPE_CHECKING:
    from collections.abc import Callable

    from htgrid.classad._state import EvalState
    from htgrid.classad._values import Val

__all__ = ["c_pow"]


def _rounder(name: str, op: Callable[[float], float]) -> None:
    def fn(state: EvalState, *args: Val) -> Val:
        if len(args) != 1:
            return ERROR
        v = args[0]
        if type(v) is int:
            return v
        r = to_real(v)
        if type(r) is not float:
            return ERROR
        try:
            return c_trunc64(op(r))
        except (OverflowError, ValueError):
            return c_trunc64(math.nan)

    fn.__name__ = name
    fn.__doc__ = f"`{name}(x)`: an int; non-ints go through real() first."
    builtin(name)(fn)


def _c_floor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) else x


def _c_ceil(x: float) -> float:
    return float(math.ceil(x)) if math.isfinite(x) else x


def _c_rint(x: float) -> float:
    # rint in the default rounding mode rounds half to even, as round() does.
    return float(round(x)) if math.isfinite(x) else x


_rounder("floor", _c_floor)
_rounder("ceiling", _c_ceil)
_rounder("ceil", _c_ceil)
_rounder("round", _c_rint)


def c_pow(b: float, e: float) -> float:
    """C `pow`, returning inf/nan where Python's math.pow raises."""
    try:
        return math.pow(b, e)
    except OverflowError:
        neg = b < 0 and e == math.floor(e) and int(e) % 2 == 1
        return -math.inf if neg else math.inf
    except ValueError:
        if b == 0:
            odd = e == math.floor(e) and int(e) % 2 == 1
            return math.copysign(math.inf, b) if odd else math.inf
        return math.nan


@builtin("pow")
def _pow(state: EvalState, *args: Val) -> Val:
    """`pow(b, e)`: int for int b and int e >= 0 (computed in doubles, as in C), else real."""
    if len(args) != 2:
        return ERROR
    b, e = args
    if type(b) is int and type(e) is int and e >= 0:
        return c_trunc64(c_pow(float(b), float(e)) + 0.5)
    rb = to_real(b)
    re_ = to_real(e)
    if type(rb) is not float or type(re_) is not float:
        return ERROR
    return c_pow(rb, re_)


@builtin("quantize")
def _quantize(state: EvalState, *args: Val) -> Val:
    """`quantize(a, b)`: the smallest multiple of b (or first list item) not below a."""
    if len(args) != 2:
        return ERROR
    a, base = args
    rval = to_real(a)
    if type(rval) is not float:
        return ERROR
    rbase: float
    if type(base) is ListValue:
        last: Val = 0.0
        for item in base.values():
            r = to_real(item)
            if type(r) is not float:
                return ERROR
            if r >= rval:
                return item
            last = item
        base = last
        r = to_real(base)
        rbase = r if type(r) is float else 0.0
    else:
        r = to_real(base)
        if type(r) is not float:
            return ERROR
        rbase = r
    if type(base) is int:
        ibase: int = base
        if ibase == 0:
            return a
        if type(a) is int:
            return wrap64(cdiv(wrap64(a + ibase - 1), ibase) * ibase)
        return _ceil_mul(rval, float(ibase))
    if -1e-8 <= rbase <= 1e-8:
        return a
    return _ceil_mul(rval, rbase)


def _ceil_mul(x: float, b: float) -> float:
    """C `ceil(x / b) * b`, keeping the sign of a zero quotient as C's ceil does."""
    q = x / b
    if math.isfinite(q):
        c = float(math.ceil(q))
        q = math.copysign(0.0, q) if c == 0 else c
    return q * b


@builtin("random", pure=False)
def _random_fn(state: EvalState, *args: Val) -> Val:
    """`random([x])`: an int in [0, x) for int x, a real in [0, x) for real x."""
    if len(args) > 1:
        return ERROR
    x: Val = args[0] if args else 1.0
    if type(x) is int:
        n = c_int(x)
        if n <= 0:
            return ERROR
        return _random.randrange(1 << 31) % n
    if type(x) is float:
        if not x > 0:
            return ERROR
        return x * _random.random()
    return ERROR


def _numbers(args: tuple[Val, ...]) -> list[Val] | Val:
    """The numeric items of sum/avg/min/max's list argument (UNDEFINED skipped), or a value."""
    if len(args) != 1:
        return ERROR
    lst = args[0]
    if type(lst) is not ListValue:
        return UNDEFINED if lst is UNDEFINED else ERROR
    out: list[Val] = []
    for v in lst.values():
        t = type(v)
        if t is int or t is float or t is bool:
            out.append(v)
        elif v is not UNDEFINED:
            return ERROR
    return out


def _total(nums: list[Val]) -> Val:
    """The items added up with the `+` operator (so an overflow to +inf is ERROR)."""
    add = BINARY_OPS["+"]
    total = nums[0]
    for v in nums[1:]:
        total = add(total, v)
    return total


@builtin("sum")
def _sum(state: EvalState, *args: Val) -> Val:
    """`sum(list)`: undefined items skipped; the first item keeps its type when alone."""
    nums = _numbers(args)
    if type(nums) is not list:
        return nums  # type: ignore[return-value]
    if not nums:
        return 0
    return _total(nums)


@builtin("avg")
def _avg(state: EvalState, *args: Val) -> Val:
    """`avg(list)`: a real (0 for an empty list)."""
    nums = _numbers(args)
    if type(nums) is not list:
        return nums  # type: ignore[return-value]
    if not nums:
        return 0
    return BINARY_OPS["/"](_total(nums), float(len(nums)))


def _bound(args: tuple[Val, ...], smaller: bool) -> Val:
    nums = _numbers(args)
    if type(nums) is not list:
        return nums  # type: ignore[return-value]
    if not nums:
        return UNDEFINED
    best = nums[0]
    if len(nums) == 1:
        return best
    any_real = type(best) is float
    for v in nums[1:]:
        if type(v) is float:
            any_real = True
        # C comparisons: NaN never wins, ties keep the earlier item.
        if (v < best) if smaller else (v > best):  # type: ignore[operator]
            best = v
    return float(best) if any_real else int(best)  # type: ignore[arg-type]


@builtin("min")
def _min(state: EvalState, *args: Val) -> Val:
    """`min(list)`: undefined items skipped; real if any item is real."""
    return _bound(args, True)


@builtin("max")
def _max(state: EvalState, *args: Val) -> Val:
    """`max(list)`: undefined items skipped; real if any item is real."""
    return _bound(args, False)
