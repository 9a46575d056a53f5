"""What every grid type's transition table shares: the lookup, the drawing, the common rows.

Each type keeps its own Enums and its own `TRANSITIONS` (one table per state machine);
`Table` only reads such a table, and `stops` writes the two moves a local hold or
removal makes from a state.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from htgrid.grid._errors import BadTransition

__all__ = ["Table", "stops"]

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


@dataclass(frozen=True, slots=True)
class Table(Generic[S, E]):
    """One grid type's state machine: its events, its transitions, where it starts and ends."""

    #: The grid type, as BadTransition names it.
    kind: str
    events: type[E]
    transitions: Mapping[S, Mapping[E, S]]
    initial: S
    terminal: frozenset[S]
    #: The width of the state column where the table is drawn (its module's docstring).
    width: int

    def next_state(self, state: S, event: E) -> S:
        """Where `event` takes a job in `state`; BadTransition if the table has no such
        move (a bug, never a guess)."""
        try:
            return self.transitions[state][event]
        except KeyError:
            raise BadTransition(f"{self.kind} job in {state.name} got {event.name}") from None

    def draw(self) -> list[str]:
        """The table as the lines its module's docstring draws."""
        lines = [f"{'state':<{self.width}}{'event':<20}next state"]
        for state, moves in self.transitions.items():
            lines += [
                f"{state.name:<{self.width}}{event.name:<20}{to.name}"
                for event, to in moves.items()
            ]
        return lines


def stops(events: type[E], to: S) -> dict[E, S]:
    """A local hold's and a local removal's move to `to` (LOCAL_HELD, LOCAL_REMOVED)."""
    return {events["LOCAL_HELD"]: to, events["LOCAL_REMOVED"]: to}
