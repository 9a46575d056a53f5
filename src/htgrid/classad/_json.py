"""HTCondor's JSON form of ClassAds.

Constants map to JSON (undefined is null, lists arrays, ads objects); any other expression
is a string `"\\/Expr(<new syntax>)\\/"`. The escaped slashes are the marker, so the
reader looks at the raw text, not only the decoded string.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterator
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, Final

from htgrid.classad._ast import AdExpr, ListExpr, Literal, Node
from htgrid.classad._parser import (
    BRACKET_DEPTH,
    MAX_DEPTH,
    START_DEPTH,
    TOO_DEEP,
    parse_expr,
)
from htgrid.classad._unparse import format_real_old, unparse
from htgrid.classad._values import INT64_MAX, INT64_MIN, UNDEFINED, RelTime
from htgrid.errors import ClassAdSyntaxError

if TYPE_CHECKING:
    from htgrid.classad._classad import ClassAd, Entry

__all__ = ["ad_to_json", "iter_json_ads"]

# NUL never appears in a ClassAd string, so it safely tags the raw `"\/Expr(` marker.
_MARK: Final = "\x00Expr("


#: A string as a JSON string, as json.dumps(text, ensure_ascii=False) writes it: the
#: encoder it calls, without its ~0.7 µs of set-up per call (two calls a line here).
_string: Final = encode_basestring


def _node(node: Node, indent: int) -> str:
    t = type(node)
    if t is Literal:
        v = node.value  # type: ignore[attr-defined]
        tv = type(v)
        if tv is bool:
            return "true" if v else "false"
        if tv is int:
            return str(v)
        if tv is float and math.isfinite(v):
            return format_real_old(v)
        if tv is str:
            return _string(v)
        if v is UNDEFINED:
            return "null"
        if tv is RelTime:
            return format_real_old(float(v.secs))
    elif t is ListExpr:
        items: tuple[Node, ...] = node.items  # type: ignore[attr-defined]
        pad = " " * (indent + 2)
        body = ",\n".join(pad + _node(i, indent + 2) for i in items)
        return f"[\n{body}\n{' ' * indent}]" if items else f"[\n{' ' * indent}]"
    elif t is AdExpr:
        return _object(node.attrs, indent)  # type: ignore[attr-defined]
    expr = json.dumps(unparse(node), ensure_ascii=False)[1:-1]
    return f'"\\/Expr({expr})\\/"'


# Lines already written, by (name, the value's node, indent); the node is kept, so its id
# stays its own. A thousand ads of one cluster share their values' nodes (the parser's
# cache; the queue's cluster ad under each job's own attributes): each shared attribute
# is written once.
_LINES: dict[tuple[str, int, int], tuple[Node, str]] = {}
_LINES_LIMIT: Final = 50_000


def _object(attrs: tuple[tuple[str, Node], ...], indent: int) -> str:
    if not attrs:
        return "{\n" + " " * indent + "}"
    pad = " " * (indent + 2)
    lines = []
    for name, expr in attrs:
        key = (name, id(expr), indent)
        known = _LINES.get(key)
        if known is not None and known[0] is expr:
            lines.append(known[1])
            continue
        line = f"{pad}{_string(name)}: {_node(expr, indent + 2)}"
        if len(_LINES) >= _LINES_LIMIT:
            _LINES.clear()
        _LINES[key] = (expr, line)
        lines.append(line)
    return "{\n" + ",\n".join(lines) + "\n" + " " * indent + "}"


# Top-level lines by the entry they print (kept here, so that its id stays its own).
# Entries are immutable and shared: the queue's job ads share their cluster's, so a
# thousand ads of a cluster look each of those up once per ad, without building a key.
_ENTRY_LINES: dict[int, tuple[Entry, str]] = {}


def ad_to_json(ad: ClassAd) -> str:
    """An ad as printJson writes it."""
    if not ad._attrs:
        return "{\n}"
    lines = []
    for entry in ad._attrs.values():
        known = _ENTRY_LINES.get(id(entry))
        if known is not None and known[0] is entry:
            lines.append(known[1])
            continue
        line = f"  {_string(entry.name)}: {_node(entry.node, 2)}"
        if len(_ENTRY_LINES) >= _LINES_LIMIT:
            _ENTRY_LINES.clear()
        _ENTRY_LINES[id(entry)] = (entry, line)
        lines.append(line)
    return "{\n" + ",\n".join(lines) + "\n}"


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
        if value.startswith(_MARK) and value.endswith(")/"):
            try:
                return parse_expr(value[len(_MARK) : -2], nested=depth - START_DEPTH)
            except ClassAdSyntaxError as err:
                raise ClassAdSyntaxError(
                    f"bad expression in JSON: {err.reason}", text=text, offset=offset
                ) from None
        string = value.replace(_MARK, "/Expr(")
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


def _keep_last(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)


def iter_json_ads(text: str, start: int = 0) -> Iterator[tuple[tuple[tuple[str, Node], ...], int]]:
    """Each JSON object in `text` (concatenated, or in one top-level array) with its end."""
    marked = text.replace('"\\/Expr(', '"\\u0000Expr(')
    marks = [m.start() for m in re.finditer(re.escape(_RAW_MARK), marked)]
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


_RAW_MARK: Final = '"\\u0000Expr('
_GROWTH: Final = len(_RAW_MARK) - len('"\\/Expr(')


def _unmap(marks: list[int], pos: int) -> int:
    """A position in the marked text as a position in the original text."""
    return pos - bisect.bisect_left(marks, pos) * _GROWTH
