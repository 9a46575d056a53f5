"""ClassAds as CEDAR carries them: `Name = expr` lines in the old syntax.

`ad_lines` writes an ad's lines (a projection keeps the attributes it names), `parse_ad`
reads received lines into a ClassAd (CedarError naming the line that does not parse),
and `literal_lines` writes the security handshake's ads, whose values the peer reads as
literals only (at most 100 of them).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from htgrid.classad import ClassAd, ParserType, parseOne, quote
from htgrid.classad.fast import entries
from htgrid.classad.syntax import unparse
from htgrid.errors import HTGridError
from htgrid.net._errors import CedarError

__all__ = ["Literal", "ad_lines", "line_name", "literal_lines", "parse_ad", "split_lines"]

Literal = str | int | bool | float


def split_lines(ad: ClassAd) -> list[bytes]:
    """Every attribute of `ad` as one encoded `Name = expr` line, its strings escaped as
    HTCondor escapes them on the wire (a newline as `\\n`: one line each, always)."""
    return [
        f"{entry.name} = {unparse(entry.node)}".encode("utf-8", "surrogateescape")
        for entry in entries(ad).values()
    ]


def ad_lines(ad: ClassAd, projection: Collection[str] | None = None) -> list[bytes]:
    """The lines of `ad`, only those of `projection` (lower-case names) when given."""
    lines = split_lines(ad)
    if not projection:
        return lines
    return [line for line in lines if line_name(line) in projection]


def line_name(line: bytes) -> str:
    """The lower-case attribute name a line sets."""
    return line.partition(b"=")[0].strip().decode("utf-8", "surrogateescape").lower()


def parse_ad(lines: Sequence[str], what: str) -> ClassAd:
    """The ad `lines` make; CedarError saying which line does not parse.

    The lines are HTCondor's old syntax, but their strings are escaped as in the new one
    (`\\n` is a newline, `\\\\` a backslash), as HTCondor's own reader takes them: they
    are read as the attributes of one new-syntax ad.
    """
    if not lines:
        return ClassAd()
    try:
        return parseOne("[\n" + ";\n".join(lines) + "\n]", ParserType.New)
    except HTGridError:
        pass
    for index, line in enumerate(lines):
        try:
            parseOne(f"[{line}]", ParserType.New)
        except HTGridError as exc:
            shown = line if len(line) <= 120 else line[:117] + "..."
            raise CedarError(f"{what}, attribute line {index + 1} {shown!r}: {exc}") from None
    raise CedarError(f"{what} does not parse as a ClassAd")


def literal(value: Literal) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote(value)
    return repr(value)


def literal_lines(values: Mapping[str, Literal]) -> list[bytes]:
    """A handshake ad: literals only, as the peer's getPODClassAd reads them."""
    if len(values) > 100:
        raise CedarError(f"a handshake ad of {len(values)} attributes (at most 100)")
    return [f"{name} = {literal(v)}".encode() for name, v in values.items()]
