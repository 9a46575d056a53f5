"""What a compiled expression costs: the nodes counted while a tree compiles.

An expression of more than `SMALL` nodes pays its size in steps of the evaluation's
budget (`MAX_EVALUATION_STEPS`) each time it is evaluated, so that a large expression
reached again and again is bounded as attribute references are; the nodes of a
sub-expression that pays for itself are not counted again in the one around it. Small
expressions, the usual kind, cost nothing more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

from htgrid.classad._ast import Node, children
from htgrid.classad._state import Compiled, EvalState, budget_of
from htgrid.classad._values import ERROR, Val

__all__ = ["SMALL", "counted", "sized", "tree_size"]

#: Expressions of more nodes than this pay for their size when evaluated.
SMALL: Final = 32

_threads = threading.local()


def _count() -> list[int]:
    """This thread's count of the nodes compiled so far (one item), for the sizes of the
    trees being compiled: threads may compile at the same time."""
    try:
        return _threads.count  # type: ignore[no-any-return]
    except AttributeError:
        count = _threads.count = [0]
        return count


def sized(compile_node: Callable[[Node], Compiled]) -> Callable[[Node], Compiled]:
    """`compile_node`, counting the nodes it compiles: the closure of a tree of more than
    `SMALL` of them pays its size each time it is evaluated."""

    def compile_sized(node: Node) -> Compiled:
        count = _count()
        before = count[0]
        fn = compile_node(node)
        size = count[0] - before + 1
        if size > SMALL:
            fn = _charged(fn, size)
            size = 1
        count[0] = before + size
        return fn

    return compile_sized


def counted(nodes: int) -> None:
    """Count work of the node being compiled that is not in a sub-expression compiled now."""
    _count()[0] += nodes


def tree_size(nodes: tuple[Node, ...]) -> int:
    size = 0
    todo = list(nodes)
    while todo:
        size += 1
        todo.extend(children(todo.pop()))
    return size


def _charged(fn: Compiled, size: int) -> Compiled:
    """`fn`, paying `size` steps each time it is evaluated (ERROR once they run out)."""

    def f(st: EvalState) -> Val:
        budget = st.budget or budget_of(st)
        left = budget[0] - size
        budget[0] = left
        if left < 0:
            return ERROR
        return fn(st)

    return f
