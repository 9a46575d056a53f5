"""Regular expressions: regexp regexps replace replaceall regexpMember.

HTCondor uses PCRE2 on the bytes of the strings, without UTF mode. We translate the
PCRE2 pattern into Python `re` syntax and match on UTF-8 bytes, which gives the same
ASCII-only classes and case folding. An invalid (or untranslatable) pattern is ERROR.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import TYPE_CHECKING

from htgrid.classad._functions._registry import builtin
from htgrid.classad._values import ERROR, UNDEFINED, ListValue

if TYPE_CHECKING:
    from htgrid.classad._state import EvalState
    from htgrid.classad._values import Val

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
            name = p[i + 2 : end]
            neg = name.startswith("^")
            body = _POSIX.get(name[1:] if neg else name)
            if body is None or neg:
                raise _Untranslatable
            out.append(body)
            i = end + 2
            continue
        if c == "\\" and i + 1 < len(p):
            e = p[i + 1]
            if e in _CLASS_ESC:
                out.append(_CLASS_ESC[e])
            elif e == "x" and p.startswith("{", i + 2):
                end = p.find("}", i + 3)
                if end < 0:
                    raise _Untranslatable
                out.append("\\x%02x" % int(p[i + 3 : end], 16))
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
                out.append("\\x%02x" % int(p[i + 1 : end], 16))
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
def compile_pcre(pattern: str, options: str) -> re.Pattern[bytes] | None:
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
            return re.compile(text.encode("utf-8", "surrogateescape"), flags)
    except (_Untranslatable, re.error, ValueError, OverflowError, RecursionError):
        return None


def _group_count(m: re.Match[bytes]) -> int:
    """PCRE's match return code: 1 + the highest group that took part."""
    for g in range(m.re.groups, 0, -1):
        if m.start(g) != -1:
            return g + 1
    return 1


def _expand(m: re.Match[bytes], repl: bytes, out: bytearray) -> bool:
    """Append the replacement with `\\N` group references; False on a bad group number."""
    ngroups = _group_count(m)
    i = 0
    n = len(repl)
    while i < n:
        c = repl[i]
        if c == 0x5C and i + 1 < n and 0x30 <= repl[i + 1] <= 0x39:
            g = repl[i + 1] - 0x30
            if g >= ngroups:
                return False
            out += m.group(g) or b""
            i += 2
            continue
        out.append(c)
        i += 1
    return True


def _notempty_at(
    rx: re.Pattern[bytes], data: bytes, pos: int
) -> tuple[re.Match[bytes], int] | None:
    """An anchored, non-empty match at `pos` (PCRE2_ANCHORED | PCRE2_NOTEMPTY_ATSTART).

    Returns the match and the offset its positions are relative to.
    """
    m = rx.match(data, pos)
    if m is None:
        return None
    if m.end() > m.start():
        return m, 0
    # Python cannot ask for the next backtracking choice; match the tail with a
    # variant that must end past its start (which is where the lookbehind looks).
    alt = _nonempty_variant(rx)
    if alt is None:
        return None
    m = alt.match(data[pos:])
    return (m, pos) if m is not None else None


@functools.lru_cache(maxsize=128)
def _nonempty_variant(rx: re.Pattern[bytes]) -> re.Pattern[bytes] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.compile(b"(?:" + rx.pattern + b")(?<=[\\s\\S])", rx.flags)
    except re.error:
        return None


def substitute(rx: re.Pattern[bytes], target: str, repl: str, opts: str) -> Val:
    """regexp_helper with a replacement: PCRE's loop, including its quirks."""
    full = "f" in opts
    find_all = "g" in opts
    data = target.encode("utf-8", "surrogateescape")
    rep = repl.encode("utf-8", "surrogateescape")
    out = bytearray()
    idx = 0
    empty_match = False
    while True:
        base = 0
        if empty_match:
            found = _notempty_at(rx, data, idx) if idx <= len(data) else None
            if found is None:
                if idx >= len(data):
                    # The C loop copies the terminating NUL and then asks PCRE to start
                    # past the end of the subject, which is an error.
                    return ERROR
                out.append(data[idx])
                idx += 1
                empty_match = False
                continue
            m, base = found
        else:
            m = rx.search(data, idx) if idx <= len(data) else None
            if m is None:
                break
        start, end = m.start() + base, m.end() + base
        if full:
            out += data[idx:start]
        if not _expand(m, rep, out):
            return ERROR
        idx = end
        empty_match = start == end
        if not find_all:
            break
    if full:
        out += data[idx:]
    return out.decode("utf-8", "surrogateescape")


def _match(rx: re.Pattern[bytes], target: str) -> bool:
    data = target.encode("utf-8", "surrogateescape") if not target.isascii() else target.encode()
    return rx.search(data) is not None


def _check(args: tuple[Val, ...], nreq: int) -> Val | None:
    """ERROR/UNDEFINED among the arguments (errors first), as the C functions test them."""
    if any(a is ERROR for a in args):
        return ERROR
    if any(a is UNDEFINED for a in args):
        return UNDEFINED
    if len(args) > nreq and type(args[nreq]) is not str:
        return ERROR
    return None


@builtin("regexp")
def _regexp(state: EvalState, *args: Val) -> Val:
    """`regexp(pattern, s [, options])`: does the pattern match somewhere in s."""
    if len(args) not in (2, 3):
        return ERROR
    bad = _check(args, 2)
    if bad is not None:
        return bad
    pat, target = args[0], args[1]
    if type(pat) is not str or type(target) is not str:
        return ERROR
    rx = compile_pcre(pat, args[2] if len(args) == 3 else "")  # type: ignore[arg-type]
    if rx is None:
        return ERROR
    return _match(rx, target)


def _subst(args: tuple[Val, ...], extra: str) -> Val:
    if len(args) not in (3, 4):
        return ERROR
    bad = _check(args, 3)
    if bad is not None:
        return bad
    pat, target, repl = args[0], args[1], args[2]
    opts = (args[3] if len(args) == 4 else "") + extra  # type: ignore[operator]
    if type(pat) is not str or type(target) is not str or type(repl) is not str:
        return ERROR
    rx = compile_pcre(pat, opts)
    if rx is None:
        return ERROR
    return substitute(rx, target, repl, opts)


@builtin("regexps")
def _regexps(state: EvalState, *args: Val) -> Val:
    """`regexps(pattern, s, replacement [, options])`: the replacement for the match."""
    return _subst(args, "")


@builtin("replace")
def _replace(state: EvalState, *args: Val) -> Val:
    """`replace(pattern, s, replacement [, options])`: s with the first match replaced."""
    return _subst(args, "f")


@builtin("replaceall")
def _replaceall(state: EvalState, *args: Val) -> Val:
    """`replaceAll(pattern, s, replacement [, options])`: s with every match replaced."""
    return _subst(args, "fg")


@builtin("regexpMember")
def _regexp_member(state: EvalState, *args: Val) -> Val:
    """`regexpMember(pattern, list [, options])`: does any string item match."""
    if len(args) not in (2, 3):
        return ERROR
    bad = _check(args, 2)
    if bad is not None:
        return bad
    pat, lst = args[0], args[1]
    if type(pat) is not str or type(lst) is not ListValue:
        return ERROR
    rx = compile_pcre(pat, args[2] if len(args) == 3 else "")  # type: ignore[arg-type]
    maybe_undef = False
    for item in lst.values():
        if type(item) is not str:
            if item is UNDEFINED:
                maybe_undef = True
                continue
            return ERROR
        # An invalid pattern makes each test ERROR, which simply is not a match.
        if rx is not None and _match(rx, item):
            return True
    return UNDEFINED if maybe_undef else False
