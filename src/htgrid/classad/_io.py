"""Reading ads from text in the three syntaxes: new (`[...]`), old (lines), and JSON."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import IO

from htgrid.classad._classad import ClassAd
from htgrid.classad._lexer import EOF, OP, tokenize
from htgrid.classad._parser import _Parser, parse_old_line
from htgrid.classad.adjson import iter_json_ads
from htgrid.errors import ClassAdException, ClassAdSyntaxError

__all__ = ["ParserType", "iter_ads", "parseAds", "parseNext", "parseOne"]


class ParserType(enum.IntEnum):
    """Which syntax to read, as classad2 numbers them."""

    Auto = -1
    Old = 0
    XML = 1
    JSON = 2
    New = 3
    FileAuto = 4


def _detect(text: str, pos: int) -> ParserType:
    i = pos
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    if i < n and text[i] in "[/":
        return ParserType.New
    if i < n and text[i] == "{":
        return ParserType.JSON
    return ParserType.Old


def _new_ads(text: str, pos: int, origin: str) -> Iterator[tuple[ClassAd, int]]:
    tokens = tokenize(text[pos:], origin=origin)
    parser = _Parser(text[pos:], tokens, origin)
    while tokens[parser.i][0] != EOF:
        tok = tokens[parser.i]
        if not (tok[0] == OP and tok[1] == "["):
            raise parser.fail("expected '[' to open a ClassAd")
        record = parser.record(top=True)
        end = tokens[parser.i - 1][2] + 1  # just past the closing bracket
        yield ClassAd._from_pairs(record.attrs), pos + end


def _old_ads(text: str, pos: int, origin: str) -> Iterator[tuple[ClassAd, int]]:
    pairs: list[tuple[str, object]] = []
    offset = pos
    n = len(text)
    while offset < n:
        nl = text.find("\n", offset)
        end = n if nl < 0 else nl + 1
        line = text[offset:end]
        stripped = line.strip()
        if not stripped:
            if pairs:
                yield ClassAd._from_pairs(pairs), end  # type: ignore[arg-type]
                pairs = []
        elif not stripped.startswith("#") and not _comment_only(stripped):
            try:
                pairs.append(parse_old_line(line.rstrip("\r\n"), origin=origin))
            except ClassAdSyntaxError as err:
                raise ClassAdSyntaxError(
                    err.reason, text=text, offset=offset + err.offset, origin=origin
                ) from None
        offset = end
    if pairs:
        yield ClassAd._from_pairs(pairs), n  # type: ignore[arg-type]


def _comment_only(line: str) -> bool:
    """A line holding nothing but a // or /* */ comment."""
    return line.startswith("//") or (
        line.startswith("/*") and line.endswith("*/") and "*/" not in line[2:-2]
    )


def iter_ads(
    text: str, parser: ParserType = ParserType.Auto, *, origin: str = "", pos: int = 0
) -> Iterator[tuple[ClassAd, int]]:
    """Each ad in `text` with the offset just past it; a syntax error names `origin` (a
    file name) with the line, as `parseAds` cannot."""
    if parser in (ParserType.Auto, ParserType.FileAuto):
        parser = _detect(text, pos)
    if parser == ParserType.New:
        yield from _new_ads(text, pos, origin)
    elif parser == ParserType.Old:
        yield from _old_ads(text, pos, origin)
    elif parser == ParserType.JSON:
        for pairs, end in iter_json_ads(text, pos):
            yield ClassAd._from_pairs(pairs), end
    else:
        raise ClassAdException("the XML ClassAd syntax is not supported by htgrid")


def _text_of(input: str | IO[str]) -> str:
    if isinstance(input, str):
        return input
    return "".join(input)


def parseAds(input: str | IO[str], parser: ParserType = ParserType.Auto) -> Iterator[ClassAd]:
    """Each ad in `input` (a string or a text file), one after another."""
    if isinstance(input, str):
        return (ad for ad, _ in iter_ads(input, parser))
    return _ads_from_file(input, parser)


def _ads_from_file(input: IO[str], parser: ParserType) -> Iterator[ClassAd]:
    start = input.tell() if input.seekable() else 0
    text = "".join(input)
    for ad, end in iter_ads(text, parser):
        if input.seekable():
            input.seek(start + end)
        yield ad


def parseOne(input: str | IO[str], parser: ParserType = ParserType.Auto) -> ClassAd:
    """All ads in `input` merged into one (later attributes win)."""
    result = ClassAd()
    for ad, _ in iter_ads(_text_of(input), parser):
        result._attrs.update(ad._attrs)
    return result


def parseNext(input: str | IO[str], parser: ParserType = ParserType.Auto) -> ClassAd | None:
    """The first ad in `input`; a file is left positioned after it."""
    if isinstance(input, str):
        for ad, _ in iter_ads(input, parser):
            return ad
        return None
    # Read a line at a time so the stream stops just past this ad.
    buffered = ""
    while True:
        line = input.readline()
        buffered += line
        if not line or (parser != ParserType.JSON and not buffered.strip()):
            if not line:
                break
            continue
        kind = (
            parser if parser not in (ParserType.Auto, ParserType.FileAuto) else _detect(buffered, 0)
        )
        if kind == ParserType.Old:
            if line.strip() == "":
                break
            continue
        try:
            for ad, _ in iter_ads(buffered, kind):
                return ad
        except ClassAdSyntaxError:
            continue
    for ad, _ in iter_ads(buffered, parser):
        return ad
    return None
