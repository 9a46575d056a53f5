"""Which attributes an expression refers to (externalRefs / internalRefs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from htgrid.classad._ast import (
    AttrRef,
    Node,
    children,
)
from htgrid.classad._compile import compiled
from htgrid.classad._state import EvalState
from htgrid.classad._unparse import unparse
from htgrid.classad._values import UNDEFINED

if TYPE_CHECKING:
    from htgrid.classad._classad import ClassAd

__all__ = ["references"]


def references(ad: ClassAd, node: Node, *, external: bool) -> list[str]:
    """Names `node` refers to that `ad` does not (external) or does (internal) define.

    Follows ClassAd::_GetExternalReferences / _GetInternalReferences: attributes found
    are followed into their own expressions; an external name keeps the scope that could
    not be resolved (`TARGET.Memory`), a name missing from a resolved ad is bare. Sorted
    case-insensitively; an empty result is `['']`, as classad2 gives it.
    """
    from htgrid.classad._classad import ClassAd

    found: dict[str, str] = {}
    st = EvalState(ad)
    seen: set[int] = set()

    def note(name: str) -> None:
        found.setdefault(name.lower(), name)

    def follow(owner: ClassAd, key: str) -> None:
        entry = owner._attrs[key]
        if id(entry) not in seen:
            seen.add(id(entry))
            walk(entry.node, owner)

    def walk(n: Node, scope: ClassAd | None) -> None:
        if type(n) is not AttrRef:
            for child in children(n):
                walk(child, scope)
            return
        a: AttrRef = n
        key = a.name.lower()
        if a.base is None:
            start = st.my if a.absolute else scope
            owner = _owner(start, key)
            if owner is None:
                if external and key not in _SCOPE_NAMES:
                    note(a.name)
                return
            if not external:
                note(a.name)
            follow(owner, key)
            return
        if not external:
            walk(a.base, scope)
        local = st if scope is None or scope is st.ad else st.at(scope)
        try:
            base = compiled(a.base)(local)
        except Exception:
            return
        if base is UNDEFINED:
            if external:
                note(f"{unparse(a.base)}.{a.name}")
            elif _owner(scope, key) is not None:
                note(a.name)
            return
        if isinstance(base, ClassAd):
            owner = _owner(base, key)
            if owner is None:
                if external:
                    note(a.name)
                return
            if not external and _root(owner) is ad and (owner is ad or base is ad):
                note(a.name)
            follow(owner, key)

    walk(node, ad)
    names = sorted(found.values(), key=str.lower)
    return names if names else [""]


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
