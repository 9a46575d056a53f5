"""Value conversions shared by the built-in functions.

These follow libclassad's `convertValueTo{String,Integer,Real}Value` and the C
conversions the C++ code relies on (`strtod`, truncating casts, 32-bit `int`).
"""

from __future__ import annotations

import math
import re
import time
from typing import TYPE_CHECKING

from htgrid.classad._unparse import unparse_value
from htgrid.classad._values import (
    ERROR,
    INT64_MIN,
    UNDEFINED,
    AbsTime,
    ListValue,
    RelTime,
    Value,
)

if TYPE_CHECKING:
    from htgrid.classad._values import Val

__all__ = [
    "INT32_MIN",
    "abstime_text",
    "c_int",
    "c_trunc32",
    "c_trunc64",
    "cdiv",
    "cmod",
    "local_offset",
    "real_text",
    "reltime_text",
    "strtod",
    "to_int",
    "to_real",
    "to_str",
]

INT32_MIN = -(1 << 31)
_TWO63 = float(1 << 63)
_TWO31 = float(1 << 31)


def c_int(n: int) -> int:
    """`(int) n` for a 64-bit n: keep the low 32 bits, signed."""
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n & 0x80000000 else n


def c_trunc64(x: float) -> int:
    """`(long long) x` on x86-64: truncation, INT64_MIN when out of range or NaN."""
    if -_TWO63 <= x < _TWO63:
        return int(x)
    return INT64_MIN


def c_trunc32(x: float) -> int:
    """`(int) x` on x86-64: truncation, INT_MIN when out of range or NaN."""
    if -_TWO31 <= x < _TWO31:
        return int(x)
    return INT32_MIN


def cdiv(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def cmod(a: int, b: int) -> int:
    """C remainder (takes the sign of the dividend)."""
    return a - cdiv(a, b) * b


# strtod's accepted prefix: leading C whitespace, then a hex float, a decimal,
# inf/infinity or nan[(chars)].
_STRTOD = re.compile(
    r"[ \t\n\v\f\r]*([+-]?)(?:"
    r"(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
    r"|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"|(inf(?:inity)?)"
    r"|(nan(?:\([0-9A-Za-z_]*\))?)"
    r")",
    re.IGNORECASE,
)


def strtod(s: str) -> tuple[float, int] | None:
    """C `strtod`: the value of the longest numeric prefix and where it ends, or None."""
    m = _STRTOD.match(s)
    if m is None:
        return None
    sign, hexpart, dec, inf, _nan = m.groups()
    if hexpart is not None:
        body = hexpart if "p" in hexpart.lower() else hexpart + "p0"
        try:
            x = float.fromhex(body)
        except (ValueError, OverflowError):
            x = math.inf
    elif dec is not None:
        x = float(dec)
    elif inf is not None:
        x = math.inf
    else:
        x = math.nan
    return (-x if sign == "-" else x), m.end()


def real_text(x: float) -> str:
    """A real as the new-syntax unparser writes it (`%1.15E`, specials spelled out)."""
    if x != x:
        return 'real("NaN")'
    if x == math.inf:
        return 'real("INF")'
    if x == -math.inf:
        return 'real("-INF")'
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    return f"{x:1.15E}"


def abstime_text(t: AbsTime) -> str:
    """`absTimeToString`: local wall time of the zone, then `+hh:mm` (`-` for offset <= 0)."""
    off = int(t.offset)
    secs = c_trunc64(float(t.secs)) + off
    try:
        tm = time.gmtime(secs)
        text = time.strftime("%Y-%m-%dT%H:%M:%S", tm)
    except (OverflowError, OSError, ValueError):
        text = "0000-00-00T00:00:00"
    sign = "+" if off > 0 else "-"
    a = abs(off)
    return f"{text}{sign}{a // 3600:02d}:{(a // 60) % 60:02d}"


def _g(x: float) -> str:
    return f"{x:02g}"


def reltime_text(secs: float) -> str:
    """`relTimeToString`: `[-][d+]hh:mm:ss[.fff]` with leading zero fields dropped."""
    out = ""
    if secs < 0:
        out = "-"
        secs = -secs
    frac = secs - math.floor(secs)
    whole = c_trunc32(secs)
    hrs = cmod(whole, 86400)
    mins = cmod(hrs, 3600)
    s = cmod(mins, 60) + frac
    days = cdiv(whole, 86400)
    hrs = cdiv(hrs, 3600)
    mins = cdiv(mins, 60)
    sec_text = f"{int(s):02d}" if frac == 0 else _g(s)
    if days:
        return f"{out}{days}+{hrs:02d}:{mins:02d}:{sec_text}"
    if hrs:
        return f"{out}{hrs:02d}:{mins:02d}:{sec_text}"
    if mins:
        return f"{out}{mins:02d}:{sec_text}"
    return out + sec_text


def local_offset(secs: float) -> int:
    """The local zone's offset east of UTC, in seconds, at epoch time `secs`."""
    try:
        return int(time.localtime(secs).tm_gmtoff)
    except (OverflowError, OSError, ValueError):
        return 0


def to_str(v: Val) -> str | Value:
    """`convertValueToStringValue`: a string, or UNDEFINED/ERROR."""
    t = type(v)
    if t is str:
        return v  # type: ignore[return-value]
    if t is int:
        return str(v)
    if t is bool:
        return "true" if v else "false"
    if t is float:
        return real_text(v)  # type: ignore[arg-type]
    if v is UNDEFINED or v is ERROR:
        return v
    if t is AbsTime:
        return abstime_text(v)  # type: ignore[arg-type]
    if t is RelTime:
        # The C code reads the reltime into a time_t first, dropping the fraction.
        return reltime_text(float(c_trunc64(v.secs)))  # type: ignore[union-attr]
    try:
        return unparse_value(v)
    except Exception:
        return ERROR


def to_real(v: Val) -> float | Value:
    """`convertValueToRealValue`: a float, or UNDEFINED/ERROR."""
    t = type(v)
    if t is float:
        return v  # type: ignore[return-value]
    if t is int:
        return float(v)  # type: ignore[arg-type]
    if t is bool:
        return 1.0 if v else 0.0
    if t is str:
        r = strtod(v)  # type: ignore[arg-type]
        return ERROR if r is None else r[0]
    if t is AbsTime:
        return float(c_trunc64(v.secs))  # type: ignore[union-attr]
    if t is RelTime:
        return float(c_trunc64(v.secs))  # type: ignore[union-attr]
    if v is UNDEFINED:
        return UNDEFINED
    return ERROR


def to_int(v: Val) -> int | Value:
    """`convertValueToIntegerValue`: an int, or UNDEFINED/ERROR."""
    t = type(v)
    if t is int:
        return v  # type: ignore[return-value]
    if t is float:
        return c_trunc64(v)  # type: ignore[arg-type]
    if t is bool:
        return 1 if v else 0
    if t is str:
        r = strtod(v)  # type: ignore[arg-type]
        return ERROR if r is None else c_trunc64(r[0])
    if t is AbsTime or t is RelTime:
        return c_trunc64(v.secs)  # type: ignore[union-attr]
    if v is UNDEFINED:
        return UNDEFINED
    return ERROR


def is_list(v: object) -> bool:
    """True for a list value."""
    return type(v) is ListValue
