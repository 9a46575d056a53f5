"""An ad in new syntax split into its `name = expression` pieces, without the tokenizer.

String literals, quoted names and brackets are kept whole by one regular expression, so
a `;` or `]` inside them does not split. Anything the splitter is not sure of (comments,
a quoted attribute name, unbalanced brackets, text after the ad) gives None: the caller
then hands the ad to the full parser, whose answer (or error) is the one that counts.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["BLANK", "piece_attr", "pieces_from", "split_attrs", "split_pieces"]

_PIECES: Final = re.compile(
    r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[\[\]{}();]|[^"\'\[\]{}();]+', re.S
)
# `Name =` at the start of a piece (not `==`, `=?=`: those are no assignment).
_ATTR_NAME: Final = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(?![=?!])")
# Words the lexer reads as values or operators: never an attribute name.
_RESERVED: Final = frozenset({"true", "false", "undefined", "error", "is", "isnt"})
_OPEN: Final = frozenset("[{(")
_CLOSE: Final = frozenset("]})")


def split_pieces(text: str) -> list[str] | None:
    """The `name = expression` pieces of an ad (some may be blank), or None when unsure."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")) or "/*" in body or "//" in body:
        return None
    found = pieces_from(body, 1)
    return None if found is None else found[0]


def pieces_from(body: str, start: int) -> tuple[list[str], list[int]] | None:
    """The pieces of the ad `body` (`[` ... `]`, no comments) from `start`, just after its
    `[` or after a `;` between two pieces, to its `]`; and for each piece but the last,
    the offset just after the `;` that ends it. None when unsure.

    Where a piece ends depends only on the text before: two ads whose text is the same up
    to one of those offsets have the same pieces up to it.
    """
    end = len(body) - 1
    pieces: list[str] = []
    ends: list[int] = []
    current: list[str] = []
    depth = 0
    at = start
    for chunk in _PIECES.findall(body, start, end):
        at += len(chunk)
        first = chunk[0]
        if first == ";" and depth == 0:
            pieces.append("".join(current))
            ends.append(at)
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
    if at != end:
        return None  # an unterminated string or quoted name: nothing matched some of it
    if depth != 0:
        return None
    pieces.append("".join(current))
    return pieces, ends


#: What `piece_attr` gives for a blank piece (`;;`, or a `;` before the `]`).
BLANK: Final = ("", "")


def piece_attr(piece: str) -> tuple[str, str] | None:
    """A piece's `(name, value text)`, BLANK for a blank one, None when it is no
    `name = ...` or its name is a reserved word."""
    match = _ATTR_NAME.match(piece)
    if match is None:
        return None if piece.strip() else BLANK
    name = match.group(1)
    if name.lower() in _RESERVED:
        return None
    return name, piece[match.end() :]


# A flat ad (no nested ad, list or quoted name; parentheses at most three deep) in one
# regular expression: a status ad of eighty attributes splits in ~65 us instead of
# ~150 through the pieces. Each match is one `Name = value;`, and the matches must tile
# the ad: where they do not, the pieces decide.
_STRING: Final = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'


def _flat_value(depth: int) -> str:
    """A value with no `;` outside strings, its parentheses at most `depth` deep."""
    inside = rf"\({_flat_value(depth - 1)}\)|" if depth else ""
    return rf'(?:[^;"()]++|{inside}{_STRING})*+'


_FLAT: Final = _flat_value(3)
_FLAT_PAIR: Final = re.compile(
    r"(\s*+(?!(?i:true|false|undefined|error|is|isnt)\b)([A-Za-z_][A-Za-z0-9_]*+)\s*+"
    rf"=(?![=?!]))({_FLAT})(?:;|\Z)"
)
_NOT_FLAT: Final = ("'", "[", "]", "{", "}", "/*", "//")


def _flat_pairs(text: str) -> list[tuple[str, str]] | None:
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        return None
    inner = body[1:-1]
    if any(mark in inner for mark in _NOT_FLAT):
        return None
    last = inner.rstrip()
    if last.endswith(";"):  # a blank last piece: the pieces leave it out too
        inner = last[:-1]
    found = _FLAT_PAIR.findall(inner)
    if not found:
        return None
    heads, names, values = zip(*found, strict=True)
    # Matches never overlap: they cover the ad, with nothing left out between them, when
    # their lengths with a `;` each add up to the ad's and the one `;` the last has not.
    if sum(map(len, heads)) + sum(map(len, values)) + len(found) != len(inner) + 1:
        return None
    return list(zip(names, values, strict=True))


def split_attrs(text: str) -> list[tuple[str, str]] | None:
    """The ad's `(name, value text)` pairs in order (a name may repeat), or None when
    unsure: what `split_pieces` is unsure of, a piece that `piece_attr` is unsure of."""
    flat = _flat_pairs(text)
    return flat if flat is not None else _piece_pairs(text)


def _piece_pairs(text: str) -> list[tuple[str, str]] | None:
    pieces = split_pieces(text)
    if pieces is None:
        return None
    pairs: list[tuple[str, str]] = []
    for piece in pieces:
        pair = piece_attr(piece)
        if pair is None:
            return None
        if pair is not BLANK:
            pairs.append(pair)
    return pairs
