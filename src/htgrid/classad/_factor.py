"""What a batch of ads has in common, and what each has of its own.

A batch of jobs sent as one cluster stores what they share once, in the cluster ad, and
each proc keeps the rest. Ads parsed from text share one syntax tree per repeated
`name = value` piece (the parser's cache), so most shared attributes are the same object;
constants are compared by value and type. Two expressions written differently count as
different: they stay in each ad, which is only less compact, never wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

from htgrid.classad._classad import ClassAd, Entry
from htgrid.classad._compile import _NOLIT

__all__ = ["common_attrs"]


def _same(a: Entry, b: Entry) -> bool:
    if a is b or (a.name == b.name and a.node is b.node):
        return True
    if a.name != b.name or a.lit is _NOLIT or type(a.lit) is not type(b.lit):
        return False
    # 1, 1.0 and true are different values; so are 0.0 and -0.0, which compare equal.
    return bool(a.lit == b.lit) and (type(a.lit) is not float or repr(a.lit) == repr(b.lit))


def common_attrs(
    ads: Sequence[ClassAd], own: frozenset[str] = frozenset()
) -> tuple[ClassAd, list[ClassAd]]:
    """(the attributes every ad of `ads` has the same, each ad without them): overlaying
    its part on the common ad gives each ad back. Names in `own` (lower case) stay in
    each ad whatever their values."""
    common = ClassAd()
    if not ads:
        return common, []
    first, rest = ads[0]._attrs, [ad._attrs for ad in ads[1:]]
    shared = common._attrs
    for key, entry in first.items():
        if key in own:
            continue
        if all((other := attrs.get(key)) is not None and _same(entry, other) for attrs in rest):
            shared[key] = entry
    parts: list[ClassAd] = []
    for ad in ads:
        part = ClassAd()
        part._attrs = {key: e for key, e in ad._attrs.items() if key not in shared}
        parts.append(part)
    return common, parts
