"""Compiling syntax trees into Python closures (the name lookup is in `_lookup.py`).

Each node compiles once into `f(state) -> value`; the closure is kept on the node. The
hot shapes of matchmaking (an attribute compared with a constant, `&&` chains) get
closures of their own so a Requirements expression costs a handful of Python calls.
Here: attribute references, calls, lists and the table of compilers; the operators are
in `_compile_ops.py`, what a large expression costs in `_compile_cost.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from htgrid.classad._ad import _NOLIT as _NOLIT  # other modules take it from here
from htgrid.classad._ast import (
    AttrRef,
    Binary,
    Call,
    Elvis,
    ListExpr,
    Literal,
    Node,
    Paren,
    Subscript,
    Ternary,
    Unary,
)
from htgrid.classad._compile_cost import counted, sized, tree_size
from htgrid.classad._compile_ops import (
    compile_binary,
    compile_elvis,
    compile_paren,
    compile_ternary,
    compile_unary,
)
from htgrid.classad._lookup import _NOTFOUND as _NOTFOUND
from htgrid.classad._lookup import (
    _SPECIAL,
    _TARGET_NAMES,
    MAX_NESTED_ATTRIBUTES,
    eval_entry,
    lookup,
    lookup_from,
    select_attr,
    subscript,
)
from htgrid.classad._state import COMPILERS, Compiled, EvalState, charge, compiled
from htgrid.classad._values import ERROR, UNDEFINED, AbsTime, ListValue, RelTime, Val

__all__ = [
    "MAX_NESTED_ATTRIBUTES",
    "Compiled",
    "EvaluationFailed",
    "RaisedInPython",
    "compiled",
    "is_postfix",
    "lookup",
    "lookup_from",
    "select_attr",
    "subscript",
]


class EvaluationFailed(Exception):
    """An evaluation that cannot give any value (classad2 raises for these)."""


class RaisedInPython(Exception):
    """A Python function registered with `classad.register` raised `error`: the caller
    of the evaluation gets it, as from the version-1 module."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


_SCALARS: Final = (bool, int, float, str, AbsTime, RelTime)


#: A built-in function given a string longer than this pays a step per this many
#: characters (its work grows with them, and the string may be an ad's, read for free).
_LONG: Final = 1024


# -- node compilers ---------------------------------------------------------------------


def _literal(node: Literal) -> Compiled:
    value = node.value
    if type(value) is RelTime:
        # HTCondor evaluates a relTime("...") literal to a plain real (isReal is true).
        value = float(value.secs)

    def f(st: EvalState) -> Val:
        return value

    return f


def _attr(node: AttrRef) -> Compiled:
    key = node.name.lower()
    if node.absolute:

        def absolute(st: EvalState) -> Val:
            if st.my is None:
                raise EvaluationFailed(f"'.{node.name}' refers to the root ad, but there is none")
            v = lookup_from(st, st.my, key)
            return UNDEFINED if v is _NOTFOUND else v

        return absolute
    if node.base is None:
        if key in _SPECIAL or key in _TARGET_NAMES:

            def special(st: EvalState) -> Val:
                return lookup(st, key)

            return special

        def plain(st: EvalState) -> Val:
            ad = st.ad
            while ad is not None:
                entry = ad._attrs.get(key)
                if entry is not None:
                    lit = entry.lit
                    if lit is not _NOLIT:
                        return lit  # type: ignore[return-value]
                    return eval_entry(st, ad, entry)
                ad = ad._parent
            return lookup(st, key)

        return plain
    base_node = node.base
    if type(base_node) is AttrRef and base_node.base is None and not base_node.absolute:
        scope_name = base_node.name.lower()
        if scope_name in _TARGET_NAMES:
            return _target_select(scope_name, key)
        if scope_name == "my" or scope_name == "self":
            return _my_select(scope_name, key)
    if is_postfix(base_node):
        return _postfix_chain(node)
    base = compiled(node.base)

    def select(st: EvalState) -> Val:
        return select_attr(st, base(st), key)

    return select


def _target_select(scope_name: str, key: str) -> Compiled:
    """`TARGET.x`, the commonest reference in matchmaking, without the generic walk."""

    def f(st: EvalState) -> Val:
        ad = st.ad
        while ad is not None:
            if scope_name in ad._attrs:  # an attribute named TARGET shadows the target
                return select_attr(st, lookup(st, scope_name), key)
            ad = ad._parent
        target = st.target
        if target is None:
            return UNDEFINED
        entry = target._attrs.get(key)
        if entry is not None:
            lit = entry.lit
            if lit is not _NOLIT:
                return lit  # type: ignore[return-value]
            return eval_entry(st, target, entry)
        return select_attr(st, target, key)

    return f


def _my_select(scope_name: str, key: str) -> Compiled:
    """`MY.x`: the current ad (unless it has an attribute named MY)."""

    def f(st: EvalState) -> Val:
        ad = st.ad
        if ad is None or scope_name in ad._attrs:
            return select_attr(st, lookup(st, scope_name), key)
        entry = ad._attrs.get(key)
        if entry is not None:
            lit = entry.lit
            if lit is not _NOLIT:
                return lit  # type: ignore[return-value]
            return eval_entry(st, ad, entry)
        return select_attr(st, ad, key)

    return f


def is_postfix(node: Node) -> bool:
    """Whether `node` is `x.name` or `x[i]` whose compiling would recurse into `x`."""
    t = type(node)
    if t is Subscript:
        return True
    if t is not AttrRef or node.base is None:  # type: ignore[attr-defined]
        return False
    base = node.base  # type: ignore[attr-defined]
    # `TARGET.x` and `MY.x` have closures of their own, with no recursion.
    return not (
        type(base) is AttrRef
        and base.base is None
        and not base.absolute
        and base.name.lower() in _SCOPES
    )


_SCOPES: Final = frozenset({"target", "other", "my", "self"})


def _postfix_chain(node: Node) -> Compiled:
    """`a.b.c[0].d ...`: the innermost base evaluated, then each selection and subscript
    applied in a loop (a chain of 20,000 must not recurse)."""
    steps: list[tuple[str, Compiled | None]] = []
    n = node
    while is_postfix(n):
        if type(n) is Subscript:
            steps.append(("", compiled(n.index)))
        else:
            steps.append((n.name.lower(), None))  # type: ignore[attr-defined]
        n = n.base  # type: ignore[attr-defined]
    root = compiled(n)
    steps.reverse()
    todo = tuple(steps)
    counted(len(todo) - 1)

    def f(st: EvalState) -> Val:
        v = root(st)
        for key, index in todo:
            v = select_attr(st, v, key) if index is None else subscript(st, v, index(st))
        return v

    return f


def _subscript(node: Subscript) -> Compiled:
    if is_postfix(node.base):
        return _postfix_chain(node)
    base = compiled(node.base)
    index = compiled(node.index)

    def f(st: EvalState) -> Val:
        return subscript(st, base(st), index(st))

    return f


def _call(node: Call) -> Compiled:
    # The function library loads at the first call compiled, not with the package
    # (start-up; see preload_functions). It sits above ClassAd, which splitTime makes.
    from htgrid.classad._functions import FUNCTIONS

    key = node.name.lower()
    builtin = FUNCTIONS.get(key)
    if builtin is None:

        def unknown(st: EvalState) -> Val:
            if key not in FUNCTIONS:
                return ERROR
            # Registered since (classad.register): compiled again, with it.
            object.__setattr__(node, "_fn", None)
            return compiled(node)(st)

        return unknown
    fn = builtin.fn
    args = node.args
    if builtin.lazy:
        counted(tree_size(args))  # compiled when the function evaluates them

        def lazy(st: EvalState) -> Val:
            try:
                return fn(st, *args)
            except (RecursionError, RaisedInPython):
                raise
            except Exception:  # a built-in must never take the evaluator down
                return ERROR

        return lazy
    arg_fns = tuple(compiled(a) for a in args)
    counted(len(args))  # constant arguments too
    if builtin.pure and all(type(a) is Literal for a in args):
        try:
            folded = fn(EvalState(None), *(a.value for a in args))  # type: ignore[attr-defined]
        except RecursionError:
            raise  # the stack was nearly used up when this compiled: nothing to remember
        except Exception:
            folded = ERROR
        if type(folded) in _SCALARS or folded is UNDEFINED or folded is ERROR:

            def constant(st: EvalState) -> Val:
                return folded

            return constant
    if len(arg_fns) == 1:
        (a0,) = arg_fns

        def call1(st: EvalState) -> Val:
            try:
                v = a0(st)
                if type(v) is str and len(v) > _LONG:
                    charge(st, len(v) // _LONG)
                return fn(st, v)
            except (RecursionError, RaisedInPython):
                raise
            except Exception:
                return ERROR

        return call1
    if len(arg_fns) == 2:
        a0, a1 = arg_fns

        def call2(st: EvalState) -> Val:
            try:
                v0 = a0(st)
                v1 = a1(st)
                if type(v0) is str and len(v0) > _LONG:
                    charge(st, len(v0) // _LONG)
                if type(v1) is str and len(v1) > _LONG:
                    charge(st, len(v1) // _LONG)
                return fn(st, v0, v1)
            except (RecursionError, RaisedInPython):
                raise
            except Exception:
                return ERROR

        return call2

    def call(st: EvalState) -> Val:
        try:
            args = [a(st) for a in arg_fns]
            for v in args:
                if type(v) is str and len(v) > _LONG:
                    charge(st, len(v) // _LONG)
            return fn(st, *args)
        except (RecursionError, RaisedInPython):
            raise
        except Exception:
            return ERROR

    return call


def _list(node: ListExpr) -> Compiled:
    items = node.items
    counted(tree_size(items))  # compiled when the list's values are taken

    def f(st: EvalState) -> Val:
        return ListValue(items, st)

    return f


_COMPILERS: Final[dict[type, Callable[[Node], Compiled]]] = {
    Literal: _literal,  # type: ignore[dict-item]
    AttrRef: _attr,  # type: ignore[dict-item]
    Binary: compile_binary,  # type: ignore[dict-item]
    Unary: compile_unary,  # type: ignore[dict-item]
    Paren: compile_paren,  # type: ignore[dict-item]
    Ternary: compile_ternary,  # type: ignore[dict-item]
    Elvis: compile_elvis,  # type: ignore[dict-item]
    Subscript: _subscript,  # type: ignore[dict-item]
    Call: _call,  # type: ignore[dict-item]
    ListExpr: _list,  # type: ignore[dict-item]
}
# (and AdExpr's: ClassAd's, in _classad.py)
# Constants are not counted: they are the commonest nodes, and a tree has fewer of them
# than of the operators, calls and lists above them, which are.
COMPILERS.update(
    (kind, compile_node if kind is Literal else sized(compile_node))
    for kind, compile_node in _COMPILERS.items()
)
