"""The fake ARM itself, where the grid manager's tests lean on how Azure behaves."""

from __future__ import annotations

from ._arm_ops import Operations


def test_an_operation_nobody_polls_still_finishes() -> None:
    """A GAHP killed in the middle of a create stops polling; Azure finishes the VM anyway
    (the grid manager's kill -9 tests then find it running, not `creating` for ever)."""
    ended: list[str] = []
    ops = Operations(polls=3, settle_after=3600)
    ops.start("base", "/vm/a", lambda: ended.append("a"))
    ops.settle()
    assert ended == []  # still running
    ops.settle_after = 0
    ops.settle()
    assert ended == ["a"]
    ops.settle()
    assert ended == ["a"]  # once


def test_a_polled_operation_finishes_after_its_polls_once() -> None:
    ended: list[str] = []
    ops = Operations(polls=1, settle_after=3600)
    op_id, _ = ops.start("base", "/vm/b", lambda: ended.append("b"))
    assert ops.status(op_id)[2]["status"] == "InProgress"
    assert ops.status(op_id)[2]["status"] == "Succeeded"
    ops.settle_after = 0
    ops.settle()
    assert ops.status(op_id)[2]["status"] == "Succeeded"
    assert ended == ["b"]
