"""The state one evaluation carries (where names are looked up, what is in progress, and
how much work it may still do), and the way into evaluation: a node's compiled closure.

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

__all__ = [
    "COMPILERS",
    "MAX_EVALUATION_STEPS",
    "Budget",
    "Compiled",
    "EvalState",
    "begin",
    "budget_of",
    "charge",
    "compiled",
    "eval_in",
    "overspent",
    "root_of",
]

#: The work one evaluation may do before it gives up with ERROR. Each attribute it
#: evaluates (one that is not a constant) is a step, and an expression of more than a few
#: dozen nodes costs its size each time it is evaluated (see `_compile.py`), so steps
#: bound the evaluator's work whatever the shape. Attributes are not remembered within an
#: evaluation (HTCondor does not either), so `A = B + B; B = C + C; ...` 60 deep would take
#: 2**60 steps: this stops it within about a second instead of never. A job matched with a
#: machine takes tens of steps, a 100,000-term chain of attribute references about
#: 200,000.
MAX_EVALUATION_STEPS: Final = 1_000_000


#: The steps an evaluation may still take, as a one-item list (made at every evaluation
#: that reads an attribute which is not a constant: a list is the cheapest to make); below
#: zero once it has taken too many.
Budget: TypeAlias = "list[int]"


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
    so a reference back into one of them (a cycle) is seen and answered UNDEFINED;
    `budget` is the evaluation's steps, shared likewise. Both are made on first need
    (`begin`): most evaluations only read constants.
    """

    __slots__ = ("active", "ad", "budget", "my", "target")

    def __init__(
        self,
        ad: ClassAd | None,
        my: ClassAd | None = None,
        target: ClassAd | None = None,
        active: set[Entry] | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.ad = ad
        if my is None and ad is not None:
            my = ad if ad._parent is None else root_of(ad)
        self.my = my
        self.target = target
        self.active: set[Entry] | None = active
        self.budget: Budget | None = budget

    def at(self, ad: ClassAd) -> EvalState:
        """The state for evaluating an expression that lives in `ad`.

        MY and TARGET follow the ad: an expression of the target ad sees the target as MY.
        """
        if ad is self.ad:
            return self
        active = begin(self)
        root = root_of(ad)
        if root is self.my:
            return EvalState(ad, self.my, self.target, active, self.budget)
        if root is self.target:
            return EvalState(ad, self.target, self.my, active, self.budget)
        return EvalState(ad, root, None, active, self.budget)


def begin(st: EvalState) -> set[Entry]:
    """The evaluation's set of entries in progress, made (with its budget, if it has none
    yet) on first need: a state with `active` always has a `budget`."""
    active = st.active
    if active is None:
        active = st.active = set()
        if st.budget is None:
            st.budget = [MAX_EVALUATION_STEPS]
    return active


def budget_of(st: EvalState) -> Budget:
    """The evaluation's budget, made on first need."""
    budget = st.budget
    if budget is None:
        budget = st.budget = [MAX_EVALUATION_STEPS]
    return budget


def charge(st: EvalState, steps: int) -> bool:
    """Take `steps` from the evaluation's budget: False once it has run out."""
    budget = st.budget or budget_of(st)
    left = budget[0] - steps
    budget[0] = left
    return left >= 0


def overspent(st: EvalState) -> bool:
    """Whether the evaluation `st` belongs to took more steps than it may: its value,
    whatever came of it, is ERROR."""
    budget = st.budget
    return budget is not None and budget[0] < 0


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
