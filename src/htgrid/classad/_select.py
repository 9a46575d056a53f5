"""A few attributes of a long ad in new syntax, without parsing the others.

A grid manager reads a dozen attributes of each remote job's status ad, and a status ad
has a hundred or more: the whole parse cost ten times what was used. Here the ad is only
split into its `name = expression` pieces (string literals, quoted names and brackets
kept whole by one regular expression), and only the wanted pieces' expressions are
parsed. Anything this splitter is not sure of (comments, a quoted attribute name,
unbalanced brackets) is handed to the full parser, so the answer is always the one a
whole parse gives for those attributes.
"""

from __future__ import annotations

from collections.abc import Iterable

from htgrid.classad._classad import ClassAd, Entry
from htgrid.classad._parser import parse_record_value
from htgrid.classad._split import split_attrs

__all__ = ["select_attrs"]


def select_attrs(text: str, names: Iterable[str]) -> ClassAd:
    """The attributes of `names` found in the new-syntax ad `text`, in an ad of their own.

    Raises ClassAdSyntaxError when `text` is not an ad, or a wanted value does not parse;
    the other values are not looked at.
    """
    wanted = {name.lower() for name in names}
    pairs = split_attrs(text)
    if pairs is None:  # not plain enough to split safely: the parser decides
        return _whole(text, wanted)
    ad = ClassAd()
    attrs = ad._attrs
    for name, value in [pair for pair in pairs if pair[0].lower() in wanted]:
        attrs[name.lower()] = Entry(name, parse_record_value(value))
    return ad


def _whole(text: str, wanted: set[str]) -> ClassAd:
    full = ClassAd(text)
    ad = ClassAd()
    for key, entry in full._attrs.items():
        if key in wanted:
            ad._attrs[key] = entry
    return ad
