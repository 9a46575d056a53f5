"""PCRE2 patterns for Python.

HTCondor uses PCRE2 on the bytes of the strings, without UTF mode. We translate the
PCRE2 pattern into Python `re` syntax and match on UTF-8 bytes, which gives the same
ASCII-only classes and case folding. An invalid (or untranslatable) pattern gives None.
A match runs at a bounded cost (see `_matcher.py`).
"""

from __future__ import annotations

import functools
import re
import unicodedata
import warnings
from typing import TYPE_CHECKING

import regex

from htgrid.classad._functions._matcher import Regexp

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["compile_pcre", "translate"]

_POSIX = {
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "alnum": "a-zA-Z0-9",
    "upper": "A-Z",
    "lower": "a-z",
    "space": r" \t\n\r\f\v",
    "blank": r" \t",
    "punct": r"!-/:-@\[-`{-~",
    "xdigit": "0-9A-Fa-f",
    "word": "a-zA-Z0-9_",
    "cntrl": r"\x00-\x1f\x7f",
    "print": r"\x20-\x7e",
    "graph": r"\x21-\x7e",
    "ascii": r"\x00-\x7f",
}
# PCRE escapes Python lacks, as class members (usable inside [...]).
_CLASS_ESC = {"h": r"\t \xa0", "v": r"\n\x0b\x0c\r\x85"}
_QUANT = re.compile(r"\{(\d+)(,(\d*))?\}")
_INLINE = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?\)")


class _Untranslatable(Exception):
    pass


def _hex_escape(digits: str) -> str:
    """`\\x{hh}`: without UTF mode PCRE allows only values up to 0xff."""
    try:
        value = int(digits, 16)
    except ValueError:
        raise _Untranslatable from None
    if value > 0xFF:
        raise _Untranslatable
    return f"\\x{value:02x}"


def _byte_set(test: Callable[[str], bool]) -> str:
    """Class members (no brackets) for the bytes whose Latin-1 character passes `test`."""
    return "".join(f"\\x{b:02x}" for b in range(256) if test(chr(b)))


def _property(name: str, negate: bool) -> str:
    """`\\p{X}` without UTF mode: the bytes 0-255 whose Unicode category starts with X."""
    if not name or not name.isalpha():
        raise _Untranslatable
    members = _byte_set(lambda c: unicodedata.category(c).startswith(name) != negate)
    return members or "^\\x00-\\xff"


def _posix(name: str) -> str:
    neg = name.startswith("^")
    body = _POSIX.get(name[1:] if neg else name)
    if body is None:
        raise _Untranslatable
    if not neg:
        return body
    rx = re.compile("[" + body + "]")
    return _byte_set(lambda c: rx.match(c) is None)


def _class(p: str, i: int) -> tuple[str, int]:
    """Translate the character class starting at p[i] == '['; return text and end."""
    out = ["["]
    i += 1
    if i < len(p) and p[i] == "^":
        out.append("^")
        i += 1
    first = True
    while i < len(p):
        c = p[i]
        if c == "]" and not first:
            out.append("]")
            return "".join(out), i + 1
        first = False
        if c == "[" and p.startswith("[:", i):
            end = p.find(":]", i + 2)
            if end < 0:
                raise _Untranslatable
            out.append(_posix(p[i + 2 : end]))
            i = end + 2
            continue
        if c == "\\" and i + 1 < len(p):
            e = p[i + 1]
            if e in _CLASS_ESC:
                out.append(_CLASS_ESC[e])
            elif e in "pP":
                name, i = _prop_name(p, i + 2)
                out.append(_property(name, e == "P"))
                continue
            elif e == "x" and p.startswith("{", i + 2):
                end = p.find("}", i + 3)
                if end < 0:
                    raise _Untranslatable
                out.append(_hex_escape(p[i + 3 : end]))
                i = end + 1
                continue
            elif e == "e":
                out.append(r"\x1b")
            else:
                out.append(p[i : i + 2])
            i += 2
            continue
        if c in "[&~|":
            # Escape characters Python may read as set operations in the future.
            out.append("\\" + c)
        else:
            out.append(c)
        i += 1
    raise _Untranslatable


def _prop_name(p: str, i: int) -> tuple[str, int]:
    """The property name after `\\p` at p[i:] (`L` or `{Lu}`) and where it ends."""
    if i < len(p) and p[i] == "{":
        end = p.find("}", i)
        if end < 0:
            raise _Untranslatable
        return p[i + 1 : end], end + 1
    if i < len(p):
        return p[i], i + 1
    raise _Untranslatable


def translate(p: str) -> str:
    """A Python `re` pattern with the meaning of PCRE2 pattern `p`."""
    out: list[str] = []
    # Per open group: the inline-flag scopes opened at that level.
    levels: list[list[str]] = [[]]
    i = 0
    n = len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            if i + 1 >= n:
                raise _Untranslatable
            e = p[i + 1]
            i += 2
            if e == "z":
                out.append(r"\Z")
            elif e == "Z":
                out.append(r"(?=\n?\Z)")
            elif e == "Q":
                end = p.find("\\E", i)
                lit = p[i:] if end < 0 else p[i:end]
                out.append(re.escape(lit))
                i = n if end < 0 else end + 2
            elif e == "E":
                pass
            elif e in _CLASS_ESC:
                out.append("[" + _CLASS_ESC[e] + "]")
            elif e in "HV":
                out.append("[^" + _CLASS_ESC[e.lower()] + "]")
            elif e in "pP":
                name, i = _prop_name(p, i)
                out.append("[" + _property(name, e == "P") + "]")
            elif e == "G":
                # Only ever used with a start offset of 0 here: the start of the subject.
                out.append(r"\A")
            elif e == "R":
                out.append(r"(?:\r\n|[\n\x0b\x0c\r\x85])")
            elif e == "N":
                out.append(r"[^\n]")
            elif e == "e":
                out.append(r"\x1b")
            elif e == "x" and i < n and p[i] == "{":
                end = p.find("}", i)
                if end < 0:
                    raise _Untranslatable
                out.append(_hex_escape(p[i + 1 : end]))
                i = end + 1
            elif e == "k" and i < n and p[i] in "<{'":
                close = {"<": ">", "{": "}", "'": "'"}[p[i]]
                end = p.find(close, i + 1)
                if end < 0:
                    raise _Untranslatable
                out.append("(?P=" + p[i + 1 : end] + ")")
                i = end + 1
            elif e == "g" and i < n and p[i] == "{":
                end = p.find("}", i)
                ref = p[i + 1 : end]
                if end < 0 or not ref.isdigit():
                    raise _Untranslatable
                out.append("(?:\\" + ref + ")")
                i = end + 1
            elif e == "g" and i < n and p[i].isdigit():
                j = i
                while j < n and p[j].isdigit():
                    j += 1
                out.append("(?:\\" + p[i:j] + ")")
                i = j
            else:
                out.append("\\" + e)
            continue
        if c == "[":
            text, i = _class(p, i)
            out.append(text)
            continue
        if c == "{":
            m = _QUANT.match(p, i)
            if m is None:
                out.append(r"\{")
                i += 1
            else:
                out.append(m.group(0))
                i = m.end()
            continue
        if c == "(":
            if p.startswith("(?<", i) and i + 3 < n and p[i + 3] not in "=!":
                out.append("(?P<")
                i += 3
                levels.append([])
                continue
            if p.startswith("(?'", i):
                end = p.find("'", i + 3)
                if end < 0:
                    raise _Untranslatable
                out.append("(?P<" + p[i + 3 : end] + ">")
                i = end + 1
                levels.append([])
                continue
            if p.startswith("(?<=", i) or p.startswith("(?<!", i):
                text, i = _lookbehind(p, i)
                out.append(text)
                continue
            m = _INLINE.match(p, i)
            if m is not None and m.group(0) != "()":
                # An inline option setting lasts to the end of the enclosing group;
                # Python only allows that at the very start, so open a scoped group.
                on, off = m.group(1) or "", m.group(2) or ""
                if set(on + off) - set("imsx"):
                    raise _Untranslatable
                if not out and len(levels) == 1 and on and not off:
                    # At the very start Python takes the global form too (and a
                    # verbose comment cannot swallow a closing parenthesis).
                    out.append("(?" + on + ")")
                    i = m.end()
                    continue
                scope = "(?" + on + ("-" + off if off else "") + ":"
                out.append(scope)
                levels[-1].append(scope)
                i = m.end()
                continue
            levels.append([])
            out.append("(")
            i += 1
            continue
        if c == ")":
            if len(levels) == 1:
                raise _Untranslatable
            out.append(")" * len(levels.pop()))
            out.append(")")
            i += 1
            continue
        if c == "|":
            scopes = levels[-1]
            out.append(")" * len(scopes) + "|" + "".join(scopes))
            i += 1
            continue
        out.append(c)
        i += 1
    if len(levels) != 1:
        raise _Untranslatable
    out.append(")" * len(levels[0]))
    return "".join(out)


def _lookbehind(p: str, i: int) -> tuple[str, int]:
    """Translate `(?<=a|bc)`: PCRE allows alternatives of different fixed lengths."""
    depth = 0
    j = i
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            _, j = _class(p, j)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                break
        j += 1
    else:
        raise _Untranslatable
    kind = p[i + 3]
    inner = translate(p[i + 4 : j])
    alts = _split_alternatives(inner)
    if len(alts) == 1:
        return f"(?<{kind}{inner})", j + 1
    if kind == "=":
        return "(?:" + "|".join(f"(?<={a})" for a in alts) + ")", j + 1
    return "".join(f"(?<!{a})" for a in alts), j + 1


def _split_alternatives(p: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    start = 0
    j = 0
    in_class = False
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if p.startswith("[]", j) or p.startswith("[^]", j):
                j += 2 if p[j + 1] == "]" else 3
                continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(p[start:j])
            start = j + 1
        j += 1
    parts.append(p[start:])
    return parts


@functools.lru_cache(maxsize=512)
def compile_pcre(pattern: str, options: str) -> Regexp | None:
    """Compile a PCRE2 pattern with HTCondor option letters (i m s x); None if invalid."""
    flags = 0
    if "i" in options:
        flags |= re.IGNORECASE
    if "m" in options:
        flags |= re.MULTILINE
    if "s" in options:
        flags |= re.DOTALL
    if "x" in options:
        flags |= re.VERBOSE
    try:
        text = translate(pattern)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Regexp(text.encode("utf-8", "surrogateescape"), flags)
    except (_Untranslatable, re.error, regex.error, ValueError, OverflowError, RecursionError):
        return None
