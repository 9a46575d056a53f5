"""Regular expressions: regexp regexps replace replaceall regexpMember.

Patterns are PCRE2 (see `_pcre.py`); an invalid pattern is ERROR, and so is a match that
runs past its time (PCRE2's match limit): regexpMember counts that item as no match.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import TYPE_CHECKING

import regex

from htgrid.classad._functions._matcher import Match, Regexp
from htgrid.classad._functions._pcre import compile_pcre
from htgrid.classad._functions._registry import builtin
from htgrid.classad._values import ERROR, UNDEFINED, ListValue

if TYPE_CHECKING:
    from htgrid.classad._state import EvalState
    from htgrid.classad._values import Val

__all__ = ["compile_pcre", "matches", "substitute"]


def _group_count(m: Match) -> int:
    """PCRE's match return code: 1 + the highest group that took part."""
    for g in range(m.re.groups, 0, -1):
        if m.start(g) != -1:
            return g + 1
    return 1


def _expand(m: Match, repl: bytes, out: bytearray) -> bool:
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


def _notempty_at(rx: Regexp, data: bytes, pos: int, state: EvalState) -> tuple[Match, int] | None:
    """An anchored, non-empty match at `pos` (PCRE2_ANCHORED | PCRE2_NOTEMPTY_ATSTART).

    Returns the match and the offset its positions are relative to.
    """
    m = rx.match(data, state, pos)
    if m is None:
        return None
    if m.end() > m.start():
        return m, 0
    # Python cannot ask for the next backtracking choice; match the tail with a
    # variant that must end past its start (which is where the lookbehind looks).
    alt = _nonempty_variant(rx)
    if alt is None:
        return None
    m = alt.match(data[pos:], state)
    return (m, pos) if m is not None else None


@functools.lru_cache(maxsize=128)
def _nonempty_variant(rx: Regexp) -> Regexp | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Regexp(b"(?:" + rx.pattern + b")(?<=[\\s\\S])", rx.flags)
    except (re.error, regex.error):
        return None


def substitute(rx: Regexp, target: str, repl: str, opts: str, state: EvalState) -> Val:
    """regexp_helper with a replacement: PCRE's loop, including its quirks."""
    full = "f" in opts
    find_all = "g" in opts
    data = target.encode("utf-8", "surrogateescape")
    rep = repl.encode("utf-8", "surrogateescape")
    out = bytearray()
    idx = 0
    empty_match = False
    m: Match | None
    while True:
        base = 0
        if empty_match:
            found = _notempty_at(rx, data, idx, state) if idx <= len(data) else None
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
            m = rx.search(data, state, idx) if idx <= len(data) else None
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


def _match(rx: Regexp, target: str, state: EvalState) -> bool:
    """Whether `rx` matches in `target`; TimeoutError when it runs out of time."""
    data = target.encode("utf-8", "surrogateescape") if not target.isascii() else target.encode()
    return rx.search(data, state) is not None


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
    try:
        return _match(rx, target, state)
    except TimeoutError:
        return ERROR


def _subst(state: EvalState, args: tuple[Val, ...], extra: str) -> Val:
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
    try:
        return substitute(rx, target, repl, opts, state)  # type: ignore[arg-type]
    except TimeoutError:
        return ERROR


@builtin("regexps")
def _regexps(state: EvalState, *args: Val) -> Val:
    """`regexps(pattern, s, replacement [, options])`: the replacement for the match."""
    return _subst(state, args, "")


@builtin("replace")
def _replace(state: EvalState, *args: Val) -> Val:
    """`replace(pattern, s, replacement [, options])`: s with the first match replaced."""
    return _subst(state, args, "f")


@builtin("replaceall")
def _replaceall(state: EvalState, *args: Val) -> Val:
    """`replaceAll(pattern, s, replacement [, options])`: s with every match replaced."""
    return _subst(state, args, "fg")


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
        # An invalid pattern makes each test ERROR, which simply is not a match; so does
        # one that runs out of time (as PCRE2's match limit does in HTCondor).
        if rx is not None and matches(rx, item, state):
            return True
    return UNDEFINED if maybe_undef else False


def matches(rx: Regexp, target: str, state: EvalState) -> bool:
    """`_match`, with a match that runs out of time counted as none."""
    try:
        return _match(rx, target, state)
    except TimeoutError:
        return False
