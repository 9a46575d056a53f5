"""A submit value read as a number or a boolean: HTCondor's string_is_*_param.

Each takes a literal first, else the value of the text evaluated alone as a ClassAd
expression (`2 * 1024` is the integer 2048), as condor_submit does.
"""

from __future__ import annotations

import re

from htgrid.submit import _classad

__all__ = ["is_true_bool", "string_is_bool", "string_is_double", "string_is_long"]


def string_is_long(text: str) -> int | None:
    """HTCondor's string_is_long_param: an integer literal or integer-valued expression."""
    stripped = text.strip()
    match = re.match(r"[+-]?\d+", stripped)
    if match and match.end() == len(stripped) and text[:1] not in (" ", "\t"):
        return int(stripped)
    value = _classad.eval_text(text)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        return int(value)
    return None


def string_is_double(text: str) -> float | None:
    """HTCondor's string_is_double_param: a real literal or numeric expression."""
    try:
        return float(text.strip()) if text.strip() and text.strip()[0] not in "iInN" else None
    except ValueError:
        pass
    value = _classad.eval_text(text)
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def string_is_bool(text: str) -> bool | None:
    """HTCondor's string_is_boolean_param: true/false/1/0, else a boolean expression."""
    low = text.lower()
    for word, value in (("true", True), ("1", True), ("false", False), ("0", False)):
        if low.startswith(word) and not low[len(word) :].strip():
            return value
    result = _classad.eval_text(text)
    if isinstance(result, bool):
        return result
    if isinstance(result, (int, float)):
        return result != 0
    return None


def is_true_bool(text: str | None, default: bool) -> bool:
    """A boolean submit value, `default` when unset; errors are the caller's job."""
    if text is None:
        return default
    value = string_is_bool(text)
    return default if value is None else value
