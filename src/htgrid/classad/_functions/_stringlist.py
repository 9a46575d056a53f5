"""HTCondor's string-list functions (stringList*), split, splitUserName, splitSlotName.

A string list is split on any of the delimiter characters; items are trimmed of C
whitespace and empty items dropped (HTCondor's StringTokenIterator).
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from htgrid.classad._functions._convert import c_trunc64, strtod
from htgrid.classad._functions._pcre import compile_pcre
from htgrid.classad._functions._regex import matches
from htgrid.classad._functions._registry import builtin
from htgrid.classad._values import ERROR, UNDEFINED, ListValue

if TYPE_CHECKING:
    from collections.abc import Callable

    from htgrid.classad._state import EvalState
    from htgrid.classad._values import Val

__all__ = ["tokens"]

_WS = " \t\n\v\f\r"
_HAS_WS = re.compile("[ \t\n\v\f\r]").search
_MEMBER_DELIMS = ", \t\r\n"
_DELIMS = ", "
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_FLT_MAX = 3.4028234663852886e38
_FLT_MIN = 1.1754943508222875e-38


@functools.lru_cache(maxsize=64)
def _splitter(delims: str) -> Callable[[str], list[str]] | None:
    if not delims:
        return None
    return re.compile("[" + re.escape(delims) + "]").split


def tokens(s: str, delims: str) -> list[str]:
    """The items of string list `s`: split on `delims`, trimmed, empties dropped."""
    split = _splitter(delims)
    parts = split(s) if split is not None else [s]
    out = []
    for p in parts:
        p = p.strip(_WS)
        if p:
            out.append(p)
    return out


def _str_or_undef(v: Val) -> str | None:
    """A string argument where UNDEFINED counts as ""; None for any other type."""
    if type(v) is str:
        return v
    return "" if v is UNDEFINED else None


def _member_args(args: tuple[Val, ...]) -> tuple[str, str, str] | Val:
    n = len(args)
    if n < 2 or n > 3:
        return ERROR
    item = _str_or_undef(args[0])
    lst = _str_or_undef(args[1])
    delims = _MEMBER_DELIMS
    if n == 3 and args[2] is not UNDEFINED:
        if type(args[2]) is not str:
            return ERROR
        delims = args[2]
    if item is None or lst is None:
        return ERROR
    if args[0] is UNDEFINED and args[1] is UNDEFINED:
        return UNDEFINED
    return item, lst, delims


@builtin("stringListMember")
def _string_list_member(state: EvalState, *args: Val) -> Val:
    """`stringListMember(x, list [, delims])`: is x an item (case-sensitive)."""
    if len(args) == 2:
        item, lst = args
        # The common case: no whitespace to trim, default delimiters.
        if type(item) is str and type(lst) is str and item and lst.isalnum():
            return item == lst
        if type(item) is str and type(lst) is str and item and not _HAS_WS(lst):
            return item in lst.split(",")
    r = _member_args(args)
    if type(r) is not tuple:
        return r  # type: ignore[return-value]
    item, lst, delims = r
    return item in tokens(lst, delims)


@builtin("stringListIMember")
def _string_list_imember(state: EvalState, *args: Val) -> Val:
    """`stringListIMember(x, list [, delims])`: is x an item, ignoring ASCII case."""
    r = _member_args(args)
    if type(r) is not tuple:
        return r  # type: ignore[return-value]
    item, lst, delims = r
    low = item.translate(_LOWER)
    return any(t.translate(_LOWER) == low for t in tokens(lst, delims))


def _subset(args: tuple[Val, ...], fold: bool) -> Val:
    r = _member_args(args)
    if type(r) is not tuple:
        return r  # type: ignore[return-value]
    sub, lst, delims = r
    if not sub:
        return True
    have = tokens(lst, delims)
    want = tokens(sub, delims)
    if fold:
        have = [t.translate(_LOWER) for t in have]
        want = [t.translate(_LOWER) for t in want]
    if not want:
        return False
    pool = set(have)
    return all(w in pool for w in want)


@builtin("stringListSubsetMatch")
def _string_list_subset_match(state: EvalState, *args: Val) -> Val:
    """`stringListSubsetMatch(l1, l2 [, delims])`: is every item of l1 in l2."""
    return _subset(args, False)


@builtin("stringListISubsetMatch")
def _string_list_isubset_match(state: EvalState, *args: Val) -> Val:
    """`stringListISubsetMatch(l1, l2 [, delims])`: as SubsetMatch, ignoring ASCII case."""
    return _subset(args, True)


def _raw_items(s: str, delims: str) -> list[str]:
    """libclassad's split_string_list: non-empty runs between delimiters, untrimmed."""
    if not delims:
        delims = " ,"
    split = _splitter(delims)
    return [p for p in split(s) if p] if split is not None else [s]


@builtin("stringListsIntersect")
def _string_lists_intersect(state: EvalState, *args: Val) -> Val:
    """`stringListsIntersect(l1, l2 [, delims])`: do the lists share an item."""
    n = len(args)
    if n < 2 or n > 3:
        return ERROR
    if any(a is ERROR for a in args):
        return ERROR
    if any(a is UNDEFINED for a in args):
        return UNDEFINED
    delims = ""
    if n == 3:
        if type(args[2]) is not str:
            return ERROR
        delims = args[2]
    a, b = args[0], args[1]
    if type(a) is not str or type(b) is not str:
        return ERROR
    pool = set(_raw_items(b, delims))
    return any(x in pool for x in _raw_items(a, delims))


def _list_args(args: tuple[Val, ...], lo: int, hi: int) -> list[str] | None:
    """All arguments as strings (no UNDEFINED allowed), or None."""
    if not lo <= len(args) <= hi:
        return None
    out = []
    for a in args:
        if type(a) is not str:
            return None
        out.append(a)
    return out


@builtin("stringListSize")
def _string_list_size(state: EvalState, *args: Val) -> Val:
    """`stringListSize(list [, delims])`: the number of items."""
    s = _list_args(args, 1, 2)
    if s is None:
        return ERROR
    return len(tokens(s[0], s[1] if len(s) == 2 else _DELIMS))


def _summarize(args: tuple[Val, ...], kind: str) -> Val:
    s = _list_args(args, 1, 2)
    if s is None:
        return ERROR
    items = tokens(s[0], s[1] if len(s) == 2 else _DELIMS)
    if kind == "min":
        acc = _FLT_MAX
    elif kind == "max":
        acc = _FLT_MIN
    else:
        acc = 0.0
    is_real = False
    for item in items:
        r = strtod(item)
        if r is None:
            return ERROR
        x = r[0]
        if item.strip("+-0123456789"):
            is_real = True
        if kind == "min":
            acc = x if x < acc else acc
        elif kind == "max":
            acc = x if x > acc else acc
        else:
            acc = x + acc
    if not items:
        return UNDEFINED if kind in ("min", "max") else 0.0
    if kind == "avg":
        acc /= len(items)
    return acc if is_real else c_trunc64(acc)


@builtin("stringListSum")
def _string_list_sum(state: EvalState, *args: Val) -> Val:
    """`stringListSum(list [, delims])`: int if every item is written as an integer."""
    return _summarize(args, "sum")


@builtin("stringListAvg")
def _string_list_avg(state: EvalState, *args: Val) -> Val:
    """`stringListAvg(list [, delims])`: truncated to an int when all items are integers."""
    return _summarize(args, "avg")


@builtin("stringListMin")
def _string_list_min(state: EvalState, *args: Val) -> Val:
    """`stringListMin(list [, delims])`: starts from FLT_MAX, as HTCondor does."""
    return _summarize(args, "min")


@builtin("stringListMax")
def _string_list_max(state: EvalState, *args: Val) -> Val:
    """`stringListMax(list [, delims])`: starts from FLT_MIN, so all-negative lists give 0."""
    return _summarize(args, "max")


@builtin("stringList_regexpMember")
def _string_list_regexp_member(state: EvalState, *args: Val) -> Val:
    """`stringList_regexpMember(pattern, list [, delims [, options]])`."""
    s = _list_args(args, 2, 4)
    if s is None:
        return ERROR
    opts = s[3].lower() if len(s) == 4 else ""
    rx = compile_pcre(s[0], opts)
    if rx is None:
        return ERROR
    items = tokens(s[1], s[2] if len(s) >= 3 else _DELIMS)
    if not items:
        return UNDEFINED
    # An item the pattern runs out of time on is no match (PCRE2's match limit).
    return any(matches(rx, t, state) for t in items)


@builtin("split")
def _split(state: EvalState, *args: Val) -> Val:
    """`split(s [, seps])`: runs of whitespace separate once; repeated separators give ""."""
    if len(args) not in (1, 2):
        return ERROR
    s = args[0]
    seps = ", \t"
    if len(args) == 2:
        if type(args[1]) is not str:
            return ERROR
        seps = args[1]
    if type(s) is not str:
        return ERROR
    text: str = s
    items: list[Val] = []
    last = 0
    if seps:
        ch = ""
        for ix, c in enumerate(text):
            if c not in seps:
                continue
            if ix > last:
                items.append(text[last:ix])
            elif ch and ch not in _WS and ch == c:
                items.append("")
            if c not in _WS:
                ch = c
            last = ix + 1
    if len(text) > last:
        items.append(text[last:])
    return ListValue.from_values(items)


def _split_at(args: tuple[Val, ...], slot: bool) -> Val:
    if len(args) != 1:
        return ERROR
    s = args[0]
    if type(s) is not str:
        return ERROR
    text: str = s
    at = text.find("@")
    if at < 0:
        pair: list[Val] = ["", text] if slot else [text, ""]
    else:
        pair = [text[:at], text[at + 1 :]]
    return ListValue.from_values(pair)


@builtin("splitUserName")
def _split_user_name(state: EvalState, *args: Val) -> Val:
    """`splitUserName("user@domain")`: {user, domain}; no @ gives {name, ""}."""
    return _split_at(args, False)


@builtin("splitSlotName")
def _split_slot_name(state: EvalState, *args: Val) -> Val:
    """`splitSlotName("slot@machine")`: {slot, machine}; no @ gives {"", name}."""
    return _split_at(args, True)
