"""The state one evaluation carries (where names are looked up, and what is in
progress), and the way into evaluation: a node's compiled closure.

Evaluating is recursive through the modules above (a compiled reference evaluates the
attribute's expression, a list its items, a function its arguments), so the compilers
are found here by the node's type: _compile.py registers them, and _classad.py the one
of `[...]` records (whose value is a ClassAd).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeAlias

if TYPE_CHECKING:
    from htgrid.classad._ast import Node
    from htgrid.classad._classad import ClassAd, Entry
    from htgrid.classad._values import Val

__all__ = ["COMPILERS", "Compiled", "EvalState", "compiled", "eval_in", "root_of"]


def root_of(ad: ClassAd) -> ClassAd:
    """The top-level ad of `ad`'s chain of enclosing ads."""
    while ad._parent is not None:
        ad = ad._parent
    return ad


class EvalState:
    """Scope of an evaluation.

    `ad` is the ad unscoped names are looked up in first (then its enclosing ads);
    `my` and `target` are the two sides of a match (`target` may be None); `active` is
    the set of attribute entries being evaluated, shared by all states of one evaluation,
    so a reference back into one of them (a cycle) is seen and answered UNDEFINED.
    """

    __slots__ = ("active", "ad", "my", "target")

    def __init__(
        self,
        ad: ClassAd | None,
        my: ClassAd | None = None,
        target: ClassAd | None = None,
        active: set[Entry] | None = None,
    ) -> None:
        self.ad = ad
        if my is None and ad is not None:
            my = ad if ad._parent is None else root_of(ad)
        self.my = my
        self.target = target
        # Made on first need: most evaluations only read constants.
        self.active: set[Entry] | None = active

    def at(self, ad: ClassAd) -> EvalState:
        """The state for evaluating an expression that lives in `ad`.

        MY and TARGET follow the ad: an expression of the target ad sees the target as MY.
        """
        if ad is self.ad:
            return self
        if self.active is None:
            self.active = set()
        root = root_of(ad)
        if root is self.my:
            return EvalState(ad, self.my, self.target, self.active)
        if root is self.target:
            return EvalState(ad, self.target, self.my, self.active)
        return EvalState(ad, root, None, self.active)


Compiled: TypeAlias = "Callable[[EvalState], Val]"

#: The compiler of each node type: its node -> the closure evaluating it.
COMPILERS: Final[dict[type, Callable[[Any], Compiled]]] = {}


def compiled(node: Node) -> Compiled:
    """The closure evaluating `node`, compiled on first use."""
    fn: Compiled | None = node._fn
    if fn is None:
        fn = COMPILERS[type(node)](node)
        object.__setattr__(node, "_fn", fn)
    return fn


def eval_in(node: Node, state: EvalState | None) -> Val:
    """Evaluate `node` in `state` (an empty scope when None)."""
    return compiled(node)(state if state is not None else EvalState(None))
