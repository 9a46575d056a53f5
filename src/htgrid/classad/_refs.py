"""Which attributes an expression refers to (externalRefs / internalRefs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from htgrid.classad._ad import AdBase
from htgrid.classad._ast import (
    AttrRef,
    Node,
    Subscript,
    children,
)
from htgrid.classad._compile import compiled, is_postfix, select_attr, subscript
from htgrid.classad._state import EvalState
from htgrid.classad._unparse import unparse
from htgrid.classad._values import UNDEFINED, Val

if TYPE_CHECKING:
    from htgrid.classad._classad import ClassAd

__all__ = ["references"]


class _Walk(NamedTuple):
    """An expression to walk, in the ad it lives in."""

    node: Node
    scope: ClassAd | None


class _Follow(NamedTuple):
    """An attribute of an ad to follow into its expression (once)."""

    owner: ClassAd
    key: str


# What is left to do: walk, follow, or note a name (a str; the first spelling met wins).
_Step = _Walk | _Follow | str


def references(ad: ClassAd, node: Node, *, external: bool) -> list[str]:
    """Names `node` refers to that `ad` does not (external) or does (internal) define.

    Follows ClassAd::_GetExternalReferences / _GetInternalReferences: attributes found
    are followed into their own expressions; an external name keeps the scope that could
    not be resolved (`TARGET.Memory`), a name missing from a resolved ad is bare. Sorted
    case-insensitively; an empty result is `['']`, as classad2 gives it.

    The steps are kept on a stack, last first, in the order a recursive walk takes
    them: attributes lead into each other without limit, and chains may be long.
    """
    found: dict[str, str] = {}
    st = EvalState(ad)
    seen: set[int] = set()
    todo: list[_Step] = [_Walk(node, ad)]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            found.setdefault(item.lower(), item)
        elif isinstance(item, _Follow):
            entry = item.owner._attrs[item.key]
            if id(entry) not in seen:
                seen.add(id(entry))
                todo.append(_Walk(entry.node, item.owner))
        elif type(item.node) is AttrRef:
            todo.extend(reversed(_ref_steps(item.node, item.scope, st, ad, external)))
        else:
            todo.extend(_Walk(child, item.scope) for child in reversed(children(item.node)))
    names = sorted(found.values(), key=str.lower)
    return names if names else [""]


def _ref_steps(
    a: AttrRef, scope: ClassAd | None, st: EvalState, ad: ClassAd, external: bool
) -> list[_Step]:
    """What the reference `a` (met in `scope`) adds, in order."""
    key = a.name.lower()
    steps: list[_Step] = []
    if a.base is None:
        owner = _owner(st.my if a.absolute else scope, key)
        if owner is None:
            if external and key not in _SCOPE_NAMES:
                steps.append(a.name)
        else:
            if not external:
                steps.append(a.name)
            steps.append(_Follow(owner, key))
        return steps
    local = st if scope is None or scope is st.ad else st.at(scope)
    if not external:
        if is_postfix(a.base):
            return _chain_steps(a, scope, local, ad)
        steps.append(_Walk(a.base, scope))
    try:
        base = compiled(a.base)(local)
    except Exception:
        return steps
    steps.extend(_select_steps(a, base, scope, ad, external))
    return steps


def _select_steps(
    a: AttrRef, base: Val, scope: ClassAd | None, ad: ClassAd, external: bool
) -> list[_Step]:
    """What `base.name` adds, `base` the value its scope part evaluated to."""
    key = a.name.lower()
    steps: list[_Step] = []
    if base is UNDEFINED:
        if external and a.base is not None:
            steps.append(f"{unparse(a.base)}.{a.name}")
        elif not external and _owner(scope, key) is not None:
            steps.append(a.name)
    elif isinstance(base, AdBase):
        owner = _owner(base, key)
        if owner is None:
            if external:
                steps.append(a.name)
        else:
            if not external and _root(owner) is ad and (owner is ad or base is ad):
                steps.append(a.name)
            steps.append(_Follow(owner, key))
    return steps


def _chain_steps(top: AttrRef, scope: ClassAd | None, st: EvalState, ad: ClassAd) -> list[_Step]:
    """Internal references of `x.a[i].b ...`: its innermost part walked, and each
    selection taken with the value of what it selects from, computed once along the
    chain (evaluating each part on its own would cost the square of its length)."""
    spine: list[Node] = []
    n: Node = top
    while n is top or is_postfix(n):
        spine.append(n)
        n = n.base  # type: ignore[attr-defined]
    steps: list[_Step] = [_Walk(n, scope)]
    value: Val | None
    try:
        value = compiled(n)(st)
    except Exception:
        value = None
    for x in reversed(spine):
        if type(x) is Subscript:
            steps.append(_Walk(x.index, scope))
            if value is not None:
                try:
                    value = subscript(st, value, compiled(x.index)(st))
                except Exception:
                    value = None
        elif value is not None:
            a: AttrRef = x  # type: ignore[assignment]
            steps.extend(_select_steps(a, value, scope, ad, False))
            value = select_attr(st, value, a.name.lower())
    return steps


_SCOPE_NAMES = frozenset({"my", "self", "parent", "root", "toplevel", "target", "other"})


def _root(ad: ClassAd) -> ClassAd:
    while ad._parent is not None:
        ad = ad._parent
    return ad


def _owner(start: ClassAd | None, key: str) -> ClassAd | None:
    ad = start
    while ad is not None:
        if key in ad._attrs:
            return ad
        ad = ad._parent
    return None
