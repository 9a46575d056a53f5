"""Reading job-ad values safely: ClassAd's `Value.Undefined`/`Value.Error` are ints in
Python (an IntEnum), and so is `True`; none of them is a number here. And times as
people read them in wait reasons and explanations.
"""

from __future__ import annotations

import time

from htgrid.classad import Value

__all__ = ["as_int", "as_number", "as_str", "format_time", "is_plain", "time_text"]


def as_number(value: object) -> int | float | None:
    """`value` if it is a real int or float, else None."""
    if isinstance(value, bool | Value) or not isinstance(value, int | float):
        return None
    return value


def as_int(value: object) -> int | None:
    number = as_number(value)
    return None if number is None else int(number)


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def is_plain(value: object) -> bool:
    """A literal a submit ad may carry: a string, a number or a boolean."""
    return isinstance(value, str | bool) or as_number(value) is not None


def format_time(when: float) -> str:
    """A time as people read it in wait reasons and explanations (local time, seconds)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


def time_text(value: object) -> str | None:
    """A job-ad time (seconds since the epoch) as `format_time` writes it; None if unset."""
    number = as_number(value)
    if number is None or number <= 0:
        return None
    return format_time(number)
