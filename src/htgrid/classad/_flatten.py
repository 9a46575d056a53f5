"""Partial evaluation (`ClassAd.flatten`), after HTCondor's Operation::_Flatten.

What the ad defines is folded into constants; references it does not define stay as
they are. For `+ * & | ^ && ||`, constants on both sides of a chain are combined, so
`a + b + 2*3` with `a = 1` flattens to `7 + b`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, TypeAlias

from htgrid.classad._ad import AdBase, to_node_value
from htgrid.classad._ast import (
    AdExpr,
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
from htgrid.classad._compile import (
    _NOTFOUND,
    MAX_NESTED_ATTRIBUTES,
    compiled,
    lookup_from,
    subscript,
)
from htgrid.classad._ops import BINARY_OPS, UNARY_OPS, truth
from htgrid.classad._parser import MAX_DEPTH, depth_of
from htgrid.classad._state import Budget, EvalState, begin, overspent
from htgrid.classad._values import ERROR, UNDEFINED, ListValue, Val

if TYPE_CHECKING:
    from htgrid.classad._classad import ClassAd

__all__ = ["flatten", "flatten_value"]

_SPLITTABLE: Final = frozenset({"+", "*", "&", "|", "^", "&&", "||"})

# A flattened piece: (value, None, None) for a constant, (None, tree, None) for a tree, or
# (value, tree, op) for "value op tree", kept apart so a parent of the same op can fold it.
_Piece: TypeAlias = "tuple[Val | None, Node | None, str | None]"


def flatten(node: Node, st: EvalState) -> Node:
    """`node` with everything computable in `st` computed."""
    value, tree, _ = _flat(node, st, split=False)
    if overspent(st):
        return Literal(ERROR)
    if tree is None:
        return _literal(value)
    return tree


def flatten_value(node: Node, st: EvalState) -> tuple[Val, Node | None]:
    """(value, None) when `node` reduces to a value here, else (UNDEFINED, reduced tree).

    A reduced tree nested deeper than the parser reads (a list value folded into a
    deep expression) is not made: `node` is given back as it is.
    """
    value, tree, _ = _flat(node, st, split=False)
    if overspent(st):
        return ERROR, None
    if tree is None:
        return value, None  # type: ignore[return-value]
    if depth_of(tree) > MAX_DEPTH:
        return UNDEFINED, node
    return UNDEFINED, tree


def _literal(v: Val | None) -> Node:
    if type(v) is ListValue or isinstance(v, AdBase):
        return to_node_value(v)
    return Literal(v)  # type: ignore[arg-type]


def _apply(op: str, a: Val, b: Val) -> Val:
    if op == "&&" or op == "||":
        x, y = truth(a), truth(b)
        if op == "&&":
            if x is False:
                return False
            if x is ERROR:
                return ERROR
            if x is True:
                return y
            return False if y is False else (ERROR if y is ERROR else UNDEFINED)
        if x is True:
            return True
        if x is ERROR:
            return ERROR
        if x is False:
            return y
        return True if y is True else (ERROR if y is ERROR else UNDEFINED)
    return BINARY_OPS[op](a, b)


def _flat(node: Node, st: EvalState, split: bool) -> _Piece:
    t = type(node)
    if t is Literal:
        return node.value, None, None  # type: ignore[attr-defined]
    if t is AttrRef:
        return _flat_attr(node, st)  # type: ignore[arg-type]
    if t is Binary:
        return _flat_binary(node, st, split)  # type: ignore[arg-type]
    if t is Paren or t is Unary:
        inner = node.inner if t is Paren else node.operand  # type: ignore[attr-defined]
        v, tree, _ = _flat(inner, st, False)
        if tree is not None:
            return None, (Paren(tree) if t is Paren else Unary(node.op, tree)), None  # type: ignore[attr-defined]
        return (v if t is Paren else UNARY_OPS[node.op](v)), None, None  # type: ignore[arg-type,attr-defined]
    if t is Ternary:
        return _flat_ternary(node, st)  # type: ignore[arg-type]
    if t is Elvis:
        # flattenSpecials leaves ?: alone: both sides are flattened and kept.
        v, tree, _ = _flat(node.left, st, False)  # type: ignore[attr-defined]
        rv, rtree, _ = _flat(node.right, st, False)  # type: ignore[attr-defined]
        if tree is None and rtree is None:
            return (rv if v is UNDEFINED else v), None, None
        return None, Elvis(tree or _literal(v), rtree or _literal(rv)), None
    if t is Subscript:
        return _flat_subscripts(node, st)  # type: ignore[arg-type]
    if t is Call:
        return _flat_call(node, st)  # type: ignore[arg-type]
    if t is ListExpr:
        items = tuple(flatten(i, st) for i in node.items)  # type: ignore[attr-defined]
        return None, ListExpr(items), None
    if t is AdExpr:
        return None, node, None
    return compiled(node)(st), None, None


def _flat_subscripts(node: Subscript, st: EvalState) -> _Piece:
    """`x[i][j] ...`, innermost first, in a loop."""
    chain = [node]
    base = node.base
    while type(base) is Subscript:
        chain.append(base)
        base = base.base
    bv, btree, _ = _flat(base, st, False)
    for sub in reversed(chain):
        iv, itree, _ = _flat(sub.index, st, False)
        if btree is None and itree is None:
            bv = subscript(st, bv, iv)  # type: ignore[arg-type]
        else:
            bv, btree = None, Subscript(btree or _literal(bv), itree or _literal(iv))
    return bv, btree, None


def _flat_attr(node: AttrRef, st: EvalState) -> _Piece:
    if node.base is not None:
        # As FindExpr does, the scope part is evaluated, not flattened.
        base = compiled(node.base)(st)
        if base is UNDEFINED:
            return None, node, None
        if not isinstance(base, AdBase):
            return ERROR, None, None
        return _flat_in(node, st, base, node.name.lower())
    return _flat_in(node, st, st.my if node.absolute else st.ad, node.name.lower())


def _flat_in(node: AttrRef, st: EvalState, start: ClassAd | None, key: str) -> _Piece:
    ad = start
    while ad is not None:
        entry = ad._attrs.get(key)
        if entry is not None:
            if type(entry.node) is AdExpr:
                return None, node, None
            active = begin(st)
            if entry in active:
                return UNDEFINED, None, None
            if len(active) >= MAX_NESTED_ATTRIBUTES:
                return ERROR, None, None
            budget: Budget = st.budget  # type: ignore[assignment]  # `begin` made both
            budget[0] -= 1  # a step, as evaluating it would be
            if budget[0] < 0:
                return ERROR, None, None
            active.add(entry)
            try:
                v, tree, _ = _flat(entry.node, st.at(ad), False)
            finally:
                active.discard(entry)
            # An attribute that does not reduce to a value is not inlined.
            return (None, node, None) if tree is not None else (v, None, None)
        ad = ad._parent
    v = lookup_from(st, start, key)
    if v is _NOTFOUND or v is UNDEFINED or isinstance(v, AdBase):
        return None, node, None
    return v, None, None


def _flat_binary(node: Binary, st: EvalState, split: bool) -> _Piece:
    """A left-deep spine of operators, flattened from its innermost left operand out in
    a loop (a generated chain may be thousands long)."""
    spine = [node]
    left = node.left
    while type(left) is Binary:
        spine.append(left)
        left = left.left
    piece = _flat(left, st, spine[-1].op in _SPLITTABLE)
    for i in range(len(spine) - 1, -1, -1):
        outer = split if i == 0 else spine[i - 1].op in _SPLITTABLE
        piece = _flat_one(spine[i], piece, st, outer)
    return piece


def _flat_one(node: Binary, left: _Piece, st: EvalState, split: bool) -> _Piece:
    """`node` flattened, its left operand already flattened to `left`."""
    op = node.op
    v1, t1, op1 = left
    if op not in _SPLITTABLE:
        v2, t2, _ = _flat(node.right, st, False)
        if t1 is None and t2 is None:
            return BINARY_OPS[op](v1, v2), None, None  # type: ignore[arg-type]
        return None, Binary(op, t1 or _literal(v1), t2 or _literal(v2)), None
    v2, t2, op2 = _flat(node.right, st, True)
    val, tree, new_op = _combine(op, v1, t1, op1, v2, t2, op2)
    if not split and new_op is not None and tree is not None:
        return None, Binary(new_op, _literal(val), tree), None
    return val, tree, new_op


def _combine(
    op: str,
    v1: Val | None,
    t1: Node | None,
    op1: str | None,
    v2: Val | None,
    t2: Node | None,
    op2: str | None,
) -> _Piece:
    if (t1 is None) != (t2 is None) and op in ("&&", "||"):
        known: Val = v1 if t1 is None else v2  # type: ignore[assignment]
        result = _apply(op, known, UNDEFINED) if t1 is None else _apply(op, UNDEFINED, known)
        if type(result) is bool:
            return result, None, None
        if op == "&&" and t1 is None and v1 is True and op2 is None:
            return None, t2, None
        if op == "&&" and t2 is None and v2 is True and op1 is None:
            return None, t1, None
    if t1 is None and t2 is None:
        return _apply(op, v1, v2), None, None  # type: ignore[arg-type]
    if t1 is None and op2 is None:
        return v1, t2, op
    if t2 is None and op1 is None:
        return v2, t1, op
    if op1 is None and op2 is None:
        return None, Binary(op, t1, t2), None  # type: ignore[arg-type]
    if op != op1 and op != op2:
        left = Binary(op1, _literal(v1), t1) if op1 is not None else (t1 or _literal(v1))  # type: ignore[arg-type]
        right = Binary(op2, _literal(v2), t2) if op2 is not None else (t2 or _literal(v2))  # type: ignore[arg-type]
        return None, Binary(op, left, right), None
    if op == op1 and op == op2:
        return _apply(op, v1, v2), Binary(op, t1, t2), op  # type: ignore[arg-type]
    if op == op1:
        if t2 is None:
            return _apply(op, v1, v2), t1, op  # type: ignore[arg-type]
        return v1, Binary(op, t1, t2), op  # type: ignore[arg-type]
    if t1 is None:
        return _apply(op, v1, v2), t2, op  # type: ignore[arg-type]
    return v2, Binary(op, t1, t2), op  # type: ignore[arg-type]


def _flat_ternary(node: Ternary, st: EvalState) -> _Piece:
    cv, ctree, _ = _flat(node.cond, st, False)
    if ctree is None and cv is not UNDEFINED:
        c = truth(cv)  # type: ignore[arg-type]
        if c is True:
            return _flat(node.then, st, False)
        if c is False:
            return _flat(node.other, st, False)
        return ERROR, None, None
    then = flatten(node.then, st)
    other = flatten(node.other, st)
    return None, Ternary(ctree or _literal(cv), then, other), None


def _flat_call(node: Call, st: EvalState) -> _Piece:
    from htgrid.classad._functions import FUNCTIONS  # at first use (start-up), as in _compile

    pieces = [_flat(a, st, False) for a in node.args]
    builtin = FUNCTIONS.get(node.name.lower())
    if builtin is None or not builtin.pure or any(p[1] is not None for p in pieces):
        args = tuple(p[1] or _literal(p[0]) for p in pieces)
        if builtin is None or any(p[1] is not None for p in pieces):
            return None, Call(node.name, args), None
    return compiled(Call(node.name, tuple(_literal(p[0]) for p in pieces)))(st), None, None
