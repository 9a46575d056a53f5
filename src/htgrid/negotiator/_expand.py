"""What a match writes into the job: `$$()` macros filled from the matched ad, the
`MATCH_` attributes that record them, and the match history (`LastMatchName0..N`).

As the schedd does it for HTCondor's grid matchmaking:

- `$$(attr)` takes the matched ad's `attr` (`$$(attr:default)` falls back to `default`),
  and the job keeps the value as `MATCH_attr`; `grid_resource = $$(resource_name)` so
  becomes the site's `resource_name`.
- `$$([expr])` evaluates `expr` with the job as MY and the matched ad as TARGET; the
  expanded attribute is kept as `MATCH_EXP_<attribute>`.
- A macro that cannot be expanded (no such attribute, no default) is an error the queue
  reports by holding the job ("Cannot expand $$(resource_name)").
- With `LastMatchListLength` = N (submit's `match_list_length`), the matched ad's Name
  becomes `LastMatchName0` and earlier names move up (`LastMatchName1`, ...), keeping N.
  HTCondor's grid-universe manual calls LastMatchName0 the oldest, but its own example
  (`Rank = TARGET.Name != LastMatchName0`, "avoid the last site") and the schedd need it
  to be the latest, which it is here. `NumJobMatches` and `LastMatchTime` are kept too.

Only string-valued job attributes are scanned for macros (where submit puts them), and
not the MATCH_ ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import copy
from dataclasses import dataclass

from htgrid.classad import ClassAd, ExprTree, Value, quote
from htgrid.classad.fast import Entry, entries
from htgrid.errors import ClassAdSyntaxError

__all__ = [
    "Expansion",
    "Updates",
    "apply_updates",
    "dollar_attributes",
    "expand",
    "history_updates",
]

Updates = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Expansion:
    """A job's `$$()` macros against one matched ad."""

    # (job attribute, its expanded expression), e.g. ("GridResource", '"batch slurm"').
    expanded: Updates = ()
    # (MATCH_* attribute, expression) to record in the job, as the schedd does.
    recorded: Updates = ()
    # Why a macro could not be expanded (the job is then held), or None.
    error: str | None = None


def dollar_attributes(job: ClassAd) -> list[str]:
    """The names of the job's string attributes holding a `$$(` macro.

    MATCH_ attributes are left alone, as HTCondor leaves them: they record earlier
    expansions, and the templates a grid match keeps (MATCH_TEMPLATE_*) hold `$$(`.
    """
    return [
        e.name
        for e in entries(job).values()
        if type(e.lit) is str and "$$(" in e.lit and e.name[:6].upper() != "MATCH_"
    ]


def _text_of(value: object) -> str | None:
    """A value as it is pasted into a string: strings bare, numbers as written."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and type(value) in (int, float):  # not classad.Value
        return repr(value)
    return None


def _expression_text(value: object) -> str:
    """A value as a ClassAd expression (strings quoted)."""
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and type(value) in (int, float):  # not classad.Value
        return repr(value)
    return "undefined"


def _close_of_expr(text: str, start: int) -> int:
    """Where the `])` closing a `$$([` opened at `start` (just past `[`) begins, or -1."""
    depth = 1
    i = start
    in_string = False
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i if text.startswith("])", i) else -1
        i += 1
    return -1


def _expand_text(
    text: str, job: ClassAd, machine: ClassAd, recorded: dict[str, str]
) -> tuple[str, bool]:
    """`text` with its macros filled; whether one was an expression macro."""
    out: list[str] = []
    pos = 0
    had_expr = False
    while True:
        i = text.find("$$(", pos)
        if i < 0:
            out.append(text[pos:])
            return "".join(out), had_expr
        out.append(text[pos:i])
        if text.startswith("[", i + 3):
            end = _close_of_expr(text, i + 4)
            if end < 0:
                raise _Unexpandable(f"$$({text[i + 3 :]}: no closing '])'")
            source = text[i + 4 : end]
            try:
                value = ExprTree(source).eval(job, machine)
            except ClassAdSyntaxError as err:
                raise _Unexpandable(f"$$([{source}]): {err.reason}") from None
            piece = _text_of(value)
            if piece is None:
                raise _Unexpandable(f"$$([{source}]) evaluates to {_expression_text(value)}")
            out.append(piece)
            had_expr = True
            pos = end + 2
            continue
        end = text.find(")", i + 3)
        if end < 0:
            raise _Unexpandable(f"{text[i:]}: no closing ')'")
        name, _, default = text[i + 3 : end].partition(":")
        name = name.strip()
        value = machine.eval(name) if name in machine else Value.Undefined
        piece = _text_of(value)
        if piece is None:
            if not default:
                raise _Unexpandable(f"$$({name})")
            piece = default
        else:
            recorded[f"MATCH_{name}"] = _expression_text(value)
        out.append(piece)
        pos = end + 1


class _Unexpandable(Exception):
    """A macro the matched ad cannot fill."""


def expand(job: ClassAd, machine: ClassAd, names: Sequence[str] | None = None) -> Expansion:
    """The job's macros (in `names`, or found by scanning) filled from `machine`."""
    expanded: list[tuple[str, str]] = []
    recorded: dict[str, str] = {}
    for name in dollar_attributes(job) if names is None else names:
        entry: Entry | None = entries(job).get(name.lower())
        if entry is None or type(entry.lit) is not str:
            continue
        try:
            text, had_expr = _expand_text(entry.lit, job, machine, recorded)
        except _Unexpandable as err:
            return Expansion(error=f"Cannot expand {err}")
        expanded.append((entry.name, quote(text)))
        if had_expr:
            recorded[f"MATCH_EXP_{entry.name}"] = quote(text)
    return Expansion(tuple(expanded), tuple(recorded.items()))


def history_updates(job: ClassAd, machine_name: str, now: float) -> Updates:
    """`NumJobMatches`, `LastMatchTime` and the shifted `LastMatchName0..N-1`."""
    attrs = entries(job)
    matches = attrs.get("numjobmatches")
    count = matches.lit if matches is not None and type(matches.lit) is int else 0
    updates = [("NumJobMatches", str(count + 1)), ("LastMatchTime", str(int(now)))]
    if "lastmatchlistlength" not in attrs:
        return tuple(updates)
    length = job.get("LastMatchListLength")
    if type(length) is int and length > 0:
        for i in range(length - 1, 0, -1):
            previous = job.get(f"LastMatchName{i - 1}")
            if isinstance(previous, str):
                updates.append((f"LastMatchName{i}", quote(previous)))
        updates.append(("LastMatchName0", quote(machine_name)))
    return tuple(updates)


def apply_updates(job: ClassAd, *groups: Updates) -> ClassAd:
    """A copy of `job` with each (attribute, expression) of `groups` set."""
    ad = copy(job)
    for group in groups:
        for name, text in group:
            ad[name] = ExprTree(text)
    return ad
