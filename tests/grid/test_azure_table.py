"""The Azure state machine's table, checked exhaustively: every move, no dead state."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

import htgrid.grid.azure._table as table
from htgrid.grid import BadTransition
from htgrid.grid.azure._job import AzureJob
from htgrid.grid.azure._table import TABLE, TRANSITIONS, AzureEvent, AzureState

_S = AzureState
_E = AzureEvent

INITIAL, TERMINAL = TABLE.initial, TABLE.terminal
next_state, draw = TABLE.next_state, TABLE.draw


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(AzureState)


@pytest.mark.parametrize(
    ("state", "event", "target"),
    [(s, e, t) for s, moves in TRANSITIONS.items() for e, t in moves.items()],
    ids=lambda value: getattr(value, "name", str(value)),
)
def test_every_listed_move(state: AzureState, event: AzureEvent, target: AzureState) -> None:
    assert next_state(state, event) is target


def test_every_unlisted_move_is_refused() -> None:
    refused = 0
    for state, event in itertools.product(AzureState, AzureEvent):
        if event in TRANSITIONS[state]:
            continue
        with pytest.raises(BadTransition, match=f"{state.name} got {event.name}"):
            next_state(state, event)
        refused += 1
    listed = sum(len(moves) for moves in TRANSITIONS.values())
    assert refused + listed == len(AzureState) * len(AzureEvent)


def test_every_event_is_used() -> None:
    used = {event for moves in TRANSITIONS.values() for event in moves}
    assert used == set(AzureEvent)


def _reachable(start: AzureState, edges: dict[AzureState, set[AzureState]]) -> set[AzureState]:
    seen = {start}
    todo = deque([start])
    while todo:
        for nxt in edges[todo.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_dead_states() -> None:
    forward = {s: set(moves.values()) for s, moves in TRANSITIONS.items()}
    assert _reachable(INITIAL, forward) == set(AzureState)
    for state in AzureState:
        assert _reachable(state, forward) & TERMINAL, state
        assert bool(TRANSITIONS[state]) is (state not in TERMINAL), state


def test_a_stopped_job_always_gets_out() -> None:
    """Local hold and remove are heard wherever a job waits on something outside."""
    for state in (_S.UNSUBMITTED, _S.CREATE, _S.CHECK, _S.SUBMITTED, _S.DONE_SAVE):
        assert {_E.LOCAL_HELD, _E.LOCAL_REMOVED} <= set(TRANSITIONS[state]), state
    # Once a VM may exist, a removal deletes it before the job may leave the queue.
    assert TRANSITIONS[_S.SUBMITTED][_E.LOCAL_REMOVED] is _S.CANCEL
    assert TRANSITIONS[_S.CANCEL][_E.CANCELLED_REMOVED] is _S.DELETE


def test_the_name_is_saved_before_any_create() -> None:
    """Every path into CREATE passes a committed name: SAVE_NAME, or CHECK (name known)."""
    into_create = {s for s, moves in TRANSITIONS.items() for t in moves.values() if t is _S.CREATE}
    assert into_create == {_S.SAVE_NAME, _S.CHECK}
    assert TRANSITIONS[_S.START][_E.HAS_NAME] is _S.CHECK
    assert TRANSITIONS[_S.CREATE][_E.CREATE_UNSURE] is _S.CHECK


def test_an_ended_vm_is_deleted_before_the_job_completes() -> None:
    assert TRANSITIONS[_S.SUBMITTED][_E.VM_ENDED] is _S.CANCEL
    into_done = {s for s, moves in TRANSITIONS.items() if _S.DONE_SAVE in moves.values()}
    assert into_done == {_S.CANCEL}


def test_every_non_terminal_state_has_an_action() -> None:
    actions = AzureJob.actions(object.__new__(AzureJob))  # the mapping, not the job
    assert set(actions) == set(AzureState) - TERMINAL


def test_the_docstring_draws_the_table() -> None:
    doc = table.__doc__ or ""
    drawn = [line.strip() for line in doc.splitlines() if line.startswith("    ")]
    assert [" ".join(line.split()) for line in drawn] == [" ".join(d.split()) for d in draw()]
