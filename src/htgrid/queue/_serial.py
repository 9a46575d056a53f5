"""How ads are stored: a JSON object of attribute name -> ClassAd expression text.

Each value is the expression as ClassAd text (what `repr(ad.lookup(name))` prints, which
`ExprTree(text)` parses back), so the stored form is readable and version-proof. The
JSON wrapper costs nothing to split (json is C), and the common literals (strings without
escapes, integers, booleans) are turned back into values without the ClassAd parser,
which is what makes reading 100,000 proc ads quick.

A job's ad is its cluster's ad overlaid by the proc's own attributes, as HTCondor chains
proc ads to the cluster ad: `overlay` builds it.

This module works on htgrid.classad's entry table directly (`ClassAd._attrs`, immutable
`Entry` objects that ads may share): going through the mapping API converts every value
on the way in and out, and that was most of the cost of storing and reading 100,000 jobs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from htgrid.classad import ClassAd, ExprTree, quote
from htgrid.classad._ast import Literal
from htgrid.classad._classad import Entry, to_node

__all__ = [
    "decode",
    "encode",
    "expr_text",
    "overlay",
    "parse_value",
    "project",
    "names",
    "with_proc_id",
]

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# Decoded attributes, by (name, text): the same few texts (an Owner, a HoldReason, a
# policy) recur over thousands of jobs, and an Entry is immutable, so ads can share it.
_ENTRIES: dict[tuple[str, str], tuple[str, Entry]] = {}
_ENTRIES_MAX = 65_536


def expr_text(ad: ClassAd, name: str) -> str:
    """The ClassAd text of attribute `name` of `ad`."""
    entry = ad._attrs[name.lower()]
    return _entry_text(entry)


def _entry_text(entry: Entry) -> str:
    lit = entry.lit
    t = type(lit)
    if t is str:
        return quote(lit)  # type: ignore[arg-type]
    if t is int:
        return str(lit)
    if t is bool:
        return "true" if lit else "false"
    return repr(ExprTree._of(entry.node))


def encode(ad: ClassAd, skip: frozenset[str] = frozenset()) -> str:
    """`ad` as stored; attributes named in `skip` (lower case) are left out."""
    return _ENCODER.encode(
        {e.name: _entry_text(e) for key, e in ad._attrs.items() if key not in skip}
    )


def parse_value(text: str) -> Any:
    """A stored expression back as what `ad[name] = ...` takes: a plain value or ExprTree."""
    if text[:1] == '"' and "\\" not in text and text[-1:] == '"' and len(text) > 1:
        # No backslash means quote() applied no escape, so the body is the string itself.
        return text[1:-1]
    if text == "true":
        return True
    if text == "false":
        return False
    if _INT.fullmatch(text):
        return int(text)
    return ExprTree(text)


def decode(text: str) -> ClassAd:
    """A stored ad back as a ClassAd."""
    ad = ClassAd()
    attrs = ad._attrs
    entries = _ENTRIES
    for name, expr in json.loads(text).items():
        found = entries.get((name, expr))
        if found is None:
            found = (name.lower(), Entry(name, to_node(parse_value(expr))))
            if len(entries) >= _ENTRIES_MAX:
                entries.clear()
            entries[(name, expr)] = found
        attrs[found[0]] = found[1]
    return ad


def names(ad: ClassAd) -> frozenset[str]:
    """The attribute names of `ad`, lower case."""
    return frozenset(ad._attrs)


def with_proc_id(ad: ClassAd, proc: int) -> None:
    """Set `ProcId` (the same as `ad["ProcId"] = proc`, without the conversions)."""
    ad._attrs["procid"] = Entry("ProcId", Literal(proc))


def overlay(cluster: ClassAd, proc: ClassAd, masked: Iterable[str] = ()) -> ClassAd:
    """The job ad: `cluster`'s attributes, minus `masked`, overlaid by `proc`'s."""
    ad = ClassAd()
    attrs = cluster._attrs.copy()
    for name in masked:
        attrs.pop(name.lower(), None)
    attrs.update(proc._attrs)
    ad._attrs = attrs
    return ad


def project(ad: ClassAd, names: Iterable[str]) -> ClassAd:
    """A copy of `ad` with only `ClusterId`, `ProcId` and the named attributes it has."""
    out = ClassAd()
    src = ad._attrs
    keys = ["clusterid", "procid", *(n.lower() for n in names)]
    out._attrs = {k: src[k] for k in keys if k in src}
    return out
