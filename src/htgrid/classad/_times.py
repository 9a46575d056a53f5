"""Absolute and relative time literals: parsing their strings and printing them back."""

from __future__ import annotations

import calendar
import math
import re
import time
from typing import Final

from htgrid.classad._values import AbsTime, RelTime

__all__ = [
    "format_abstime",
    "format_reltime",
    "local_offset",
    "parse_abstime",
    "parse_reltime",
]

_ABS: Final = re.compile(
    r"""\s*(?P<y>\d{4})-?(?P<mo>\d{2})-?(?P<d>\d{2})
        (?:[T\s]?(?P<h>\d{2}):?(?P<mi>\d{2})(?::?(?P<s>\d{2}))?)?
        \s*(?P<z>Z|[+-]\d{2}(?::?\d{2})?)?\s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_REL_FIELD: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([dhms]?)", re.IGNORECASE)


def local_offset(secs: float) -> int:
    """This host's offset from UTC, in seconds, at the given epoch time."""
    return time.localtime(secs).tm_gmtoff


def parse_abstime(text: str) -> AbsTime | None:
    """Parse `YYYY-MM-DD[Thh:mm[:ss]][Z|+hh:mm]` (separators optional); None if invalid.

    Out-of-range fields roll over as C's timegm does (month 13 is January next year).
    Without a zone the time is local.
    """
    m = _ABS.match(text)
    if m is None:
        return None
    y, mo, d = int(m["y"]), int(m["mo"]), int(m["d"])
    h = int(m["h"] or 0)
    mi = int(m["mi"] or 0)
    s = int(m["s"] or 0)
    years, month0 = divmod(mo - 1, 12)
    base = calendar.timegm((y + years, month0 + 1, 1, 0, 0, 0, 0, 0, 0))
    wall = base + (d - 1) * 86400 + h * 3600 + mi * 60 + s
    zone = m["z"]
    if zone is None:
        offset = local_offset(wall)
        offset = local_offset(wall - offset)
    elif zone.upper() == "Z":
        offset = 0
    else:
        digits = zone[1:].replace(":", "")
        offset = int(digits[:2]) * 3600 + (int(digits[2:4]) * 60 if len(digits) > 2 else 0)
        if zone[0] == "-":
            offset = -offset
    return AbsTime(wall - offset, offset)


def parse_reltime(text: str) -> RelTime | None:
    """Parse `[-][D+]hh:mm:ss[.f]`, `mm:ss`, `ss`, or `1d`/`2h`/`3m`/`4s` forms; None if invalid."""
    s = text.strip()
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:].strip()
    days = 0.0
    if "+" in s:
        head, s = s.split("+", 1)
        if not head.strip().isdigit():
            return None
        days = float(head)
    if s == "":
        return RelTime(sign * days * 86400)
    if ":" in s:
        parts = s.split(":")
        if len(parts) > 3:
            return None
        total = 0.0
        for i, part in enumerate(parts):
            part = part.strip()
            last = i == len(parts) - 1
            if not (part.isdigit() or (last and _is_decimal(part))):
                return None
            total = total * 60 + float(part)
        return RelTime(sign * (days * 86400 + total))
    total = 0.0
    pos = 0
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1, "": 1}
    while pos < len(s):
        fm = _REL_FIELD.match(s, pos)
        if fm is None:
            return None
        total += float(fm.group(1)) * units[fm.group(2).lower()]
        pos = fm.end()
        while pos < len(s) and s[pos].isspace():
            pos += 1
    return RelTime(sign * (days * 86400 + total))


def _is_decimal(part: str) -> bool:
    try:
        float(part)
    except ValueError:
        return False
    return part.replace(".", "", 1).isdigit()


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
