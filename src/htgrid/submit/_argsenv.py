"""Argument and environment strings in HTCondor's V1 and V2 syntaxes.

Ported from the rules of condor_utils/condor_arglist.cpp (ArgList) and
env.cpp (Env):

* V1 ("old") arguments: split on whitespace; `\\"` is a literal quote and a
  bare `"` is an error. V1 environment: `NAME=VALUE` entries separated by `;`.
* V2 ("new") syntax, written inside double quotes in a submit file: `""` is a
  literal `"`, whitespace separates words and single quotes group them, with
  `''` a literal `'` inside quotes.
* The canonical V2 form quotes each run of whitespace or `'` separately, so
  `'b c'` prints as `b' 'c`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from htgrid.submit._errors import SubmitError

__all__ = [
    "ArgList",
    "Environment",
    "is_v2_quoted",
    "join_v2",
    "parse_args_v1_wacked_or_v2_quoted",
    "parse_args_v2_quoted",
]

_WS = " \t\n\r"
_WORDS = re.compile(r"[^ \t\n\r]+")  # the words between runs of _WS
_PLAIN_WORD = re.compile(r"[^ \t\n\r']+")  # a word V2 writes as it is
_SPACE = re.compile(r"[ \t\n\r]")


def is_v2_quoted(text: str) -> bool:
    """Whether `text` is in the double-quoted V2 form."""
    return text.lstrip().startswith('"')


def v2_quoted_to_raw(text: str) -> str:
    """Strip the outer double quotes of a V2 string; `""` becomes `"`."""
    body = text.lstrip()
    assert body.startswith('"')
    out: list[str] = []
    pos = 1
    while True:
        quote = body.find('"', pos)
        if quote < 0:
            raise SubmitError("Unterminated double-quote.")
        out.append(body[pos:quote])
        if body[quote + 1 : quote + 2] == '"':
            out.append('"')
            pos = quote + 2
            continue
        if body[quote + 1 :].strip():
            raise SubmitError(
                "Unexpected characters following double-quote.  Did you forget to escape the "
                "double-quote by repeating it?  Here is the quote and trailing characters: "
                f"{body[quote:]}\n"
            )
        return "".join(out)


def split_v2_raw(text: str) -> list[str]:
    """Words of a V2 raw string (single quotes group, `''` inside is `'`)."""
    if "'" not in text:
        return _WORDS.findall(text)
    words: list[str] = []
    buf: list[str] = []
    token = False
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch == "'":
            start = pos
            pos += 1
            while True:
                if pos >= len(text):
                    raise SubmitError(f"Unbalanced quote starting here: {text[start:]}")
                if text[pos] == "'":
                    if text[pos + 1 : pos + 2] == "'":
                        buf.append("'")
                        pos += 2
                        continue
                    break
                buf.append(text[pos])
                pos += 1
            token = True
            pos += 1
        elif ch in _WS:
            pos += 1
            if token:
                words.append("".join(buf))
                buf = []
                token = False
        else:
            token = True
            buf.append(ch)
            pos += 1
    if token:
        words.append("".join(buf))
    return words


def _append_v2(word: str, result: str) -> str:
    """condor_arglist.cpp's append_arg: quote whitespace and `'` individually."""
    if result:
        result += " "
    if _PLAIN_WORD.fullmatch(word):
        return result + word
    if not word:
        result += "''"
    for ch in word:
        if ch in _WS or ch == "'":
            # join with a quoted section that ends right here
            result = result[:-1] if result.endswith("'") else result + "'"
            if ch == "'":
                result += "'"
            result += ch + "'"
        else:
            result += ch
    return result


def join_v2(words: list[str]) -> str:
    """The canonical V2 raw form of a word list."""
    result = ""
    for word in words:
        result = _append_v2(word, result)
    return result


@dataclass(frozen=True, slots=True)
class ArgList:
    """Parsed arguments and whether they were written in V1 syntax."""

    words: tuple[str, ...]
    input_was_v1: bool

    def v1_raw(self) -> str:
        """The V1 form (words joined with spaces); words with whitespace cannot be V1."""
        for word in self.words:
            if _SPACE.search(word):
                raise SubmitError(f"Cannot represent '{word}' in V1 arguments syntax.")
        return " ".join(self.words)

    def v2_raw(self) -> str:
        """The canonical V2 form."""
        return join_v2(list(self.words))


def parse_args_v2_quoted(text: str) -> ArgList:
    """Arguments that must be in V2 form (`arguments2`)."""
    if not is_v2_quoted(text):
        return ArgList(tuple(split_v2_raw(text)), False)
    return ArgList(tuple(split_v2_raw(v2_quoted_to_raw(text))), False)


def parse_args_v1_wacked_or_v2_quoted(text: str) -> ArgList:
    """`arguments`: V2 when double-quoted, else V1 with `\\"` for a quote."""
    if is_v2_quoted(text):
        return parse_args_v2_quoted(text)
    if '"' not in text and "\\" not in text:
        return ArgList(tuple(_WORDS.findall(text)), True)
    raw: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch == '"':
            raise SubmitError(f"Found illegal unescaped double-quote: {text[pos:]}")
        if ch == "\\" and text[pos + 1 : pos + 2] == '"':
            raw.append('"')
            pos += 2
            continue
        raw.append(ch)
        pos += 1
    return ArgList(tuple(_split_ws("".join(raw))), True)


def _split_ws(text: str) -> list[str]:
    return _WORDS.findall(text)


class Environment:
    """An environment under construction; names are kept sorted, as HTCondor does."""

    def __init__(self) -> None:
        self._vars: dict[str, str] = {}
        self.input_was_v1 = False

    def __len__(self) -> int:
        return len(self._vars)

    def __contains__(self, name: object) -> bool:
        return name in self._vars

    def set(self, name: str, value: str) -> None:
        """Set one variable."""
        self._vars[name] = value

    def _set_entry(self, entry: str) -> None:
        name, eq, value = entry.partition("=")
        if not eq:
            raise SubmitError(f"ERROR: Missing '=' after environment variable '{entry}'.")
        if not name:
            raise SubmitError(f"ERROR: missing variable in '{entry}'.")
        self._vars[name] = value

    def merge_v1_raw(self, text: str, delim: str = ";") -> None:
        """Merge `NAME=VALUE;NAME=VALUE` (newlines also separate)."""
        self.input_was_v1 = True
        pos = 0
        while pos < len(text):
            while pos < len(text) and text[pos] in _WS:
                pos += 1
            start = pos
            while pos < len(text) and text[pos] not in ("\n", delim):
                pos += 1
            entry = text[start:pos]
            pos += 1
            if entry:
                self._set_entry(entry)

    def merge_v2_raw(self, text: str) -> None:
        """Merge V2 raw text: words of the form NAME=VALUE."""
        for word in split_v2_raw(text):
            self._set_entry(word)

    def merge_v2_quoted(self, text: str) -> None:
        """Merge the double-quoted V2 form."""
        if not is_v2_quoted(text):
            raise SubmitError("Expected a double-quoted V2 environment string.")
        self.merge_v2_raw(v2_quoted_to_raw(text))

    def merge_v1_raw_or_v2_quoted(self, text: str) -> None:
        """`environment`: V2 when double-quoted, else V1."""
        if is_v2_quoted(text):
            self.merge_v2_quoted(text)
        else:
            self.merge_v1_raw(text)

    def v2_raw(self) -> str:
        """The canonical V2 form, names in sorted order."""
        return join_v2([f"{name}={value}" for name, value in sorted(self._vars.items())])

    def v1_raw(self, delim: str = ";") -> str:
        """The V1 form; values holding the delimiter or a newline cannot be V1."""
        entries = []
        for name, value in sorted(self._vars.items()):
            if delim in value or "\n" in value:
                raise SubmitError(
                    f"Environment entry is not compatible with V1 syntax: {name}={value}"
                )
            entries.append(f"{name}={value}")
        return delim.join(entries)


def is_safe_v1_value(value: str, delim: str = ";") -> bool:
    """Whether a value can be written in V1 environment syntax."""
    return delim not in value and "\n" not in value


def is_safe_v2_value(value: str) -> bool:
    """Whether a value can be written in V2 environment syntax (no newlines)."""
    return "\n" not in value and "\r" not in value
