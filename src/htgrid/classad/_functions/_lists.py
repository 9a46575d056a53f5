"""List functions: member identicalMember anyCompare allCompare evalInEachContext countMatches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from htgrid.classad._ad import AdBase
from htgrid.classad._ast import AttrRef, Node
from htgrid.classad._functions._registry import builtin
from htgrid.classad._lookup import eval_apart
from htgrid.classad._ops import BINARY_OPS
from htgrid.classad._state import EvalState, eval_in
from htgrid.classad._values import ERROR, UNDEFINED, ListValue

if TYPE_CHECKING:
    from collections.abc import Callable

    from htgrid.classad._values import Val

__all__: list[str] = []


def _is_ad(v: object) -> bool:
    return isinstance(v, AdBase)


def _member(args: tuple[Val, ...], identical: bool) -> Val:
    if len(args) != 2:
        return ERROR
    x, lst = args
    if lst is UNDEFINED or (not identical and x is UNDEFINED):
        return UNDEFINED
    if type(lst) is not ListValue or type(x) is ListValue or _is_ad(x):
        return ERROR
    if not identical and x is ERROR:
        return ERROR
    op = BINARY_OPS["=?=" if identical else "=="]
    return any(op(item, x) is True for item in lst.values())


@builtin("member")
def _member_fn(state: EvalState, *args: Val) -> Val:
    """`member(x, list)`: is some item == x (case-insensitive, numbers coerced)."""
    return _member(args, False)


@builtin("identicalMember")
def _identical_member(state: EvalState, *args: Val) -> Val:
    """`identicalMember(x, list)`: is some item =?= x."""
    return _member(args, True)


_COMPARE_OPS = {
    "<": "<",
    "<=": "<=",
    "!=": "!=",
    "==": "==",
    ">": ">",
    ">=": ">=",
    "is": "=?=",
    "isnt": "=!=",
}


def _list_compare(args: tuple[Val, ...], need_all: bool) -> Val:
    if len(args) != 3:
        return ERROR
    opname, lst, x = args
    if opname is UNDEFINED:
        return UNDEFINED
    if type(opname) is not str:
        return ERROR
    key = _COMPARE_OPS.get(opname)
    if key is None:
        return ERROR
    if lst is UNDEFINED:
        return UNDEFINED
    if type(lst) is not ListValue:
        return ERROR
    op: Callable[[Val, Val], Val] = BINARY_OPS[key]
    for item in lst.values():
        r = op(item, x)
        if type(r) is not bool:
            # The C loop stops at the first non-boolean: UNDEFINED gives false, else ERROR.
            return False if r is UNDEFINED else ERROR
        if r and not need_all:
            return True
        if not r and need_all:
            return False
    return need_all


@builtin("anyCompare")
def _any_compare(state: EvalState, *args: Val) -> Val:
    """`anyCompare(op, list, x)`: does `item op x` hold for some item."""
    return _list_compare(args, False)


@builtin("allCompare")
def _all_compare(state: EvalState, *args: Val) -> Val:
    """`allCompare(op, list, x)`: does `item op x` hold for every item."""
    return _list_compare(args, True)


def _in_each(state: EvalState, nodes: tuple[Node, ...], count: bool) -> Val:
    if len(nodes) != 2:
        return ERROR
    expr = nodes[0]
    if type(expr) is AttrRef and expr.base is None and not expr.absolute:
        # An attribute name stands for its expression, looked up in the caller's scope;
        # a name that is not found is evaluated as is in each ad.
        ad = state.ad
        while ad is not None:
            entry = ad._lookup_entry(expr.name)
            if entry is not None:
                expr = entry.node
                break
            ad = ad._parent
    lst = eval_in(nodes[1], state)
    if lst is UNDEFINED:
        return 0 if count else UNDEFINED
    if type(lst) is not ListValue:
        return ERROR
    results: list[Val] = []
    matches = 0
    for item in lst.values():
        if _is_ad(item):
            r = eval_apart(expr, item, state)  # type: ignore[arg-type]
        else:
            r = UNDEFINED if item is UNDEFINED else ERROR
        if count:
            t = type(r)
            if (t is bool or t is int or t is float) and r:
                matches += 1
        else:
            results.append(r)
    return matches if count else ListValue.from_values(results)


@builtin("evalInEachContext", lazy=True, pure=False)
def _eval_in_each_context(state: EvalState, *nodes: Node) -> Val:
    """`evalInEachContext(expr, listOfAds)`: expr evaluated with each ad as scope."""
    return _in_each(state, nodes, False)


@builtin("countMatches", lazy=True, pure=False)
def _count_matches(state: EvalState, *nodes: Node) -> Val:
    """`countMatches(expr, listOfAds)`: how many ads make expr true (undefined list: 0)."""
    return _in_each(state, nodes, True)
