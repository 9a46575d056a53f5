"""HTCondor's JSON form of an ad, written: `ClassAd.printJson` and the writers that
`adjson` gives (its readers, which make ClassAds, sit above ClassAd; see adjson for
the form)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Final

from htgrid.classad._ast import AdExpr, ListExpr, Literal, Node
from htgrid.classad._unparse import format_real_old, unparse
from htgrid.classad._values import UNDEFINED, RelTime

if TYPE_CHECKING:
    from htgrid.classad._ad import Entry
    from htgrid.classad._classad import ClassAd

__all__ = ["ad_lines", "ad_to_json", "ads_to_json", "json_members", "json_object"]


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


def ads_to_json(ads: Sequence[ClassAd]) -> str:
    """A JSON array of ads as printJson writes each (text: the markers must stay raw)."""
    return "[" + ",\n".join(ad_to_json(ad) for ad in ads) + "]"


def json_members(ad: ClassAd) -> dict[str, str]:
    """Each attribute of `ad` as a JSON object member (`"Memory": 2048`), by its lower-case
    name: what an ad is written from when only some of its attributes go (a projection)."""
    return {
        key: f"{_string(entry.name)}: {_node(entry.node, 0)}" for key, entry in ad._attrs.items()
    }


# Top-level lines by the entry they print (kept here, so that its id stays its own).
# Entries are immutable and shared: the queue's job ads share their cluster's, so a
# thousand ads of a cluster look each of those up once per ad, without building a key.
_ENTRY_LINES: dict[int, tuple[Entry, str]] = {}


def ad_to_json(ad: ClassAd) -> str:
    """An ad as printJson writes it."""
    return json_object(_entry_line(entry) for entry in ad._attrs.values())


def ad_lines(ad: ClassAd) -> dict[str, str]:
    """The lines of `ad_to_json`'s object, by lower-case attribute name: an attribute
    that did not change between two ads has the same line (the same string, as a rule:
    compared at once), so what changed is cheap to find and send alone."""
    return {key: _entry_line(entry) for key, entry in ad._attrs.items()}


def json_object(lines: Iterable[str]) -> str:
    """The JSON object of `ad_lines`' lines (some of them, say)."""
    body = ",\n".join(lines)
    return "{\n" + body + "\n}" if body else "{\n}"


def _entry_line(entry: Entry) -> str:
    known = _ENTRY_LINES.get(id(entry))
    if known is not None and known[0] is entry:
        return known[1]
    line = f"  {_string(entry.name)}: {_node(entry.node, 2)}"
    if len(_ENTRY_LINES) >= _LINES_LIMIT:
        _ENTRY_LINES.clear()
    _ENTRY_LINES[id(entry)] = (entry, line)
    return line
