"""Ads read in a row that begin as the one before: only what follows the shared pieces is
split and looked up.

A grid manager sends the thousand ads of a cluster one after another, each the cluster's
~70 `name = value` pieces with the job's own two or three at the end. Splitting 2 KiB of
text and looking up every piece took ~85 µs an ad and making its entries ~50 µs more;
finding how many pieces the last ad shares takes a few comparisons of the text, and
their entries are copied as one dict.

A piece is read on its own (`name = value`, its value parsed through the parser's cache),
so equal text up to the end of a piece means equal pieces up to there (see
`pieces_from`). Only a plain one-line ad is read here: `[` first, `]` last, no comment.
Anything else, or anything unsure, gives None and the caller's parser answers.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

from htgrid.classad._ad import Entry
from htgrid.classad._parser import parse_record_value
from htgrid.classad._split import BLANK, piece_attr, pieces_from
from htgrid.errors import ClassAdSyntaxError

__all__ = ["read_entries"]

#: A piece's entry under its lower-case name; None for a blank piece.
Keyed = tuple[str, Entry] | None

_ENTRIES: dict[str, Keyed] = {}
_LIMIT: Final = 20_000


class _Last(NamedTuple):
    """The last ad read: its text, where its pieces end, their entries, and the entries
    of its first `shared` pieces as a dict (the one most often asked for next)."""

    text: str
    ends: tuple[int, ...]
    keyed: tuple[Keyed, ...]
    shared: int
    head: dict[str, Entry]


# Replaced whole, never changed: threads reading ads at once only miss the shortcut.
_last: _Last | None = None


def read_entries(text: str) -> dict[str, Entry] | None:
    """The entries (lower-case name -> Entry) of the one-line ad `text`, or None when it
    is not one this reads (the caller parses it then)."""
    global _last
    if not text.startswith("[") or not text.endswith("]") or "/*" in text or "//" in text:
        return None
    last = _last
    shared = 0 if last is None else _shared_pieces(text, last)
    tail = pieces_from(text, last.ends[shared - 1] if last is not None and shared else 1)
    if tail is None:
        return None
    pieces, tail_ends = tail
    tail_keyed: list[Keyed] = []
    for piece in pieces:
        item = _keyed(piece)
        if item is False:
            return None
        tail_keyed.append(item)
    if last is not None and shared == last.shared:
        head = last.head
    else:
        head = _entries(last.keyed[:shared] if last is not None else ())
    entries = head.copy()
    _add(entries, tail_keyed)
    start = last.ends[:shared] if last is not None else ()
    keyed = (last.keyed[:shared] if last is not None else ()) + tuple(tail_keyed)
    _last = _Last(text, start + tuple(tail_ends), keyed, shared, head)
    return entries


def _shared_pieces(text: str, last: _Last) -> int:
    """How many leading pieces (each with its `;`) `text` has as `last.text` has them."""
    ends, before = last.ends, last.text
    low, high = 0, len(ends)
    while low < high:  # the largest k whose first k pieces match
        mid = (low + high + 1) // 2
        if text.startswith(before[: ends[mid - 1]]):
            low = mid
        else:
            high = mid - 1
    return low


def _keyed(piece: str) -> Keyed | Literal[False]:
    """A piece's entry (cached by its text); None when blank, False when unsure."""
    try:
        return _ENTRIES[piece]  # (not `in` then `[]`: another thread may clear it between)
    except KeyError:
        pass
    pair = piece_attr(piece)
    if pair is None:
        return False
    if pair is BLANK:
        keyed: Keyed = None
    else:
        try:
            node = parse_record_value(pair[1])
        except ClassAdSyntaxError:
            return False  # the whole parse gives the error, with its place in the ad
        keyed = (pair[0].lower(), Entry(pair[0], node))
    if len(_ENTRIES) >= _LIMIT:
        _ENTRIES.clear()
    _ENTRIES[piece] = keyed
    return keyed


def _entries(keyed: tuple[Keyed, ...]) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    _add(entries, keyed)
    return entries


def _add(entries: dict[str, Entry], keyed: tuple[Keyed, ...] | list[Keyed]) -> None:
    for item in keyed:
        if item is None:
            continue
        key, entry = item
        previous = entries.get(key)
        # A repeated name: the last value wins, the first spelling stays (as the parser).
        entries[key] = entry if previous is None else Entry(previous.name, entry.node)
