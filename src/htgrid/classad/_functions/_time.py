"""Time functions: time currentTime timeZoneOffset dayTime get* splitTime formatTime interval."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from htgrid.classad._ad import AdBase
from htgrid.classad._ast import Literal
from htgrid.classad._classad import ClassAd
from htgrid.classad._functions._convert import (
    c_int,
    c_trunc32,
    c_trunc64,
    cdiv,
    cmod,
    local_offset,
    to_int,
)
from htgrid.classad._functions._registry import builtin
from htgrid.classad._functions._types import current_abstime
from htgrid.classad._lookup import eval_apart
from htgrid.classad._state import EvalState
from htgrid.classad._values import ERROR, UNDEFINED, AbsTime, RelTime

if TYPE_CHECKING:
    from htgrid.classad._values import Val

__all__: list[str] = []


@builtin("time", pure=False)
def _time(state: EvalState, *args: Val) -> Val:
    """`time()`: seconds since the epoch, an int."""
    if args:
        return ERROR
    return int(time.time())


@builtin("currentTime", pure=False)
def _current_time(state: EvalState, *args: Val) -> Val:
    """`currentTime()`: now as an absolute time in the local zone."""
    if args:
        return ERROR
    return current_abstime()


@builtin("timeZoneOffset", pure=False)
def _time_zone_offset(state: EvalState, *args: Val) -> Val:
    """`timeZoneOffset()`: the local zone's offset from UTC now, a relative time."""
    if args:
        return ERROR
    return RelTime(float(local_offset(time.time())))


@builtin("dayTime", pure=False)
def _day_time(state: EvalState, *args: Val) -> Val:
    """`dayTime()`: seconds since local midnight, a relative time."""
    if args:
        return ERROR
    lt = time.localtime()
    return RelTime(float(lt.tm_hour * 3600 + lt.tm_min * 60 + lt.tm_sec))


def _local(secs: int) -> time.struct_time | None:
    try:
        return time.localtime(secs)
    except (OverflowError, OSError, ValueError):
        return None


def _abs_field(name: str, pick: object) -> None:
    def fn(state: EvalState, *args: Val) -> Val:
        if len(args) != 1:
            return ERROR
        v = args[0]
        if type(v) is AbsTime:
            # libclassad reads the fields in the local zone, ignoring the value's offset.
            tm = _local(c_trunc64(v.secs))
            return ERROR if tm is None else pick(tm)  # type: ignore[operator]
        return ERROR

    fn.__name__ = name
    fn.__doc__ = f"`{name}(t)`: a field of an absolute time (local zone)."
    builtin(name, pure=False)(fn)


_abs_field("getYear", lambda tm: tm.tm_year)
_abs_field("getMonth", lambda tm: tm.tm_mon)
_abs_field("getDayOfYear", lambda tm: tm.tm_yday - 1)
_abs_field("getDayOfMonth", lambda tm: tm.tm_mday)
_abs_field("getDayOfWeek", lambda tm: (tm.tm_wday + 1) % 7)


def _both_field(name: str, pick: object, rel: object) -> None:
    def fn(state: EvalState, *args: Val) -> Val:
        if len(args) != 1:
            return ERROR
        v = args[0]
        if type(v) is AbsTime:
            tm = _local(c_trunc64(v.secs))
            return ERROR if tm is None else pick(tm)  # type: ignore[operator]
        if type(v) is RelTime:
            return rel(c_trunc64(v.secs))  # type: ignore[no-any-return,operator]
        return ERROR

    fn.__name__ = name
    fn.__doc__ = f"`{name}(t)`: a field of an absolute or relative time."
    builtin(name, pure=False)(fn)


_both_field("getHours", lambda tm: tm.tm_hour, lambda s: cdiv(cmod(s, 86400), 3600))
_both_field("getMinutes", lambda tm: tm.tm_min, lambda s: cdiv(cmod(s, 3600), 60))
_both_field("getSeconds", lambda tm: tm.tm_sec, lambda s: cmod(s, 60))


@builtin("getDays")
def _get_days(state: EvalState, *args: Val) -> Val:
    """`getDays(t)`: whole days of a relative time."""
    if len(args) != 1:
        return ERROR
    v = args[0]
    if type(v) is RelTime:
        return cdiv(c_trunc64(v.secs), 86400)
    return ERROR


def _abs_fields(secs: int, offset: int) -> dict[str, Val] | None:
    try:
        tm = time.gmtime(secs + offset)
    except (OverflowError, OSError, ValueError):
        return None
    return {
        "Type": "AbsoluteTime",
        "Year": tm.tm_year,
        "Month": tm.tm_mon,
        "Day": tm.tm_mday,
        "Hours": tm.tm_hour,
        "Minutes": tm.tm_min,
        "Seconds": tm.tm_sec,
        "Offset": offset,
    }


def _rel_fields(rsecs: float) -> dict[str, Val]:
    neg = rsecs < 0
    if neg:
        rsecs = -rsecs
    whole = c_trunc32(rsecs)
    hrs = cmod(whole, 86400)
    mins = cmod(hrs, 3600)
    secs = cmod(mins, 60) + (rsecs - math.floor(rsecs))
    days = cdiv(whole, 86400)
    hrs = cdiv(hrs, 3600)
    mins = cdiv(mins, 60)
    if neg:
        if days > 0:
            days = -days
        elif hrs > 0:
            hrs = -hrs
        elif mins > 0:
            mins = -mins
        else:
            secs = -secs
    return {"Type": "RelativeTime", "Days": days, "Hours": hrs, "Minutes": mins, "Seconds": secs}


def _split_fields(v: Val) -> dict[str, Val] | None:
    """doSplitTime: the fields of a number, abstime or reltime (None if not one)."""
    t = type(v)
    if t is int or t is float:
        secs = c_int(v) if t is int else c_trunc32(v)  # type: ignore[arg-type]
        return _abs_fields(secs, local_offset(secs))
    if t is AbsTime:
        return _abs_fields(c_trunc64(v.secs), int(v.offset))  # type: ignore[union-attr]
    if t is RelTime:
        return _rel_fields(float(v.secs))  # type: ignore[union-attr]
    return None


def _make_ad(fields: dict[str, Val]) -> ClassAd:
    ad = ClassAd()
    for k, val in fields.items():
        ad._insert(k, Literal(val))
    return ad


@builtin("splitTime", pure=False)
def _split_time(state: EvalState, *args: Val) -> Val:
    """`splitTime(t)`: an ad of the time's fields."""
    if len(args) != 1:
        return ERROR
    v = args[0]
    if v is UNDEFINED:
        return UNDEFINED
    fields = _split_fields(v)
    return ERROR if fields is None else _make_ad(fields)


def _fixed_from_gregorian(year: int, month: int, day: int) -> int:
    if month <= 2:
        adj = 0
    elif year % 4 == 0 and year % 400 not in (100, 200, 300):
        adj = -1
    else:
        adj = -2
    y = year - 1
    return (
        365 * y + cdiv(y, 4) - cdiv(y, 100) + cdiv(y, 400) + cdiv(367 * month - 362, 12) + adj + day
    )


def _ad_int(ad: ClassAd, name: str, state: EvalState) -> int | None:
    """EvaluateAttrInt: the attribute's int value, or None."""
    entry = ad._lookup_entry(name)
    if entry is None:
        return None
    v = eval_apart(entry.node, ad, state)
    return c_int(v) if type(v) is int else None


def _strftime(fmt: str, fields: tuple[int, int, int, int, int, int]) -> Val:
    year, mon, mday, hour, minute, sec = fields
    fixed = _fixed_from_gregorian(year, mon, mday)
    wday = cmod(fixed, 7)
    yday = fixed - _fixed_from_gregorian(year, 1, 1)
    if not fmt:
        return ""
    try:
        # Python's weekday counts from Monday and its yday from 1.
        return time.strftime(fmt, (year, mon, mday, hour, minute, sec, (wday + 6) % 7, yday + 1, 0))
    except (ValueError, OverflowError):
        return ERROR


@builtin("formatTime", pure=False)
def _format_time(state: EvalState, *args: Val) -> Val:
    """`formatTime([t [, format]])`: strftime of t's fields in t's zone; default "%c"."""
    n = len(args)
    if n == 0:
        lt = time.localtime()
        return time.strftime("%c", lt)
    if n > 2:
        return ERROR
    v = args[0]
    if type(v) is RelTime:
        return ERROR
    if isinstance(v, AdBase):
        got = [
            _ad_int(v, k, state) for k in ("Year", "Month", "Day", "Hours", "Minutes", "Seconds")
        ]
        # A missing field is a zero tm field: year 1900, January, day 0.
        defaults = (1900, 1, 0, 0, 0, 0)
        fields = tuple(g if g is not None else d for g, d in zip(got, defaults, strict=True))
    else:
        split = _split_fields(v)
        if split is None:
            return ERROR
        fields = (  # type: ignore[assignment]
            split["Year"],
            split["Month"],
            split["Day"],
            split["Hours"],
            split["Minutes"],
            split["Seconds"],
        )
    fmt = "%c"
    if n == 2:
        if type(args[1]) is not str:
            return ERROR
        fmt = args[1]
    return _strftime(fmt, fields)  # type: ignore[arg-type]


@builtin("interval")
def _interval(state: EvalState, *args: Val) -> Val:
    """`interval(secs)`: "[days+]hh:mm:ss" with leading zero fields dropped."""
    if len(args) != 1:
        return ERROR
    i = to_int(args[0])
    if type(i) is not int:
        return ERROR
    tot = c_int(i)
    days = cdiv(tot, 86400)
    tot = cmod(tot, 86400)
    hours = cdiv(tot, 3600)
    tot = cmod(tot, 3600)
    mins = cdiv(tot, 60)
    secs = cmod(tot, 60)
    if days:
        return f"{days}+{abs(hours):02d}:{abs(mins):02d}:{abs(secs):02d}"
    if hours:
        return f"{hours}:{abs(mins):02d}:{abs(secs):02d}"
    if mins:
        return f"{mins}:{abs(secs):02d}"
    return str(secs)
