"""HTCondor's JSON form of ClassAds, decoded and encoded again without losing expressions.

The form marks an expression by the escaped slashes of `"\\/Expr(...)\\/"`, which a JSON
decoder turns into plain slashes, indistinguishable from a string that happens to read
"/Expr(...)/". So the marker is swapped for a NUL (never in a ClassAd string) before
decoding, and back after encoding. (The API's side has its own copy in htgrid.net._wire:
a GAHP server imports nothing of the daemons.)
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

import htgrid.classad as classad

__all__ = ["EXPR_MARK", "ad_text", "dumps", "loads"]

_RAW: Final = '"\\/Expr('
_HELD: Final = '"\\u0000Expr('


def loads(text: str | bytes) -> Any:
    """JSON holding job ads, their expressions kept recognisable."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(text.replace(_RAW, _HELD))


def dumps(obj: Any) -> str:
    """`obj` (from `loads`) as JSON again, its expressions marked as HTCondor marks them."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace(_HELD, _RAW)


# ---- to new ClassAd syntax, without building ClassAds ---------------------------------------

_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED: Final = frozenset({"true", "false", "undefined", "error", "is", "isnt", "parent"})
#: How an expression's string starts once `loads` has read it.
EXPR_MARK: Final = "\x00Expr("
_INT64: Final = range(-(2**63), 2**63)


class _Unsure(Exception):
    """A value this translation does not take on: the caller parses the ad instead."""


def ad_text(ad: dict[str, Any]) -> str | None:
    """An ad decoded by `loads` in new ClassAd syntax on one line, or None when one of its
    values is one to leave to the ClassAd parser (an odd name, an out-of-range number).

    The daemon wrote the expressions (`"\\/Expr(...)\\/"`) in new syntax already, so they
    are copied as they are, and literals are written as the parser would print them: a
    thousand status ads cost a tenth of parsing and printing them.
    """
    try:
        return _record(ad)
    except _Unsure:
        return None


# `name = value` parts already written, by (name, type, value) of a string, integer or
# boolean value (the type keeps 1 and true apart): a thousand status ads of one cluster
# repeat most of their attributes word for word. Long strings (an environment) are
# written each time, which bounds what this holds.
_PARTS: dict[tuple[str, type, object], str] = {}
_PARTS_MAX: Final = 50_000
_CACHED: Final = frozenset({str, int, bool})
_LONGEST: Final = 256


def _record(ad: dict[str, Any]) -> str:
    parts = []
    for name, value in ad.items():
        kind = type(value)
        cached = kind in _CACHED and (kind is not str or len(value) <= _LONGEST)
        key = (name, kind, value) if cached else None
        part = _PARTS.get(key) if key is not None else None
        if part is None:
            if not _NAME.fullmatch(name) or name.lower() in _RESERVED:
                raise _Unsure(name)
            part = f"{name} = {_value(value)}"
            if key is not None:
                if len(_PARTS) >= _PARTS_MAX:
                    _PARTS.clear()
                _PARTS[key] = part
        parts.append(part)
    return "[ " + "; ".join(parts) + " ]" if parts else "[ ]"


def _value(value: Any) -> str:
    kind = type(value)
    if kind is str:
        if value.startswith(EXPR_MARK) and value.endswith(")/"):
            expr: str = value[len(EXPR_MARK) : -2]
            if "\n" in expr or "\r" in expr or "//" in expr or "/*" in expr:
                raise _Unsure(expr)
            return expr
        return classad.quote(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        if value not in _INT64:
            raise _Unsure(value)
        return str(value)
    if kind is float:
        if not math.isfinite(value):
            raise _Unsure(value)
        return repr(value)
    if value is None:
        return "undefined"
    if kind is list:
        return "{ " + ", ".join(map(_value, value)) + " }"
    if kind is dict:
        return _record(value)
    raise _Unsure(value)
