"""How ads are stored: a JSON object of attribute name -> ClassAd expression text.

Each value is the expression as ClassAd text (what `repr(ad.lookup(name))` prints, which
`ExprTree(text)` parses back), so the stored form is readable and version-proof. The
JSON wrapper costs nothing to split (json is C), and the common literals (strings without
escapes, integers, booleans) are turned back into values without the ClassAd parser,
which is what makes reading 100,000 proc ads quick.

A job's ad is its cluster's ad overlaid by the proc's own attributes, as HTCondor chains
proc ads to the cluster ad: `overlay` builds it.

This module works on ads' entry tables (`htgrid.classad.fast`: immutable `Entry` objects
that ads may share): going through the mapping API converts every value on the way in
and out, and that was most of the cost of storing and reading 100,000 jobs.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from htgrid.classad import ClassAd, ExprTree, quote
from htgrid.classad.fast import Entry, entries, from_entries
from htgrid.classad.syntax import Literal, Node, to_node, unparse
from htgrid.errors import ClassAdSyntaxError
from htgrid.queue._errors import InvalidValue

__all__ = [
    "decode",
    "decode_shared",
    "encode",
    "encode_names",
    "encode_plain",
    "expression_problem",
    "forget",
    "overlay",
    "parse_value",
    "project",
    "remember",
    "unreadable",
    "with_proc_id",
]

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_json_str: Callable[[str], str] = json.encoder.encode_basestring
# Parsed expressions by their text: the same few (a policy, a hold code, a nested count)
# recur over thousands of jobs, and nodes are immutable, so ads can share them.
_NODES: dict[str, Node] = {}
_NODES_MAX = 65_536
# Proc ads by their stored text. Between two changes a job is read many times (each
# query, each periodic pass, each load before an update) from the same text.
_ADS: dict[str, ClassAd] = {}
_ADS_MAX = 16_384


def _entry_text(entry: Entry) -> str:
    lit = entry.lit
    t = type(lit)
    if t is str:
        return quote(lit)  # type: ignore[arg-type]
    if t is int:
        return str(lit)
    if t is bool:
        return "true" if lit else "false"
    return unparse(entry.node)


def encode(ad: ClassAd, skip: frozenset[str] = frozenset()) -> str:
    """`ad` as stored; attributes named in `skip` (lower case) are left out."""
    # The JSON is joined by hand: the C string escaper is all json.dumps would add, and
    # the encoder object it builds per call costs more than the rest for a small ad.
    return "{" + ",".join(_pair(e) for key, e in entries(ad).items() if key not in skip) + "}"


def encode_names(ad: ClassAd, names: Iterable[str]) -> str:
    """`encode` of the named attributes of `ad` only."""
    attrs = entries(ad)
    return "{" + ",".join(_pair(attrs[n.lower()]) for n in names) + "}"


def _pair(e: Entry) -> str:
    """`"name":"text"` of one attribute."""
    name, lit = e.name, e.lit
    if (
        type(lit) is str
        and lit.isascii()
        and lit.isprintable()
        and '"' not in lit
        and "\\" not in lit
        and name.isidentifier()
    ):
        # The common case, a plain string: neither ClassAd nor JSON escapes anything in
        # it, and skipping both escapers halves the cost of storing a proc.
        return f'"{name}":"\\"{lit}\\""'
    return f"{_json_str(name)}:{_json_str(_storable_text(e))}"


def _storable_text(e: Entry) -> str:
    """The stored text of an attribute; InvalidValue when it would not read back.

    The one guard every write of an ad passes: a value the queue cannot read again
    (a string holding a NUL, an expression nested past the parser's budget) would make
    the queue unreadable at its next start.
    """
    name, lit = e.name, e.lit
    if "\0" in name or not _encodes(name):
        raise InvalidValue(f"the attribute name {name!r} holds a NUL or a lone surrogate")
    kind = type(lit)
    if kind is str:
        if "\0" in lit:  # type: ignore[operator]
            raise InvalidValue(
                f"attribute {name} holds a NUL character, which a ClassAd string cannot hold"
            )
        try:
            return quote(lit)  # type: ignore[arg-type]
        except UnicodeEncodeError:
            raise InvalidValue(f"attribute {name} holds a lone surrogate, not text") from None
    if kind is int:
        return str(lit)
    try:
        text = _entry_text(e)
        if kind is not float and kind is not bool:
            _node(text)  # parsed once and kept: its next read finds it
    except ClassAdSyntaxError as exc:
        raise InvalidValue(
            f"attribute {name} cannot be stored: it would not read back ({exc.reason})"
        ) from None
    except RecursionError:
        raise InvalidValue(f"attribute {name} cannot be stored: nested too deeply") from None
    return text


def encode_plain(ad: ClassAd, special: frozenset[str]) -> str | None:
    """`encode(ad)`, or None when `ad` has one of the `special` names (lower case)."""
    attrs = entries(ad)
    if not attrs:
        return "{}"
    if not special.isdisjoint(attrs):
        return None
    return "{" + ",".join(map(_pair, attrs.values())) + "}"


def _encodes(name: str) -> bool:
    """Whether SQLite can take `name` (UTF-8: no lone surrogate)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_value(text: str) -> Any:
    """A stored expression back as what `ad[name] = ...` takes: a plain value or ExprTree."""
    if _plain_string(text):
        return text[1:-1]
    if text == "true":
        return True
    if text == "false":
        return False
    if _INT.fullmatch(text):
        return int(text)
    return ExprTree(text)


def _plain_string(text: str) -> bool:
    """Whether `text` is one string literal that quote() wrote without any escape.

    Without a backslash nothing was escaped, so the body is the string itself; a quote
    inside would mean an expression such as `"a" == Owner`.
    """
    return (
        len(text) > 1
        and text[0] == '"'
        and text[-1] == '"'
        and "\\" not in text
        and '"' not in text[1:-1]
    )


def _node(text: str) -> Node:
    node = _NODES.get(text)
    if node is None:
        node = to_node(parse_value(text))
        if len(_NODES) >= _NODES_MAX:
            _NODES.clear()
        _NODES[text] = node
    return node


def unreadable(text: str) -> str | None:
    """Why `decode(text)` would fail, or give what a ClassAd cannot hold; None when fine.

    For a database this code did not write (`_quarantine`): what it writes passes
    `_storable_text`.
    """
    try:
        stored = json.loads(text)
    except ValueError as exc:
        return f"not JSON ({exc})"
    except RecursionError:
        return "not JSON (nested too deeply)"
    if type(stored) is not dict:
        return "not a JSON object of attributes"
    for name, expr in stored.items():
        shown = name if name.isprintable() else repr(name)
        if type(expr) is not str:
            return f"attribute {shown} is stored as {type(expr).__name__}, not expression text"
        if "\0" in name:
            return f"the attribute name {shown} holds a NUL character"
        problem = None if _plain_string(expr) and "\0" not in expr else expression_problem(expr)
        if problem is not None:
            return f"attribute {shown} {problem}"
    return None


def expression_problem(text: str) -> str | None:
    """Why stored expression text does not parse (None when it does; kept parsed)."""
    if "\0" in text:
        return "holds a NUL character"
    try:
        _node(text)
    except ClassAdSyntaxError as exc:
        return f"does not parse: {exc.reason}"
    except RecursionError:
        return "does not parse: nested too deeply"
    return None


def decode(text: str) -> ClassAd:
    """A stored ad back as a ClassAd."""
    attrs: dict[str, Entry] = {}
    for name, expr in json.loads(text).items():
        if _plain_string(expr):
            # Most often unique to the job (its arguments, its files): not cached.
            attrs[name.lower()] = Entry(name, Literal(expr[1:-1]))
        else:
            attrs[name.lower()] = Entry(name, _node(expr))
    return from_entries(attrs)


def decode_shared(text: str, *, keep: bool = True) -> ClassAd:
    """`decode(text)`, from a cache: the same ad object for the same text. Callers must
    not change it (`copy.copy` first: entries are immutable, so that is a dict copy).
    `keep=False`: an ad not in the cache is not put there (a job of the history)."""
    ad = _ADS.get(text)
    if ad is None:
        ad = decode(text)
        if not keep:
            return ad
        if len(_ADS) >= _ADS_MAX:
            _ADS.clear()
        _ADS[text] = ad
    return ad


def remember(text: str, ad: ClassAd) -> None:
    """Let `decode_shared(text)` give a copy of `ad`, the ad `text` was encoded from, as
    decoding would give it: strings, integers and booleans as they are, and reals as
    their text reads back (a measured time rarely survives its 16 digits: such a job
    was decoded again at every read after its end). A job is read again soon after each
    change. Ads holding other expressions are left to be decoded."""
    if text in _ADS:
        return
    read_back: dict[str, Entry] = {}
    for key, entry in entries(ad).items():
        kind = type(entry.lit)
        if kind is float:
            stored = _entry_text(entry)
            try:
                if float(stored) != entry.lit:
                    read_back[key] = Entry(entry.name, _node(stored))
            except ValueError:  # real("INF") and the like
                return
        elif kind is not str and kind is not int and kind is not bool:
            return
    kept = copy.copy(ad)  # its owner may go on changing it
    entries(kept).update(read_back)
    if len(_ADS) >= _ADS_MAX:
        _ADS.clear()
    _ADS[text] = kept


def forget(text: str) -> None:
    """Drop the ad of `text` from `decode_shared`'s cache: the job it was stored for has
    changed or left the queue. (The cache is bounded, but a job leaves a dead text at
    each change: 1,000 jobs run through left ~5,000 ads pinning ~50 MB until it filled.)"""
    _ADS.pop(text, None)


def with_proc_id(ad: ClassAd, proc: int) -> None:
    """Set `ProcId` (the same as `ad["ProcId"] = proc`, without the conversions)."""
    entries(ad)["procid"] = Entry("ProcId", Literal(proc))


def overlay(cluster: ClassAd, proc: ClassAd, masked: Iterable[str] = ()) -> ClassAd:
    """The job ad: `cluster`'s attributes, minus `masked`, overlaid by `proc`'s."""
    attrs = entries(cluster).copy()
    for name in masked:
        attrs.pop(name.lower(), None)
    attrs.update(entries(proc))
    return from_entries(attrs)


def project(ad: ClassAd, names: Iterable[str]) -> ClassAd:
    """A copy of `ad` with only `ClusterId`, `ProcId` and the named attributes it has."""
    src = entries(ad)
    keys = ["clusterid", "procid", *(n.lower() for n in names)]
    return from_entries({k: src[k] for k in keys if k in src})
