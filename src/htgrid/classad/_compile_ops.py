"""Compiling the operators: binary ones (with closures of their own for the hot
comparisons of matchmaking), `&&` / `||` and their chains, unary ones, `?:` and `?:`'s
short form. Their operands compile through `compiled`, whichever node they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from htgrid.classad._ast import Binary, Elvis, Literal, Paren, Ternary, Unary
from htgrid.classad._compile_cost import counted
from htgrid.classad._ops import BINARY_OPS, UNARY_OPS, fold, truth
from htgrid.classad._parser import PRECEDENCE
from htgrid.classad._state import Compiled, EvalState, compiled
from htgrid.classad._values import ERROR, UNDEFINED, Val

__all__ = [
    "compile_binary",
    "compile_elvis",
    "compile_paren",
    "compile_ternary",
    "compile_unary",
]


def compile_binary(node: Binary) -> Compiled:
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
    counted(len(spine) - 1)  # the spine's nodes, `node` itself counted by `compiled`
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


def compile_unary(node: Unary) -> Compiled:
    fn = UNARY_OPS[node.op]
    inner = compiled(node.operand)

    def f(st: EvalState) -> Val:
        return fn(inner(st))

    return f


def compile_paren(node: Paren) -> Compiled:
    return compiled(node.inner)


def compile_ternary(node: Ternary) -> Compiled:
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


def compile_elvis(node: Elvis) -> Compiled:
    left = compiled(node.left)
    right = compiled(node.right)

    def f(st: EvalState) -> Val:
        a = left(st)
        return right(st) if a is UNDEFINED else a

    return f
