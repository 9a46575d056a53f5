"""Reading job-ad values safely: ClassAd's `Value.Undefined`/`Value.Error` are ints in
Python (an IntEnum), and so is `True`; none of them is a number here.
"""

from __future__ import annotations

from htgrid.classad import Value

__all__ = ["as_int", "as_number", "as_str", "is_plain"]


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
