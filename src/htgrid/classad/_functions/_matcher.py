"""Matching a translated PCRE2 pattern at a bounded cost.

Python's `re` cannot be stopped once it backtracks, and `(a|aa)+$` against a long run of
a's backtracks for longer than anyone waits. The `regex` module reads the same syntax
with the same meaning and takes a timeout, but costs about a microsecond more a match.
So each pattern is looked at once, for a bound on `re`'s backtracking as a function of
the subject's length: where the bound is small `re` matches; otherwise `regex` does, and
fails past `REGEXP_TIMEOUT` (TimeoutError), as PCRE2's match limit makes a match fail in
HTCondor. A match is charged to the evaluation's budget (a step a microsecond it takes,
or a few steps for one too small to time), so that many slow matches in one evaluation
are bounded too.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Final, TypeAlias

import regex

from htgrid.classad._state import budget_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from htgrid.classad._state import EvalState

__all__ = ["REGEXP_TIMEOUT", "Match", "Regexp"]

#: Seconds one match may run before it fails. PCRE2's default match limit (10,000,000
#: steps of its matcher) takes about a tenth of a second; a real pattern needs microseconds.
REGEXP_TIMEOUT: Final = 0.1

#: Bounds on `re`'s backtracking: up to _TINY a match costs _TINY_STEPS steps of the
#: budget, untimed (reading the clock costs more than such a match); up to _QUICK (a few
#: milliseconds) `re` matches and is timed; past it `regex` does, with a timeout.
_TINY: Final = 2_000
_TINY_STEPS: Final = 10
_QUICK: Final = 1_000_000

Match: TypeAlias = "re.Match[bytes] | regex.Match[bytes]"

_REPEAT = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_FLAGS = re.compile(r"\(\?([aiLmsux]*)(?:-([imsx]*))?([:)])")


class Regexp:
    """A compiled pattern (Python syntax, bytes), matched by `re` where that is sure to be
    quick and by `regex` with a timeout elsewhere."""

    __slots__ = ("_timed", "fast", "flags", "groups", "pattern", "quick_length", "tiny_length")

    def __init__(self, text: bytes, flags: int) -> None:
        """Raises re.error or regex.error for a pattern either refuses."""
        self.pattern = text
        self.flags = flags
        self.fast = re.compile(text, flags)
        self.groups = self.fast.groups
        work = _work(text.decode("utf-8", "surrogateescape"), flags)
        #: The longest subjects `re` matches this against untimed, and at all (-1: none).
        self.tiny_length = _longest(work, _TINY)
        self.quick_length = _longest(work, _QUICK)
        self._timed: regex.Pattern[bytes] | None = None
        if self.quick_length < 0:  # never matched by `re`
            self._timed = regex.compile(text, flags)

    def search(self, data: bytes, state: EvalState, pos: int = 0) -> Match | None:
        """`search(data, pos)`; TimeoutError past REGEXP_TIMEOUT."""
        return self._run(False, data, state, pos)

    def match(self, data: bytes, state: EvalState, pos: int = 0) -> Match | None:
        """`match(data, pos)` (anchored at pos); TimeoutError past REGEXP_TIMEOUT."""
        return self._run(True, data, state, pos)

    def _run(self, anchored: bool, data: bytes, state: EvalState, pos: int) -> Match | None:
        fast = self.fast.match if anchored else self.fast.search
        if len(data) <= self.tiny_length:
            _charge(state, _TINY_STEPS)
            return fast(data, pos)
        start = time.perf_counter()
        try:
            if len(data) <= self.quick_length:
                return fast(data, pos)
            timed = self._bounded()
            find = timed.match if anchored else timed.search
            return find(data, pos, None, None, False, REGEXP_TIMEOUT)
        finally:
            _charge(state, int((time.perf_counter() - start) * 1e6))

    def _bounded(self) -> regex.Pattern[bytes]:
        timed = self._timed
        if timed is None:  # a quick pattern, given a subject too long to be sure of
            timed = self._timed = regex.compile(self.pattern, self.flags)
        return timed


def _charge(state: EvalState, steps: int) -> None:
    budget = state.budget or budget_of(state)
    budget[0] -= steps


def _longest(work: Callable[[int], int] | None, limit: int) -> int:
    """The longest subject length whose work is within `limit`; -1 when none is."""
    if work is None or work(0) > limit:
        return -1
    low, high = 0, 1 << 24
    while low < high:
        mid = (low + high + 1) // 2
        if work(mid) <= limit:
            low = mid
        else:
            high = mid - 1
    return low


def _work(p: str, flags: int) -> Callable[[int], int] | None:
    """A bound on the steps of `re`'s backtracking when it matches pattern `p` against a
    subject of a given length; None when there is none.

    Without a quantified group or a backreference, every repeat is of one character (or
    class), and a match tries at most (n + 1) repeat counts for each unbounded repeat, the
    count range of each bounded one and each branch of each `|`, at each start; a path
    costs at most the pattern's length plus what the repeats take. A quantified group or a
    backreference may make the choices grow exponentially: no bound, -1. A pattern read as
    verbose is not looked into either (whitespace separates an atom from its repeat).
    """
    if flags & re.VERBOSE:
        return None
    unbounded = repeats = branches = 0
    factor = 1
    after_group = False  # the last atom was a group: a repeat here repeats a group
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            if i + 1 < n and p[i + 1] in "123456789":
                return None  # a backreference
            i += 2
            after_group = False
        elif c == "[":
            i = _class_end(p, i)
            after_group = False
        elif c == "(":
            m = _FLAGS.match(p, i)
            if p.startswith("(?P=", i):
                return None
            if p.startswith("(?#", i):
                i = p.index(")", i) + 1
                continue
            if m is not None:
                if "x" in m.group(1):
                    return None
                i = m.end()
                after_group = False
                continue
            i = _group_start(p, i)
            after_group = False
        elif c == ")":
            i += 1
            after_group = True
        elif c in "*+?{":
            m = _REPEAT.match(p, i) if c == "{" else None
            if c == "{" and m is None:
                i += 1  # a literal brace
                after_group = False
                continue
            if after_group:
                return None
            repeats += 1
            if c in "*+" or (m is not None and m.group(2) and not m.group(3)):
                unbounded += 1
            elif c == "?":
                factor *= 2
            elif m is not None and m.group(2):
                factor *= int(m.group(3)) - int(m.group(1) or 0) + 1
            i = m.end() if m is not None else i + 1
            if i < n and p[i] in "?+":  # lazy or possessive: the same choices
                i += 1
        else:
            if c == "|":
                branches += 1
            i += 1
            after_group = False
    anchored = branches == 0 and not flags & re.MULTILINE and p.startswith(("^", "\\A"))
    fixed = factor << branches

    def work(length: int) -> int:
        starts = 1 if anchored else length + 1
        choices: int = (length + 1) ** unbounded
        return starts * choices * fixed * (n + repeats * length + 1)

    return work


def _class_end(p: str, i: int) -> int:
    """The index after the character class opening at p[i] (`]` first is a member)."""
    j = i + 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":
        j += 1
    while j < len(p) and p[j] != "]":
        j += 2 if p[j] == "\\" else 1
    return j + 1


def _group_start(p: str, i: int) -> int:
    """The index after the opening of the group at p[i] (`(`, `(?:`, `(?P<name>`, ...)."""
    if not p.startswith("(?", i):
        return i + 1
    if p.startswith("(?P<", i):
        return p.index(">", i) + 1
    if p.startswith(("(?<=", "(?<!"), i):
        return i + 4
    return i + 3  # (?: (?= (?! (?>
