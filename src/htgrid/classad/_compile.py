"""Compiling syntax trees into Python closures (the name lookup is in `_lookup.py`).

Each node compiles once into `f(state) -> value`; the closure is kept on the node. The
hot shapes of matchmaking (an attribute compared with a constant, `&&` chains) get
closures of their own so a Requirements expression costs a handful of Python calls.

An expression of more than `_SMALL` nodes pays its size in steps of the evaluation's
budget (`MAX_EVALUATION_STEPS`) each time it is evaluated, so that a large expression
reached again and again is bounded as attribute references are; the nodes of a
sub-expression that pays for itself are not counted again in the one around it. Small
expressions, the usual kind, cost nothing more.
"""

from __future__ import annotations

import threading
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
    children,
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
from htgrid.classad._ops import BINARY_OPS, UNARY_OPS, fold, truth
from htgrid.classad._parser import PRECEDENCE
from htgrid.classad._state import COMPILERS, Compiled, EvalState, budget_of, charge, compiled
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


#: Expressions of more nodes than this pay for their size when evaluated.
_SMALL: Final = 32

#: A built-in function given a string longer than this pays a step per this many
#: characters (its work grows with them, and the string may be an ad's, read for free).
_LONG: Final = 1024


_threads = threading.local()


def _count() -> list[int]:
    """This thread's count of the nodes compiled so far (one item), for the sizes of the
    trees being compiled: threads may compile at the same time."""
    try:
        return _threads.count  # type: ignore[no-any-return]
    except AttributeError:
        count = _threads.count = [0]
        return count


def _sized(compile_node: Callable[[Node], Compiled]) -> Callable[[Node], Compiled]:
    """`compile_node`, counting the nodes it compiles: the closure of a tree of more than
    `_SMALL` of them pays its size each time it is evaluated."""

    def compile_sized(node: Node) -> Compiled:
        count = _count()
        before = count[0]
        fn = compile_node(node)
        size = count[0] - before + 1
        if size > _SMALL:
            fn = _charged(fn, size)
            size = 1
        count[0] = before + size
        return fn

    return compile_sized


def _counted(nodes: int) -> None:
    """Count work of the node being compiled that is not in a sub-expression compiled now."""
    _count()[0] += nodes


def _tree_size(nodes: tuple[Node, ...]) -> int:
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


def _binary(node: Binary) -> Compiled:
    left = node.left
    if type(left) is Binary and PRECEDENCE.get(left.op) == PRECEDENCE.get(node.op):
        return _chain(node)
    op = node.op
    lf = compiled(node.left)
    rf = compiled(node.right)
    if op == "&&":
        return _and(lf, rf)
    if op == "||":
        return _or(lf, rf)
    fn = BINARY_OPS[op]
    right = node.right
    if type(right) is Literal:
        const = right.value
        tc = type(const)
        if op in _NUMERIC_CMP and (tc is int or tc is float):
            cmp = _NUMERIC_CMP[op]

            def num_cmp(st: EvalState) -> Val:
                a = lf(st)
                ta = type(a)
                if ta is int or ta is float:
                    return cmp(a, const)  # type: ignore[arg-type]
                return fn(a, const)

            return num_cmp
        if (op == "==" or op == "!=") and tc is str:
            low = fold(const)  # type: ignore[arg-type]
            want = op == "=="

            def str_eq(st: EvalState) -> Val:
                a = lf(st)
                if type(a) is str:
                    return (fold(a) == low) is want
                return fn(a, const)

            return str_eq

    def binary(st: EvalState) -> Val:
        return fn(lf(st), rf(st))

    return binary


def _lt(a: float, b: float) -> bool:
    return a < b


def _le(a: float, b: float) -> bool:
    return a <= b


def _gt(a: float, b: float) -> bool:
    return a > b


def _ge(a: float, b: float) -> bool:
    return a >= b


def _eq(a: float, b: float) -> bool:
    return a == b


def _ne(a: float, b: float) -> bool:
    return a != b


_NUMERIC_CMP: Final[dict[str, Callable[[float, float], bool]]] = {
    "<": _lt,
    "<=": _le,
    ">": _gt,
    ">=": _ge,
    "==": _eq,
    "!=": _ne,
}


def _and(lf: Compiled, rf: Compiled) -> Compiled:
    def f(st: EvalState) -> Val:
        a = lf(st)
        if a is True:
            b = rf(st)
            return b if type(b) is bool else truth(b)
        if a is False:
            return False
        a = truth(a)
        if a is ERROR:
            return ERROR
        if a is False:
            return False
        b = truth(rf(st))
        if a is True:
            return b
        # a is UNDEFINED: only a false right side decides.
        return False if b is False else (ERROR if b is ERROR else UNDEFINED)

    return f


def _or(lf: Compiled, rf: Compiled) -> Compiled:
    def f(st: EvalState) -> Val:
        a = lf(st)
        if a is False:
            b = rf(st)
            return b if type(b) is bool else truth(b)
        if a is True:
            return True
        a = truth(a)
        if a is ERROR:
            return ERROR
        if a is True:
            return True
        b = truth(rf(st))
        if a is False:
            return b
        return True if b is True else (ERROR if b is ERROR else UNDEFINED)

    return f


def _chain(node: Binary) -> Compiled:
    """A left-deep spine of operators of one precedence (`a && b && c ...`, `1 + 2 - 3
    ...`), evaluated left to right in a loop: no recursion, however long the chain.

    Each step does what the nested form does: `&&` and `||` (each alone at its level)
    keep their short-circuit and their undefined/error rules, the others apply the
    strict operator.
    """
    level = PRECEDENCE.get(node.op)
    spine = [node]
    left = node.left
    while type(left) is Binary and PRECEDENCE.get(left.op) == level:
        spine.append(left)
        left = left.left
    first = compiled(left)
    steps = [(b.op, compiled(b.right)) for b in reversed(spine)]
    _counted(len(spine) - 1)  # the spine's nodes, `node` itself counted by `compiled`
    if node.op == "&&" or node.op == "||":
        return _logic_chain(first, tuple(rf for _, rf in steps), node.op)
    pairs = tuple((BINARY_OPS[op], rf) for op, rf in steps)

    def strict(st: EvalState) -> Val:
        acc = first(st)
        for fn, rf in pairs:
            acc = fn(acc, rf(st))
        return acc

    return strict


def _logic_chain(first: Compiled, rights: tuple[Compiled, ...], op: str) -> Compiled:
    """`a && b && c ...` or `a || b || c ...`, as the nested `_and` / `_or` give it."""
    absorbing = op == "||"  # what decides the chain: false for &&, true for ||
    neutral = not absorbing

    def f(st: EvalState) -> Val:
        a = first(st)
        for rf in rights:
            if a is neutral:
                a = rf(st)
                if type(a) is not bool:
                    a = truth(a)
                continue
            if a is absorbing:
                return a  # the rest is not evaluated
            a = truth(a)
            if a is ERROR or a is absorbing:
                return a
            b = truth(rf(st))
            if a is neutral:
                a = b
            else:  # undefined: only the deciding value on the right decides
                a = absorbing if b is absorbing else (ERROR if b is ERROR else UNDEFINED)
        return a

    return f


def _unary(node: Unary) -> Compiled:
    fn = UNARY_OPS[node.op]
    inner = compiled(node.operand)

    def f(st: EvalState) -> Val:
        return fn(inner(st))

    return f


def _paren(node: Paren) -> Compiled:
    return compiled(node.inner)


def _ternary(node: Ternary) -> Compiled:
    cond = compiled(node.cond)
    then = compiled(node.then)
    other = compiled(node.other)

    def f(st: EvalState) -> Val:
        c = cond(st)
        if c is True:
            return then(st)
        if c is False:
            return other(st)
        c = truth(c)
        if c is True:
            return then(st)
        if c is False:
            return other(st)
        return c

    return f


def _elvis(node: Elvis) -> Compiled:
    left = compiled(node.left)
    right = compiled(node.right)

    def f(st: EvalState) -> Val:
        a = left(st)
        return right(st) if a is UNDEFINED else a

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
    _counted(len(todo) - 1)

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
        _counted(_tree_size(args))  # compiled when the function evaluates them

        def lazy(st: EvalState) -> Val:
            try:
                return fn(st, *args)
            except (RecursionError, RaisedInPython):
                raise
            except Exception:  # a built-in must never take the evaluator down
                return ERROR

        return lazy
    arg_fns = tuple(compiled(a) for a in args)
    _counted(len(args))  # constant arguments too
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
    _counted(_tree_size(items))  # compiled when the list's values are taken

    def f(st: EvalState) -> Val:
        return ListValue(items, st)

    return f


_COMPILERS: Final[dict[type, Callable[[Node], Compiled]]] = {
    Literal: _literal,  # type: ignore[dict-item]
    AttrRef: _attr,  # type: ignore[dict-item]
    Binary: _binary,  # type: ignore[dict-item]
    Unary: _unary,  # type: ignore[dict-item]
    Paren: _paren,  # type: ignore[dict-item]
    Ternary: _ternary,  # type: ignore[dict-item]
    Elvis: _elvis,  # type: ignore[dict-item]
    Subscript: _subscript,  # type: ignore[dict-item]
    Call: _call,  # type: ignore[dict-item]
    ListExpr: _list,  # type: ignore[dict-item]
}
# (and AdExpr's: ClassAd's, in _classad.py)
# Constants are not counted: they are the commonest nodes, and a tree has fewer of them
# than of the operators, calls and lists above them, which are.
COMPILERS.update(
    (kind, compile_node if kind is Literal else _sized(compile_node))
    for kind, compile_node in _COMPILERS.items()
)
