"""The ClassAd lexer: text to tokens, as HTCondor's lexer.cpp splits it.

Tokens are `(kind, value, offset)` tuples. Kinds: INT, REAL, STR, ID (an identifier or a
'quoted name'), KW (true/false/undefined/error, value lower-cased), OP (punctuation,
`is`/`isnt` given as `=?=`/`=!=`), EOF.
"""

from __future__ import annotations

import re
from typing import Final

from htgrid.classad._values import ERROR, INT64_MAX, INT64_MIN, UNDEFINED
from htgrid.errors import ClassAdSyntaxError

__all__ = ["EOF", "ID", "INT", "KW", "OP", "REAL", "STR", "Token", "tokenize", "unescape"]

INT: Final = 1
REAL: Final = 2
STR: Final = 3
ID: Final = 4
KW: Final = 5
OP: Final = 6
EOF: Final = 7

Token = tuple[int, object, int]

_TOKEN = re.compile(
    r"""
    (?P<ws>(?:\s+|/\*.*?\*/|//[^\n]*(?:\n|\Z))+)
  | (?P<real>(?:\d+\.\d+|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>\d+)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<qid>'(?:[^'\\]|\\.)*')
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>=\?=|=!=|>>>|&&|\|\||==|!=|<=|>=|<<|>>|\?\s*:|[.*/%+\-~^&|!<>=?:;,\[\](){}])
    """,
    re.VERBOSE | re.DOTALL,
)
# After a token of these kinds a '-' is the binary operator; elsewhere '-' glued to a
# digit is part of a negative number literal (lexer.cpp does the same: `3--2` is 5).
_VALUE_END = frozenset({")", "]", "}"})
_KEYWORDS: Final = {
    "true": True,
    "false": False,
    "undefined": UNDEFINED,
    "error": ERROR,
}
_WORD_OPS: Final = {"is": "=?=", "isnt": "=!="}
_SIMPLE_ESCAPES: Final = {
    '"': '"',
    "'": "'",
    "?": "?",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
}


def unescape(body: str) -> str | None:
    """Decode a string literal's escapes; None when it holds a NUL (an invalid token).

    Octal escapes give bytes, read back as UTF-8 (what HTCondor's quoting writes).
    """
    if "\\" not in body:
        return None if "\0" in body else body
    raw = body.encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        if c != 0x5C or i + 1 == n:
            out.append(c)
            i += 1
            continue
        d = raw[i + 1]
        if 0x30 <= d <= 0x37:
            # Up to three octal digits, but only two when the first is above 3.
            limit = 3 if d <= 0x33 else 2
            j = i + 1
            code = 0
            while j < n and j - i - 1 < limit and 0x30 <= raw[j] <= 0x37:
                code = code * 8 + raw[j] - 0x30
                j += 1
            if code == 0:
                return None
            out.append(code)
            i = j
            continue
        ch = chr(d)
        out.extend(_SIMPLE_ESCAPES.get(ch, ch).encode("utf-8", "surrogateescape"))
        i += 2
    if 0 in out:  # a raw NUL beside the escapes
        return None
    return out.decode("utf-8", "surrogateescape")


def _int_literal(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > 1 and digits[0] == "0":
        raise ValueError("leading zero")
    n = int(text)
    # lexer.cpp turns a literal past int64 into 0 rather than failing.
    return n if INT64_MIN <= n <= INT64_MAX else 0


def _old_string(text: str, start: int) -> tuple[str, int]:
    """Scan an old-syntax string literal starting at the quote; return (value, end).

    Old ClassAds take a backslash literally except before a quote, and a backslash-quote
    that ends the line closes the string (the backslash is then a plain character).
    """
    i = start + 1
    out: list[str] = []
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == '"':
            rest = text[i + 2 :].split("\n", 1)[0]
            if rest.strip() == "":
                out.append("\\")
                return "".join(out), i + 2
            out.append('"')
            i += 2
            continue
        if c == '"':
            return "".join(out), i + 1
        if c == "\n":
            break
        out.append(c)
        i += 1
    raise ClassAdSyntaxError("unterminated string literal", text=text, offset=start)


def tokenize(text: str, *, old: bool = False, origin: str = "") -> list[Token]:
    """Split `text` into tokens, ending with an EOF token.

    `old` selects old-syntax string literals. Raises ClassAdSyntaxError on a character
    or literal the language does not allow.
    """
    tokens: list[Token] = []
    append = tokens.append
    pos = 0
    n = len(text)
    match = _TOKEN.match
    while pos < n:
        if old and text[pos] == '"':
            value, end = _old_string(text, pos)
            append((STR, value, pos))
            pos = end
            continue
        m = match(text, pos)
        if m is None:
            if text.startswith("//", pos):
                # lexer.cpp quirk kept on purpose: a // comment must end with a newline.
                raise ClassAdSyntaxError(
                    "a // comment must end with a newline", text=text, offset=pos, origin=origin
                )
            if text.startswith("/*", pos):
                raise ClassAdSyntaxError(
                    "unterminated /* comment", text=text, offset=pos, origin=origin
                )
            what = "unterminated string literal" if text[pos] in "\"'" else "unexpected character"
            raise ClassAdSyntaxError(f"{what} {text[pos]!r}", text=text, offset=pos, origin=origin)
        kind = m.lastgroup
        end = m.end()
        if kind == "ws":
            pos = end
            continue
        if kind == "id":
            word = m.group()
            low = word.lower()
            if low in _KEYWORDS:
                append((KW, low, pos))
            elif low in _WORD_OPS:
                append((OP, _WORD_OPS[low], pos))
            else:
                append((ID, word, pos))
        elif kind == "op":
            op = m.group()
            if op == "-" and end < n and (text[end].isdigit() or text[end] == "."):
                prev = tokens[-1] if tokens else None
                if prev is None or (prev[0] == OP and prev[1] not in _VALUE_END):
                    num = _TOKEN.match(text, end)
                    if num is not None and num.lastgroup in ("int", "real"):
                        pos = _number(tokens, text, pos, num.end(), num.lastgroup, origin)
                        continue
            if op[0] == "?" and len(op) > 1:
                op = "?:"
            append((OP, op, pos))
        elif kind == "int" or kind == "real":
            pos = _number(tokens, text, pos, end, kind, origin)
            continue
        elif kind == "str":
            decoded = unescape(m.group()[1:-1])
            if decoded is None:
                raise ClassAdSyntaxError(
                    "a string may not hold a NUL character", text=text, offset=pos, origin=origin
                )
            value = decoded
            if (
                tokens
                and tokens[-1][0] == STR
                and text[tokens[-1][2]] == '"'
                and _only_space(text, pos)
            ):
                # Adjacent string literals are joined, as in C.
                _, prev_value, prev_pos = tokens.pop()
                value = str(prev_value) + value
                append((STR, value, prev_pos))
            else:
                append((STR, value, pos))
        else:  # qid
            decoded = unescape(m.group()[1:-1])
            if decoded is None or decoded == "":
                raise ClassAdSyntaxError(
                    "invalid quoted attribute name", text=text, offset=pos, origin=origin
                )
            if (
                tokens
                and tokens[-1][0] == ID
                and text[tokens[-1][2]] == "'"
                and _only_space(text, pos, "'")
            ):
                # Like string literals, adjacent quoted names are joined.
                _, prev_name, prev_pos = tokens.pop()
                append((ID, str(prev_name) + decoded, prev_pos))
            else:
                append((ID, decoded, pos))
        pos = end
    append((EOF, None, n))
    return tokens


def _only_space(text: str, pos: int, quote: str = '"') -> bool:
    """Whether only white space lies between the previous quoted token and `pos`."""
    i = pos - 1
    while i >= 0 and text[i].isspace():
        i -= 1
    return i >= 0 and text[i] == quote


def _number(
    tokens: list[Token], text: str, start: int, end: int, kind: str | None, origin: str
) -> int:
    literal = text[start:end]
    if end < len(text) and (text[end].isalnum() or text[end] in "._"):
        # `5.`, `1.e3`, `1e`, `0x1F`, `12abc`: a number glued to more is no number.
        raise ClassAdSyntaxError(
            f"malformed number {text[start : end + 1]!r}", text=text, offset=start, origin=origin
        )
    if kind == "real":
        tokens.append((REAL, float(literal), start))
    else:
        try:
            tokens.append((INT, _int_literal(literal), start))
        except ValueError:
            raise ClassAdSyntaxError(
                f"integer literal {literal!r} has a leading zero (octal and hex are not allowed)",
                text=text,
                offset=start,
                origin=origin,
            ) from None
    return end
