"""The batch state machine's table, checked exhaustively: every move, no dead state."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

import htgrid.grid.batch._table as table
from htgrid.grid import BadTransition
from htgrid.grid.batch import BatchEvent, BatchJob, BatchState
from htgrid.grid.batch._table import TABLE, TRANSITIONS

INITIAL, TERMINAL = TABLE.initial, TABLE.terminal
next_state, draw = TABLE.next_state, TABLE.draw


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(BatchState)


@pytest.mark.parametrize(
    ("state", "event", "target"),
    [(s, e, t) for s, moves in TRANSITIONS.items() for e, t in moves.items()],
    ids=lambda value: getattr(value, "name", str(value)),
)
def test_every_listed_move(state: BatchState, event: BatchEvent, target: BatchState) -> None:
    assert next_state(state, event) is target


def test_every_unlisted_move_is_refused() -> None:
    refused = 0
    for state, event in itertools.product(BatchState, BatchEvent):
        if event in TRANSITIONS[state]:
            continue
        with pytest.raises(BadTransition, match=f"{state.name} got {event.name}"):
            next_state(state, event)
        refused += 1
    listed = sum(len(moves) for moves in TRANSITIONS.values())
    assert refused + listed == len(BatchState) * len(BatchEvent)


def test_every_event_is_used() -> None:
    used = {event for moves in TRANSITIONS.values() for event in moves}
    assert used == set(BatchEvent)


def _reachable(start: BatchState, edges: dict[BatchState, set[BatchState]]) -> set[BatchState]:
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
    # Every state can be reached from INIT...
    assert _reachable(INITIAL, forward) == set(BatchState)
    # ...and every state can reach the end: no job is ever stuck for good.
    for state in BatchState:
        assert _reachable(state, forward) & TERMINAL, state
    # Terminal states have no way out; the others all have one.
    for state in BatchState:
        assert bool(TRANSITIONS[state]) is (state not in TERMINAL), state


def test_a_stopped_job_always_gets_out() -> None:
    """Local hold and remove are heard wherever a job waits on something outside."""
    waiting = {BatchState.UNSUBMITTED, BatchState.SUBMIT, BatchState.RECOVER}
    waiting |= {BatchState.SUBMITTED, BatchState.DONE_SAVE}
    for state in waiting:
        assert {BatchEvent.LOCAL_HELD, BatchEvent.LOCAL_REMOVED} <= set(TRANSITIONS[state])
    # A removal before anything was sent leaves the queue at once; after a submit, the
    # batch job is cancelled first.
    assert TRANSITIONS[BatchState.SUBMITTED][BatchEvent.LOCAL_REMOVED] is BatchState.CANCEL
    assert TRANSITIONS[BatchState.CANCEL][BatchEvent.CANCELLED_REMOVED] is BatchState.DELETE


def test_the_tag_is_saved_before_any_submit() -> None:
    """Every path into SUBMIT passes a committed tag: SAVE_TAG, or RECOVER (tag known)."""
    into_submit = {
        s for s, moves in TRANSITIONS.items() for t in moves.values() if t is BatchState.SUBMIT
    }
    assert into_submit == {BatchState.SAVE_TAG, BatchState.SUBMIT, BatchState.RECOVER}
    assert TRANSITIONS[BatchState.START][BatchEvent.HAS_TAG] is BatchState.RECOVER


def test_every_non_terminal_state_has_an_action() -> None:
    actions = BatchJob.actions(object.__new__(BatchJob))  # the mapping, not the job
    assert set(actions) == set(BatchState) - TERMINAL


def test_the_docstring_draws_the_table() -> None:
    doc = table.__doc__ or ""
    drawn = [line.strip() for line in doc.splitlines() if line.startswith("    ")]
    assert [" ".join(line.split()) for line in drawn] == [" ".join(d.split()) for d in draw()]
