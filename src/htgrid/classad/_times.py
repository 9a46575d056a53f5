"""Absolute and relative time literals: parsing their strings and printing them back."""

from __future__ import annotations

import calendar
import math
import time

from htgrid.classad._values import AbsTime, RelTime

__all__ = [
    "format_abstime",
    "format_reltime",
    "local_offset",
    "parse_abstime",
    "parse_reltime",
]


def local_offset(secs: float) -> int:
    """This host's offset from UTC, in seconds, at the given epoch time."""
    return time.localtime(secs).tm_gmtoff


def _next_digit(text: str, i: int) -> int:
    while i < len(text) and not text[i].isdigit():
        i += 1
    return i


def _atoi(text: str) -> int:
    digits = ""
    for ch in text:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


def parse_abstime(text: str) -> AbsTime | None:
    """Parse an absolute time string as literals.cpp's MakeAbsTime does; None if invalid.

    Digits are read in fixed-width groups whatever separates them (`2003-01-25T09:00:00`,
    `20030125T090000`, even `1970-01-01T:00:00:01`), then an optional `Z` or `+hh:mm`/
    `+hhmm` zone. Fields out of range roll over as mktime does. Without a zone the time
    is local.
    """
    s = text
    zone: int | None = None
    i = len(s) - 1
    while i >= 0 and s[i].isspace():
        i -= 1
    n = len(s)
    if i > 0 and s[i] in "zZ":
        zone = 0
        s = s[:i] + s[i + 1 :]
    elif n > 5 and s[n - 5] in "+-":
        zone = _zone(s[n - 5 :])
        if zone is not None:
            s = s[: n - 5]
    elif n > 6 and s[n - 6] in "+-" and s[n - 3] == ":":
        s = s[: n - 3] + s[n - 2 :]
        zone = _zone(s[n - 6 :])
        if zone is not None:
            s = s[: n - 6]
    n = len(s)
    i = _next_digit(s, 0)
    if i > n - 4:
        return None
    # struct tm starts zeroed: month 0 is January (1 here), day 0 the last of the month before.
    fields = [0, 1, 0, 0, 0, 0]  # year, month, day, hour, minute, second
    fields[0] = _atoi(s[i : i + 4])
    i += 4
    for k in range(1, 6):
        i = _next_digit(s, i)
        if i <= n - 2:
            fields[k] = _atoi(s[i : i + 2])
            i += 2
    i = _next_digit(s, i)
    if i <= n - 1 and s[i].isdigit():
        return None
    year, month, day, hour, minute, second = fields
    years, month0 = divmod(month - 1, 12)
    wall = (
        calendar.timegm((year + years, month0 + 1, 1, 0, 0, 0, 0, 0, 0))
        + (day - 1) * 86400
        + hour * 3600
        + minute * 60
        + second
    )
    # mktime() answers -1 for the second before the epoch (local time), which
    # MakeAbsTime takes for failure; keep that so the same strings are refused.
    if wall - local_offset(wall) == -1:
        return None
    offset = zone if zone is not None else local_offset(wall - local_offset(wall))
    return AbsTime(wall - offset, offset)


def _zone(text: str) -> int | None:
    """`+hhmm` or `-hhmm` as seconds east of UTC, or None."""
    if len(text) != 5 or text[0] not in "+-" or not text[1:].isdigit():
        return None
    secs = int(text[1:3]) * 3600 + int(text[3:5]) * 60
    return -secs if text[0] == "-" else secs


def parse_reltime(text: str) -> RelTime | None:
    """Parse `[-][D+|Dd][hh:|Hh][mm:|Mm]ss[.f][s]` read right to left, as MakeRelTime does."""
    s = text
    i = len(s) - 1

    def skip_space(i: int) -> int:
        while i >= 0 and s[i].isspace():
            i -= 1
        return i

    def digits_back(i: int) -> tuple[str, int]:
        out = ""
        while i >= 0 and s[i].isdigit():
            out = s[i] + out
            i -= 1
        return out, i

    secs = 0.0
    mins = hours = days = 0
    i = skip_space(i)
    if i >= 0 and (s[i] in "sS" or s[i].isdigit()):
        if s[i] in "sS":
            i -= 1
        i = skip_space(i)
        number, i = digits_back(i)
        if i >= 0 and s[i] == ".":
            more, i = digits_back(i - 1)
            number = more + "." + number
        try:
            secs = float(number) if number not in ("", ".") else 0.0
        except ValueError:
            secs = 0.0
    for unit in ("mM:", "hH:", "dD+"):
        i = skip_space(i)
        if i >= 0 and s[i] in unit:
            i = skip_space(i - 1)
            number, i = digits_back(i)
            value = int(number) if number else 0
            if unit[0] == "m":
                mins = value
            elif unit[0] == "h":
                hours = value
            else:
                days = value
    i = skip_space(i)
    negative = i >= 0 and s[i] == "-"
    if negative:
        i -= 1
    i = skip_space(i)
    if i >= 0:
        return None
    total = days * 86400 + hours * 3600 + mins * 60 + secs
    return RelTime(-total if negative else total)


def format_abstime(t: AbsTime) -> str:
    """`2020-01-01T00:00:00+02:00`: wall-clock time at the offset, then the offset.

    UTC prints as `-00:00`, as HTCondor does.
    """
    wall = time.gmtime(int(t.secs) + t.offset)
    offset = t.offset
    sign = "+" if offset > 0 else "-"
    offset = abs(offset)
    return (
        f"{wall.tm_year:04d}-{wall.tm_mon:02d}-{wall.tm_mday:02d}T"
        f"{wall.tm_hour:02d}:{wall.tm_min:02d}:{wall.tm_sec:02d}"
        f"{sign}{offset // 3600:02d}:{offset % 3600 // 60:02d}"
    )


def format_reltime(t: RelTime, *, fraction: bool = True) -> str:
    """`[-][D+]hh:mm:ss`, leading zero fields dropped (`05`, `01:01`, `1+02:03:04`).

    With a fraction the seconds print as `%g` (`1+02:03:4.5`), as HTCondor's unparser
    does; string() prints without it.
    """
    secs = t.secs
    out = ""
    if secs < 0:
        out = "-"
        secs = -secs
    if not math.isfinite(secs):
        return out + "0"
    whole = int(secs)
    frac = secs - math.floor(secs) if fraction else 0.0
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    mins, s = divmod(rest, 60)
    sec_text = f"{s:02d}" if frac == 0 else f"{s + frac:g}"
    if days:
        return f"{out}{days}+{hours:02d}:{mins:02d}:{sec_text}"
    if hours:
        return f"{out}{hours:02d}:{mins:02d}:{sec_text}"
    if mins:
        return f"{out}{mins:02d}:{sec_text}"
    return out + sec_text
