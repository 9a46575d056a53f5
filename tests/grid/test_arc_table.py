"""The ARC state machine's table, checked exhaustively: every move, no dead state."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

import htgrid.grid.arc._table as table
from htgrid.grid import BadTransition
from htgrid.grid.arc._job import ArcJob
from htgrid.grid.arc._table import TABLE, TRANSITIONS, ArcEvent, ArcState

_S = ArcState
_E = ArcEvent


def test_every_unlisted_move_is_refused_and_every_event_used() -> None:
    for state, event in itertools.product(ArcState, ArcEvent):
        if event in TRANSITIONS[state]:
            assert TABLE.next_state(state, event) is TRANSITIONS[state][event]
            continue
        with pytest.raises(BadTransition, match=f"{state.name} got {event.name}"):
            TABLE.next_state(state, event)
    assert {e for moves in TRANSITIONS.values() for e in moves} == set(ArcEvent)


def test_no_dead_states() -> None:
    forward = {s: set(moves.values()) for s, moves in TRANSITIONS.items()}

    def reachable(start: ArcState) -> set[ArcState]:
        seen, todo = {start}, deque([start])
        while todo:
            for nxt in forward[todo.popleft()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    assert reachable(TABLE.initial) == set(ArcState)
    for state in ArcState:
        assert reachable(state) & TABLE.terminal, state


def test_the_name_is_saved_before_any_submit_and_a_lost_one_is_looked_up() -> None:
    into_submit = {s for s, m in TRANSITIONS.items() for t in m.values() if t is _S.SUBMIT}
    assert into_submit == {_S.DELEGATE}
    into_delegate = {s for s, m in TRANSITIONS.items() for t in m.values() if t is _S.DELEGATE}
    assert into_delegate == {_S.SAVE_NAME, _S.CHECK, _S.DELEGATE}
    assert TRANSITIONS[_S.SUBMIT][_E.SUBMIT_UNSURE] is _S.CHECK
    assert TRANSITIONS[_S.START][_E.HAS_NAME] is _S.CHECK


def test_a_job_at_the_ce_is_killed_before_a_held_or_removed_job_goes() -> None:
    for state in (_S.STAGE_IN, _S.SUBMITTED, _S.EXIT_INFO, _S.STAGE_OUT, _S.CLEAN):
        assert TRANSITIONS[state][_E.LOCAL_HELD] is _S.CANCEL, state
        assert TRANSITIONS[state][_E.LOCAL_REMOVED] is _S.CANCEL, state


def test_a_finished_job_is_cleaned_from_the_ce_before_its_exit_goes_to_the_queue() -> None:
    assert TRANSITIONS[_S.STAGE_OUT][_E.STAGED] is _S.CLEAN
    into_done = {s for s, moves in TRANSITIONS.items() if _S.DONE_SAVE in moves.values()}
    assert into_done == {_S.CLEAN}
    # A grid manager killed after the clean finds the saved exit and completes the job.
    assert TRANSITIONS[_S.START][_E.HAS_EXIT] is _S.CLEAN


def test_every_non_terminal_state_has_an_action() -> None:
    actions = ArcJob.actions(object.__new__(ArcJob))
    assert set(actions) == set(ArcState) - TABLE.terminal


def test_the_docstring_draws_the_table() -> None:
    doc = table.__doc__ or ""
    drawn = [line.strip() for line in doc.splitlines() if line.startswith("    ")]
    assert [" ".join(line.split()) for line in drawn] == [" ".join(d.split()) for d in TABLE.draw()]
