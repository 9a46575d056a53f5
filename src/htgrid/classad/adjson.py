"""HTCondor's JSON form of ClassAds: the one codec of htgrid's APIs and the condor GAHP.

Constants map to JSON (undefined is null, lists arrays, ads objects); any other expression
is a string `"\\/Expr(<new syntax>)\\/"`. The escaped slashes are the marker, and a JSON
decoder turns them into plain slashes, indistinguishable from a string that happens to
read "/Expr(...)/": so each reader here swaps the raw marker for a NUL (never in a ClassAd
string) before decoding, and each writer writes it back.

    loads(text), dumps(obj)         JSON text <-> Python values, expressions still marked
                                    (a string starting with EXPR_MARK)
    ad_to_json(ad), ads_to_json(ads), json_members(ad)
                                    ClassAds -> JSON text, as printJson writes them
    ad_lines(ad), json_object(lines)
                                    the lines of ad_to_json's object by attribute, and
                                    an object of some of them (an ad's changes)
    ad_from_object(obj)             a value of `loads` -> ClassAd (an ad of literals only
                                    without the parser)
    ad_text(obj)                    a value of `loads` -> one line of new ClassAd syntax,
                                    without building a ClassAd (the condor GAHP's status
                                    answers: a tenth of parsing and printing them)
    iter_json_ads(text)             the ClassAd parser's reader (ParserType.JSON)

A number past 64 bits reads as 0, as HTCondor's reader has it (an API that must refuse
it instead checks the decoded value first); a NUL in a string or a name is refused.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterator
from typing import Any, Final

from htgrid.classad._ast import AdExpr, ListExpr, Literal, Node
from htgrid.classad._classad import ClassAd
from htgrid.classad._parser import (
    BRACKET_DEPTH,
    MAX_DEPTH,
    START_DEPTH,
    TOO_DEEP,
    parse_expr,
)
from htgrid.classad._tojson import ad_lines, ad_to_json, ads_to_json, json_members, json_object
from htgrid.classad._unparse import quote_string
from htgrid.classad._values import INT64_MAX, INT64_MIN, UNDEFINED
from htgrid.errors import ClassAdSyntaxError

__all__ = [
    "EXPR_MARK",
    "ad_from_object",
    "ad_lines",
    "ad_text",
    "ad_to_json",
    "ads_to_json",
    "dumps",
    "is_literal",
    "iter_json_ads",
    "json_members",
    "json_object",
    "loads",
]

#: How an expression's string starts once `loads` has read it: NUL never appears in a
#: ClassAd string, so it safely stands for the raw `"\/Expr(` marker.
EXPR_MARK: Final = "\x00Expr("
# The marker as it is written (raw), and as the reader holds it in the text it decodes.
_RAW: Final = '"\\/Expr('
_HELD: Final = '"\\u0000Expr('


def loads(text: str | bytes) -> Any:
    """JSON holding ads, their expressions kept recognisable (strings starting with
    EXPR_MARK). ValueError (JSONDecodeError, UnicodeDecodeError) when it is not JSON."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(text.replace(_RAW, _HELD))


def dumps(obj: Any) -> str:
    """`obj` (from `loads`) as compact JSON again, its expressions marked as HTCondor
    marks them."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace(_HELD, _RAW)


def _from_json(value: Any, text: str, offset: int, depth: int = START_DEPTH) -> Node:
    """A decoded JSON value as an expression node, `depth` levels deep (the parser's
    count: a list or object costs 3, as brackets do, so what is read prints back)."""
    if value is None:
        return Literal(UNDEFINED)
    if isinstance(value, bool):
        return Literal(value)
    if isinstance(value, int):
        # As HTCondor's reader does, a number past 64 bits becomes 0.
        return Literal(value if INT64_MIN <= value <= INT64_MAX else 0)
    if isinstance(value, float):
        return Literal(value)
    if isinstance(value, str):
        if value.startswith(EXPR_MARK) and value.endswith(")/"):
            try:
                return parse_expr(value[len(EXPR_MARK) : -2], nested=depth - START_DEPTH)
            except ClassAdSyntaxError as err:
                raise ClassAdSyntaxError(
                    f"bad expression in JSON: {err.reason}", text=text, offset=offset
                ) from None
        string = value.replace(EXPR_MARK, "/Expr(")
        if "\0" in string:  # as the text reader, and HTCondor's: a string holds no NUL
            raise ClassAdSyntaxError(
                "a string may not hold a NUL character", text=text, offset=offset
            )
        return Literal(string)
    if isinstance(value, list | dict):
        # Held to the text parser's budget: what is read here is printed and read back.
        depth += BRACKET_DEPTH
        if depth > MAX_DEPTH:
            raise ClassAdSyntaxError(TOO_DEEP, text=text, offset=offset)
        if isinstance(value, list):
            return ListExpr(tuple(_from_json(v, text, offset, depth) for v in value))
        return AdExpr(_pairs(value, text, offset, depth))
    raise ClassAdSyntaxError("unexpected JSON value", text=text, offset=offset)


def _pairs(
    obj: dict[str, Any], text: str, offset: int, depth: int = START_DEPTH
) -> tuple[tuple[str, Node], ...]:
    """An object's members as an ad's attributes (`depth`: where its values stand)."""
    found: dict[str, tuple[str, Node]] = {}
    for name, value in obj.items():
        key = name.lower()
        previous = found.get(key)
        try:
            if "\0" in name:
                raise ClassAdSyntaxError(
                    "an attribute name may not hold a NUL character", text=text, offset=offset
                )
            node = _from_json(value, text, offset, depth)
        except ClassAdSyntaxError as err:
            # Said of the attribute (a path, for a nested ad's): which value is wrong.
            raise ClassAdSyntaxError(
                f"{_named(name)}: {err.reason}", text=text, offset=err.offset
            ) from None
        found[key] = (previous[0] if previous else name, node)
    return tuple(found.values())


def _named(name: str) -> str:
    """An attribute name for a message (quoted when it holds what does not print)."""
    return name if name.isprintable() else repr(name)


def ad_from_object(obj: dict[str, Any]) -> ClassAd:
    """The ClassAd of a JSON object decoded by `loads`, as the parser reads its text:
    ClassAdSyntaxError, its reason naming the attribute, for what a ClassAd cannot hold."""
    for name, value in obj.items():
        if not is_literal(value) or "\0" in name:
            return ClassAd._from_pairs(_pairs(obj, "", 0))
    # Literals only (most ads a query returns): the same ad, without the parser.
    return ClassAd(obj)


def is_literal(value: object) -> bool:
    """Whether a value decoded by `loads` is a literal that ClassAd(dict) stores as the
    parser reads it: no expression, list or ad, nothing a ClassAd cannot hold."""
    kind = type(value)
    if kind is str:
        return "\0" not in value  # type: ignore[operator]  # else an expression's marker
    if kind is int:
        return INT64_MIN <= value <= INT64_MAX  # type: ignore[operator]
    return kind is float or kind is bool or value is None


def _keep_last(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)


def iter_json_ads(text: str, start: int = 0) -> Iterator[tuple[tuple[tuple[str, Node], ...], int]]:
    """Each JSON object in `text` (concatenated, or in one top-level array) with its end."""
    marked = text.replace(_RAW, _HELD)
    marks = [m.start() for m in re.finditer(re.escape(_HELD), marked)]
    # The marker replacement keeps offsets stable up to a fixed growth per marker, so
    # positions are mapped back by counting markers before them.
    decoder = json.JSONDecoder(object_pairs_hook=_keep_last)
    pos = _skip(marked, start)
    in_array = False
    if pos < len(marked) and marked[pos] == "[":
        in_array = True
        pos = _skip(marked, pos + 1)
    while pos < len(marked):
        if in_array and marked[pos] == "]":
            pos = _skip(marked, pos + 1)
            in_array = False
            continue
        try:
            value, end = decoder.raw_decode(marked, pos)
        except json.JSONDecodeError as err:
            raise ClassAdSyntaxError(
                f"invalid JSON: {err.msg}", text=text, offset=_unmap(marks, err.pos)
            ) from None
        except RecursionError:  # nested past what the decoder itself can follow
            raise ClassAdSyntaxError(TOO_DEEP, text=text, offset=_unmap(marks, pos)) from None
        if not isinstance(value, dict):
            raise ClassAdSyntaxError(
                "expected a JSON object for a ClassAd", text=text, offset=_unmap(marks, pos)
            )
        pairs = _pairs(value, text, _unmap(marks, pos))
        pos = _skip(marked, end)
        if in_array and pos < len(marked) and marked[pos] == ",":
            pos = _skip(marked, pos + 1)
        if pairs:  # HTCondor's reader yields no ad for an empty object
            yield pairs, _unmap(marks, pos)


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


_GROWTH: Final = len(_HELD) - len(_RAW)


def _unmap(marks: list[int], pos: int) -> int:
    """A position in the marked text as a position in the original text."""
    return pos - bisect.bisect_left(marks, pos) * _GROWTH


# ---- to new ClassAd syntax, without building ClassAds ---------------------------------------

_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED: Final = frozenset({"true", "false", "undefined", "error", "is", "isnt", "parent"})


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
        return quote_string(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        if not INT64_MIN <= value <= INT64_MAX:
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
