"""Name lookup for compiled expressions: attributes found from an ad outwards, HTCondor's
fallback to the target ad, selections (`x.name`) and subscripts (`x[i]`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from htgrid.classad._ad import _NOLIT, AdBase
from htgrid.classad._state import (
    MAX_EVALUATION_STEPS,
    Budget,
    EvalState,
    charge,
    compiled,
    eval_in,
)
from htgrid.classad._values import ERROR, UNDEFINED, ListValue, Val

if TYPE_CHECKING:
    from htgrid.classad._ast import Node
    from htgrid.classad._classad import ClassAd, Entry

__all__ = [
    "MAX_NESTED_ATTRIBUTES",
    "eval_apart",
    "eval_entry",
    "lookup",
    "lookup_from",
    "select_attr",
    "subscript",
]

#: How many attributes one evaluation may follow into each other (`a = b + 1; b = c + 1;
#: ...`) before the innermost gives ERROR, as HTCondor's evaluation depth limit does.
MAX_NESTED_ATTRIBUTES: Final = 1000

_SPECIAL: Final = frozenset({"toplevel", "root", "self", "my", "parent", "currenttime"})
_TARGET_NAMES: Final = frozenset({"target", "other"})


def eval_entry(st: EvalState, ad: ClassAd, entry: Entry) -> Val:
    """Evaluate an attribute found in `ad`; a reference back into itself is UNDEFINED,
    and once the evaluation has taken all its steps every attribute is ERROR."""
    lit = entry.lit
    if lit is not _NOLIT:
        return lit  # type: ignore[return-value]
    active = st.active
    if active is None:  # `begin`, inline: this is the hot path of matchmaking
        active = st.active = set()
        if st.budget is None:
            st.budget = [MAX_EVALUATION_STEPS]
    elif entry in active:
        return UNDEFINED
    elif len(active) >= MAX_NESTED_ATTRIBUTES:
        return ERROR
    budget: Budget = st.budget  # type: ignore[assignment]  # `begin` made both
    left = budget[0] - 1  # a step (MAX_EVALUATION_STEPS)
    budget[0] = left
    if left < 0:
        return ERROR
    active.add(entry)
    try:
        fn = entry.node._fn
        if fn is None:  # compiled on first use
            fn = compiled(entry.node)
        return fn(st if ad is st.ad else st.at(ad))  # type: ignore[no-any-return]
    finally:
        active.discard(entry)


def lookup_from(st: EvalState, start: ClassAd | None, key: str) -> Val:
    """Look `key` (lower case) up from `start` outwards, as ClassAd::LookupInScope does."""
    ad = start
    while ad is not None:
        entry = ad._attrs.get(key)
        if entry is not None:
            return eval_entry(st, ad, entry)
        if key in _SPECIAL:
            return _special(st, ad, key)
        ad = ad._parent
    if key in _TARGET_NAMES and st.target is not None:
        return st.target
    notfound: Val = _NOTFOUND
    return notfound


def _special(st: EvalState, ad: ClassAd, key: str) -> Val:
    if key == "self" or key == "my":
        return ad
    if key == "parent":
        return ad._parent if ad._parent is not None else UNDEFINED
    if key == "currenttime":
        return int(time.time())
    root = ad
    while root._parent is not None:
        root = root._parent
    return root


def lookup(st: EvalState, key: str) -> Val:
    """An unscoped reference: the current scope, then (HTCondor's alternate scope) the target."""
    v = lookup_from(st, st.ad, key)
    if v is _NOTFOUND:
        target = st.target
        if target is not None and st.ad is st.my:
            v = lookup_from(st, target, key)
            if v is not _NOTFOUND:
                return v
        if st.ad is None and key in _SPECIAL and key == "currenttime":
            return int(time.time())
        return UNDEFINED
    return v


class _Marker:
    __slots__ = ()


_NOTFOUND: Final[Any] = _Marker()


def select_attr(st: EvalState, scope: Val, key: str) -> Val:
    """`scope.name`: look the name up in an ad, or in each ad of a list (a projection)."""
    if isinstance(scope, AdBase):
        v = lookup_from(st, scope, key)
        return UNDEFINED if v is _NOTFOUND else v
    if type(scope) is ListValue:
        # A projection: the name selected from each item (lists of lists recursively).
        return ListValue.from_values([select_attr(st, item, key) for item in scope.values()])
    if scope is UNDEFINED:
        return UNDEFINED
    return ERROR


def subscript(st: EvalState, b: Val, i: Val) -> Val:
    """`b[i]`: a list item by integer position, or an ad's attribute by name."""
    if b is ERROR or i is ERROR:
        return ERROR
    if b is UNDEFINED or i is UNDEFINED:
        return UNDEFINED
    if type(b) is ListValue:
        if type(i) is not int:
            return ERROR
        items = b.values()
        if 0 <= i < len(items):
            return items[i]
        return ERROR
    if isinstance(b, AdBase):
        if type(i) is not str:
            return ERROR
        v = lookup_from(st, b, i.lower())
        return UNDEFINED if v is _NOTFOUND else v
    return ERROR


def eval_apart(node: Node, ad: ClassAd, state: EvalState) -> Val:
    """Evaluate `node` in `ad` as an evaluation of its own (no attribute is in progress
    there, as in `EvalState(ad)`) that draws on `state`'s budget."""
    if not charge(state, 1):
        return ERROR
    return eval_in(node, EvalState(ad, None, None, None, state.budget))
