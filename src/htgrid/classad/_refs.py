"""Which attributes an expression refers to (externalRefs / internalRefs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from htgrid.classad._ast import (
    AdExpr,
    AttrRef,
    Binary,
    Call,
    Elvis,
    ListExpr,
    Node,
    Paren,
    Subscript,
    Ternary,
    Unary,
)
from htgrid.classad._compile import compiled
from htgrid.classad._state import EvalState
from htgrid.classad._unparse import unparse
from htgrid.classad._values import UNDEFINED

if TYPE_CHECKING:
    from htgrid.classad._classad import ClassAd

__all__ = ["references"]


def _children(node: Node) -> tuple[Node, ...]:
    t = type(node)
    if t is Binary or t is Elvis:
        return (node.left, node.right)  # type: ignore[attr-defined]
    if t is Unary:
        return (node.operand,)  # type: ignore[attr-defined]
    if t is Paren:
        return (node.inner,)  # type: ignore[attr-defined]
    if t is Ternary:
        return (node.cond, node.then, node.other)  # type: ignore[attr-defined]
    if t is Subscript:
        return (node.base, node.index)  # type: ignore[attr-defined]
    if t is Call:
        return node.args  # type: ignore[attr-defined, no-any-return]
    if t is ListExpr:
        return node.items  # type: ignore[attr-defined, no-any-return]
    if t is AdExpr:
        return tuple(expr for _, expr in node.attrs)  # type: ignore[attr-defined]
    return ()


def references(ad: ClassAd, node: Node, *, external: bool) -> list[str]:
    """Names `node` refers to that `ad` does not (external) or does (internal) define.

    External names keep their scope prefix (`TARGET.Memory`); attributes the ad defines
    are followed into their own expressions. Sorted case-insensitively; an empty result
    is `['']`, as classad2 gives it.
    """
    found: dict[str, str] = {}
    st = EvalState(ad)
    seen: set[int] = set()

    def walk(n: Node, scope: ClassAd | None) -> None:
        if type(n) is AttrRef:
            a: AttrRef = n  # type: ignore[assignment]
            if a.base is None:
                start = st.my if a.absolute else scope
                owner = _owner(start, a.name.lower())
                if owner is None:
                    if external:
                        found.setdefault(a.name.lower(), a.name)
                    return
                if not external:
                    found.setdefault(a.name.lower(), a.name)
                entry = owner._attrs[a.name.lower()]
                if id(entry) not in seen:
                    seen.add(id(entry))
                    walk(entry.node, owner)
                return
            base = compiled(a.base)(st if scope is ad else st.at(scope) if scope else st)
            if base is UNDEFINED:
                if external:
                    name = f"{unparse(a.base)}.{a.name}"
                    found.setdefault(name.lower(), name)
                return
            from htgrid.classad._classad import ClassAd

            if isinstance(base, ClassAd):
                owner = _owner(base, a.name.lower())
                if owner is not None and not external:
                    found.setdefault(a.name.lower(), a.name)
            return
        for child in _children(n):
            walk(child, scope)

    walk(node, ad)
    names = sorted(found.values(), key=str.lower)
    return names if names else [""]


def _owner(start: ClassAd | None, key: str) -> ClassAd | None:
    ad = start
    while ad is not None:
        if key in ad._attrs:
            return ad
        ad = ad._parent
    return None
