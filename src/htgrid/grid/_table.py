"""What every grid type's transition table shares: the lookup and the drawing.

Each type keeps its own Enums and its own `TRANSITIONS` (one table per state machine);
these two functions only read such a table.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

from htgrid.grid._errors import BadTransition

__all__ = ["draw_table", "lookup"]

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


def lookup(table: Mapping[S, Mapping[E, S]], state: S, event: E, kind: str) -> S:
    """Where `event` takes a `kind` job in `state`; BadTransition if the table has no such
    move (a bug, never a guess)."""
    try:
        return table[state][event]
    except KeyError:
        raise BadTransition(f"{kind} job in {state.name} got {event.name}") from None


def draw_table(table: Mapping[S, Mapping[E, S]], state_width: int) -> list[str]:
    """The table as the lines its module's docstring draws (state column `state_width` wide)."""
    lines = [f"{'state':<{state_width}}{'event':<20}next state"]
    for state, moves in table.items():
        lines += [
            f"{state.name:<{state_width}}{event.name:<20}{to.name}" for event, to in moves.items()
        ]
    return lines
