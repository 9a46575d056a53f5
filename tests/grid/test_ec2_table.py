"""The ec2 state machine's table, checked exhaustively: every move, no dead state."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

import htgrid.grid.ec2._table as table
from htgrid.grid import BadTransition
from htgrid.grid.ec2._job import Ec2Job
from htgrid.grid.ec2._table import TABLE, TRANSITIONS, Ec2Event, Ec2State

INITIAL, TERMINAL = TABLE.initial, TABLE.terminal
next_state, draw = TABLE.next_state, TABLE.draw


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(Ec2State)


@pytest.mark.parametrize(
    ("state", "event", "target"),
    [(s, e, t) for s, moves in TRANSITIONS.items() for e, t in moves.items()],
    ids=lambda value: getattr(value, "name", str(value)),
)
def test_every_listed_move(state: Ec2State, event: Ec2Event, target: Ec2State) -> None:
    assert next_state(state, event) is target


def test_every_unlisted_move_is_refused() -> None:
    refused = 0
    for state, event in itertools.product(Ec2State, Ec2Event):
        if event in TRANSITIONS[state]:
            continue
        with pytest.raises(BadTransition, match=f"{state.name} got {event.name}"):
            next_state(state, event)
        refused += 1
    listed = sum(len(moves) for moves in TRANSITIONS.values())
    assert refused + listed == len(Ec2State) * len(Ec2Event)


def test_every_event_is_used() -> None:
    used = {event for moves in TRANSITIONS.values() for event in moves}
    assert used == set(Ec2Event)


def _reachable(start: Ec2State, edges: dict[Ec2State, set[Ec2State]]) -> set[Ec2State]:
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
    assert _reachable(INITIAL, forward) == set(Ec2State)
    # ...and every state can reach the end: no job is ever stuck for good.
    for state in Ec2State:
        assert _reachable(state, forward) & TERMINAL, state
    # Terminal states have no way out; the others all have one.
    for state in Ec2State:
        assert bool(TRANSITIONS[state]) is (state not in TERMINAL), state


def test_a_stopped_job_always_gets_out() -> None:
    """Local hold and remove are heard wherever a job waits on something outside."""
    waiting = {Ec2State.UNSUBMITTED, Ec2State.CREATE_KEYPAIR, Ec2State.START_VM}
    waiting |= {Ec2State.SEEK, Ec2State.SUBMITTED, Ec2State.DONE_SAVE}
    for state in waiting:
        assert {Ec2Event.LOCAL_HELD, Ec2Event.LOCAL_REMOVED} <= set(TRANSITIONS[state])
    # Once an instance exists, a removal terminates it before the job may leave.
    assert TRANSITIONS[Ec2State.SUBMITTED][Ec2Event.LOCAL_REMOVED] is Ec2State.CANCEL
    assert TRANSITIONS[Ec2State.CANCEL][Ec2Event.STOP_SENT] is Ec2State.CANCEL_CHECK
    assert TRANSITIONS[Ec2State.CANCEL_CHECK][Ec2Event.CANCELLED_REMOVED] is Ec2State.DELETE


def test_the_token_is_saved_before_any_start() -> None:
    """Every way into START_VM passes a committed token: SAVE_TOKEN, or SEEK (token known)."""
    into = {s for s, moves in TRANSITIONS.items() for t in moves.values() if t is Ec2State.START_VM}
    assert into == {Ec2State.CREATE_KEYPAIR, Ec2State.START_VM}
    into_keypair = {
        s
        for s, moves in TRANSITIONS.items()
        for t in moves.values()
        if t is Ec2State.CREATE_KEYPAIR
    }
    assert into_keypair == {Ec2State.SAVE_TOKEN, Ec2State.SEEK}
    # A job found with a token looks it up; a lost start is looked up too.
    assert TRANSITIONS[Ec2State.START][Ec2Event.HAS_TOKEN] is Ec2State.SEEK
    assert TRANSITIONS[Ec2State.START_VM][Ec2Event.START_LOST] is Ec2State.SEEK


def test_every_non_terminal_state_has_an_action() -> None:
    actions = Ec2Job.actions(object.__new__(Ec2Job))  # the mapping, not the job
    assert set(actions) == set(Ec2State) - TERMINAL


def test_the_docstring_draws_the_table() -> None:
    doc = table.__doc__ or ""
    drawn = [line.strip() for line in doc.splitlines() if line.startswith("    ")]
    assert [" ".join(line.split()) for line in drawn] == [" ".join(d.split()) for d in draw()]


def test_a_spot_request_is_made_only_after_its_token_is_saved() -> None:
    """EC2_VM_START_SPOT follows SAVE_TOKEN (via CREATE_KEYPAIR) or a token looked up."""
    into = {
        s for s, moves in TRANSITIONS.items() for t in moves.values() if t is Ec2State.SPOT_START
    }
    assert into == {Ec2State.CREATE_KEYPAIR, Ec2State.SPOT_START, Ec2State.SPOT_CHECK}
    # A lost answer, or a restart with only a token, looks the request up by token first.
    assert TRANSITIONS[Ec2State.SPOT_START][Ec2Event.START_LOST] is Ec2State.SPOT_CHECK
    assert TRANSITIONS[Ec2State.START][Ec2Event.HAS_SPOT_TOKEN] is Ec2State.SPOT_CHECK


def test_an_open_spot_request_is_cancelled_before_the_job_is_let_go() -> None:
    for state in (Ec2State.SPOT_START, Ec2State.SPOT_CHECK, Ec2State.SPOT_SUBMITTED):
        assert {Ec2Event.LOCAL_HELD, Ec2Event.LOCAL_REMOVED} <= set(TRANSITIONS[state])
    assert TRANSITIONS[Ec2State.SPOT_SUBMITTED][Ec2Event.LOCAL_REMOVED] is Ec2State.SPOT_CANCEL
    assert TRANSITIONS[Ec2State.HOLD][Ec2Event.SPOT_CANCEL_NEEDED] is Ec2State.SPOT_CANCEL
    # A request fulfilled while being cancelled: its instance is adopted, then terminated.
    assert TRANSITIONS[Ec2State.SPOT_CANCEL_CHECK][Ec2Event.FULFILLED] is Ec2State.SAVE_INSTANCE
    # Every fulfilled request becomes an ordinary instance through SAVE_INSTANCE.
    fulfilled = {
        moves[Ec2Event.FULFILLED] for moves in TRANSITIONS.values() if Ec2Event.FULFILLED in moves
    }
    assert fulfilled == {Ec2State.SAVE_INSTANCE}
