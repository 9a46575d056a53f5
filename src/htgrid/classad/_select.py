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

import re
from collections.abc import Iterable
from typing import Final

from htgrid.classad._classad import ClassAd, Entry
from htgrid.classad._parser import parse_expr

__all__ = ["select_attrs"]

# String literals and quoted names whole (so no ; or ] inside them counts), single
# brackets, and runs of anything else.
_PIECES: Final = re.compile(
    r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[\[\]{}();]|[^"\'\[\]{}();]+', re.S
)
_NAME: Final = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)")
_OPEN: Final = frozenset("[{(")
_CLOSE: Final = frozenset("]})")


def select_attrs(text: str, names: Iterable[str]) -> ClassAd:
    """The attributes of `names` found in the new-syntax ad `text`, in an ad of their own.

    Raises ClassAdSyntaxError when `text` is not an ad, or a wanted value does not parse;
    the other values are not looked at.
    """
    wanted = {name.lower() for name in names}
    pieces = _split(text)
    if pieces is None:  # not plain enough to split safely: the parser decides
        return _whole(text, wanted)
    ad = ClassAd()
    for piece in pieces:
        match = _NAME.match(piece)
        if match is None:
            if piece.strip():
                return _whole(text, wanted)
            continue
        name = match.group(1)
        if name.lower() in wanted:
            ad._attrs[name.lower()] = Entry(name, parse_expr(piece[match.end() :]))
    return ad


def _split(text: str) -> list[str] | None:
    """The `name = expression` pieces of an ad, or None when unsure."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")) or "/*" in body or "//" in body:
        return None
    pieces: list[str] = []
    current: list[str] = []
    depth = 0
    chunks = _PIECES.findall(body, 1, len(body) - 1)
    if sum(map(len, chunks)) != len(body) - 2:
        return None  # an unterminated string or quoted name: nothing matched some of it
    for chunk in chunks:
        first = chunk[0]
        if first == ";" and depth == 0:
            pieces.append("".join(current))
            current = []
            continue
        if first in _OPEN:
            depth += 1
        elif first in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif first == "'" and depth == 0 and not "".join(current).strip():
            return None  # a quoted attribute name: rare, and the parser's business
        current.append(chunk)
    if depth != 0:
        return None
    pieces.append("".join(current))
    return pieces


def _whole(text: str, wanted: set[str]) -> ClassAd:
    full = ClassAd(text)
    ad = ClassAd()
    for key, entry in full._attrs.items():
        if key in wanted:
            ad._attrs[key] = entry
    return ad
