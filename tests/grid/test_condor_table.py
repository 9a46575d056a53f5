"""The condor state machine's table, checked exhaustively: every move, no dead state."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

import htgrid.grid.condor._table as table
from htgrid.grid import BadTransition
from htgrid.grid.condor._job import CondorJob
from htgrid.grid.condor._table import TABLE, TRANSITIONS, CondorEvent, CondorState

_S = CondorState
_E = CondorEvent

INITIAL, TERMINAL = TABLE.initial, TABLE.terminal
next_state, draw = TABLE.next_state, TABLE.draw


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(CondorState)


def test_every_unlisted_move_is_refused() -> None:
    refused = 0
    for state, event in itertools.product(CondorState, CondorEvent):
        if event in TRANSITIONS[state]:
            assert next_state(state, event) is TRANSITIONS[state][event]
            continue
        with pytest.raises(BadTransition, match=f"{state.name} got {event.name}"):
            next_state(state, event)
        refused += 1
    listed = sum(len(moves) for moves in TRANSITIONS.values())
    assert refused + listed == len(CondorState) * len(CondorEvent)


def test_every_event_is_used() -> None:
    assert {event for moves in TRANSITIONS.values() for event in moves} == set(CondorEvent)


def _reachable(start: CondorState) -> set[CondorState]:
    seen, todo = {start}, deque([start])
    while todo:
        for nxt in TRANSITIONS[todo.popleft()].values():
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_dead_states() -> None:
    assert _reachable(INITIAL) == set(CondorState)
    for state in CondorState:
        assert _reachable(state) & TERMINAL, state
        assert bool(TRANSITIONS[state]) is (state not in TERMINAL), state


def test_a_removed_job_always_gets_out() -> None:
    """Local removal is heard wherever a job waits on the remote schedd; once something
    may exist there, it is removed there first (CANCEL) before the job leaves."""
    waiting = {_S.UNSUBMITTED, _S.SUBMIT, _S.RECOVER, _S.STAGE_IN, _S.POLL_ACTIVE}
    waiting |= {_S.SUBMITTED, _S.HOLD_REMOTE, _S.RELEASE_REMOTE, _S.STAGE_OUT}
    for state in waiting:
        assert _E.LOCAL_REMOVED in TRANSITIONS[state], state
    remote_exists = {_S.STAGE_IN, _S.POLL_ACTIVE, _S.SUBMITTED, _S.HOLD_REMOTE, _S.STAGE_OUT}
    for state in remote_exists:
        assert TRANSITIONS[state][_E.LOCAL_REMOVED] is _S.CANCEL, state


def test_the_tag_is_saved_before_any_submit() -> None:
    into_submit = {s for s, moves in TRANSITIONS.items() if _S.SUBMIT in moves.values()}
    assert into_submit == {_S.SAVE_TAG, _S.SUBMIT, _S.RECOVER}
    assert TRANSITIONS[_S.START][_E.HAS_TAG] is _S.RECOVER


def test_the_output_comes_back_before_the_local_job_completes() -> None:
    """DONE_SAVE (the local exit) is reached only through STAGE_OUT, and the remote copy
    is let go (DONE_COMMIT) only after it."""
    assert {s for s, m in TRANSITIONS.items() if _S.DONE_SAVE in m.values()} == {_S.STAGE_OUT}
    into_commit = {s for s, m in TRANSITIONS.items() if _S.DONE_COMMIT in m.values()}
    assert into_commit == {_S.DONE_SAVE, _S.START}


def test_every_non_terminal_state_has_an_action() -> None:
    actions = CondorJob.actions(object.__new__(CondorJob))
    assert set(actions) == set(CondorState) - TERMINAL


def test_the_docstring_draws_the_table() -> None:
    doc = table.__doc__ or ""
    drawn = [line.strip() for line in doc.splitlines() if line.startswith("    ")]
    assert [" ".join(line.split()) for line in drawn] == [" ".join(d.split()) for d in draw()]
