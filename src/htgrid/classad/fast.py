"""The fast path through ads, for code that stores, moves or matches many of them (the
queue's store, the negotiator, the collector).

The mapping API converts every value on the way in and out (`ad[name]` makes a Python
value, `ad[name] = v` a tree), and for 100,000 job ads that was most of the cost. Here
nothing is converted: an ad is its table of `Entry` objects, lower-case name -> entry,
in the order the attributes were set. Entries and their trees (see `syntax`) are
immutable and may be shared between ads, so copying an ad is copying a dict.
"""

from __future__ import annotations

from typing import Final

from htgrid.classad._classad import ClassAd, Entry
from htgrid.classad._compile import _NOLIT, compiled
from htgrid.classad._match import rank, requirements_hold, symmetric_match

__all__ = [
    "NOT_CONSTANT",
    "Entry",
    "attr_value",
    "compile_expressions",
    "entries",
    "from_entries",
    "rank",
    "requirements_hold",
    "symmetric_match",
]

#: `Entry.lit` of an attribute whose expression is not a constant.
NOT_CONSTANT: Final[object] = _NOLIT

_new = ClassAd.__new__


def entries(ad: ClassAd) -> dict[str, Entry]:
    """The ad's own table of attributes, lower-case name -> Entry: the ad itself, not a
    copy. Store only `Entry(name, tree)` under `name.lower()`; delete freely."""
    return ad._attrs


def from_entries(table: dict[str, Entry]) -> ClassAd:
    """An ad whose table is `table` itself (no copy): hand over a dict no one else changes.

    Keys are the entries' names in lower case, as `entries` gives them.
    """
    ad = _new(ClassAd)  # no __init__: a job read is one of these, 100,000 at a time
    ad._attrs = table
    ad._parent = None
    return ad


def attr_value(ad: ClassAd, key: str) -> object:
    """The value of the attribute named `key` (lower case): a constant as its entry holds
    it (`Entry.lit`), any other expression evaluated in the ad; None when missing."""
    entry = ad._attrs.get(key)
    if entry is None:
        return None
    lit = entry.lit
    return ad.eval(entry.name) if lit is _NOLIT else lit


def compile_expressions(ad: ClassAd) -> None:
    """Compile each of the ad's expressions now, as its first evaluation would; raises
    what compiling raises (a RecursionError for one nested past Python's stack)."""
    for entry in ad._attrs.values():
        if entry.lit is _NOLIT:
            compiled(entry.node)
