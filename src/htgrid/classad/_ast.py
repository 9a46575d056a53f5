"""The ClassAd syntax tree: frozen, slotted nodes.

Each node may carry its compiled closure in `_fn`, filled on first evaluation (see
`_compile.py`); it takes no part in equality and is never printed.

A chain of binary operators (`a && b && c ...`, thousands long in generated policies) is
a left-deep spine of `Binary` nodes, and `a.b.c ...` a spine of `AttrRef` bases: every
walk over a tree follows those spines in a loop, never by recursion. Everything else
nests only as deep as the parser allows (see `_parser.py`), so recursing there is safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from htgrid.classad._values import Val

__all__ = [
    "AdExpr",
    "AttrRef",
    "Binary",
    "Call",
    "Elvis",
    "ListExpr",
    "Literal",
    "Node",
    "Paren",
    "Subscript",
    "Ternary",
    "Unary",
    "children",
    "operands",
]


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """Base of all syntax-tree nodes.

    Equality and hashing are structural (the spelling of names included); chains are
    followed in a loop, so that any tree the parser makes can be compared.
    """

    _fn: Any = field(default=None, init=False, repr=False, compare=False)

    # __eq__, __ne__ and __hash__ are set below, once `same_tree` and `tree_hash` exist
    # (assigned, not wrapped: they are hot in the negotiator's grouping).


@dataclass(frozen=True, slots=True, eq=False)
class Literal(Node):
    """A constant: undefined, error, bool, int, float, str, AbsTime or RelTime.

    Function results may also hold a list or an ad here. Equality is by type and value,
    so `1`, `1.0` and `true` are three different literals.
    """

    value: Val = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if type(other) is not Literal:
            return NotImplemented
        a, b = self.value, other.value
        if type(a) is not type(b):
            return False
        if type(a) is float and a != a and b != b:
            return True
        return a is b or bool(a == b)

    def __ne__(self, other: object) -> bool:
        same = self.__eq__(other)
        return same if same is NotImplemented else not same

    def __hash__(self) -> int:
        v = self.value
        try:
            return hash((type(v), v))
        except TypeError:
            return id(v)


@dataclass(frozen=True, slots=True, eq=False)
class AttrRef(Node):
    """An attribute reference: `name`, `base.name`, or `.name` (absolute)."""

    name: str = ""
    base: Node | None = None
    absolute: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class Unary(Node):
    """A prefix operator: one of `- + ~ !`."""

    op: str = ""
    operand: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, eq=False)
class Binary(Node):
    """An infix operator; `op` is its canonical spelling (`=?=`, not `is`)."""

    op: str = ""
    left: Node = None  # type: ignore[assignment]
    right: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, eq=False)
class Ternary(Node):
    """`cond ? then : else`."""

    cond: Node = None  # type: ignore[assignment]
    then: Node = None  # type: ignore[assignment]
    other: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, eq=False)
class Elvis(Node):
    """`left ?: right`: left unless it is undefined."""

    left: Node = None  # type: ignore[assignment]
    right: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, eq=False)
class Subscript(Node):
    """`base[index]`."""

    base: Node = None  # type: ignore[assignment]
    index: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, eq=False)
class Paren(Node):
    """`( inner )`, kept so the expression prints as written."""

    inner: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, eq=False)
class Call(Node):
    """A function call; `name` keeps the spelling written."""

    name: str = ""
    args: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class ListExpr(Node):
    """`{ e1, e2, ... }`."""

    items: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class AdExpr(Node):
    """`[ n1 = e1; n2 = e2 ]`: a nested record, in the order written (duplicates resolved)."""

    attrs: tuple[tuple[str, Node], ...] = ()


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of a node, in source order."""
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
    if t is AttrRef:
        return () if node.base is None else (node.base,)  # type: ignore[attr-defined]
    if t is Call:
        return node.args  # type: ignore[attr-defined,no-any-return]
    if t is ListExpr:
        return node.items  # type: ignore[attr-defined,no-any-return]
    if t is AdExpr:
        return tuple(expr for _, expr in node.attrs)  # type: ignore[attr-defined]
    return ()


def same_tree(x: Node, y: object) -> bool:
    """Whether two trees are equal node for node (literals by type and value).

    Walked with a stack of the pairs still to compare, never by recursion.
    """
    if not isinstance(y, Node):
        return NotImplemented  # type: ignore[no-any-return]
    todo: list[Node] = []
    push = todo.append
    while True:
        if x is not y:
            t = type(x)
            if t is not type(y):
                return False
            if t is Binary:
                if x.op != y.op:  # type: ignore[attr-defined]
                    return False
                push(x.right)  # type: ignore[attr-defined]
                push(y.right)  # type: ignore[attr-defined]
                x, y = x.left, y.left  # type: ignore[attr-defined]
                continue
            if t is Paren:
                x, y = x.inner, y.inner  # type: ignore[attr-defined]
                continue
            if t is AttrRef:
                a: AttrRef = x  # type: ignore[assignment]
                b: AttrRef = y  # type: ignore[assignment]
                if a.name != b.name or a.absolute != b.absolute:
                    return False
                if a.base is not None or b.base is not None:
                    if a.base is None or b.base is None:
                        return False
                    x, y = a.base, b.base
                    continue
            elif t is Literal:
                if x != y:
                    return False
            elif t is Subscript:
                push(x.index)  # type: ignore[attr-defined]
                push(y.index)  # type: ignore[attr-defined]
                x, y = x.base, y.base  # type: ignore[attr-defined]
                continue
            elif t is Unary:
                if x.op != y.op:  # type: ignore[attr-defined]
                    return False
                x, y = x.operand, y.operand  # type: ignore[attr-defined]
                continue
            else:
                if _scalars(x) != _scalars(y):
                    return False
                xs, ys = children(x), children(y)
                if len(xs) != len(ys):
                    return False
                for a_child, b_child in zip(xs, ys, strict=True):
                    push(a_child)
                    push(b_child)
        if not todo:
            return True
        y = todo.pop()
        x = todo.pop()


def _scalars(node: Node) -> object:
    """What a node that is no chain compares besides its sub-trees."""
    t = type(node)
    if t is Call:
        return (t, node.name)  # type: ignore[attr-defined]
    if t is AdExpr:
        return (t, tuple(name for name, _ in node.attrs))  # type: ignore[attr-defined]
    return t


def tree_hash(node: Node) -> int:
    """A hash equal for equal trees (`same_tree`); a chain is hashed in a loop."""
    t = type(node)
    # The common shapes, without the loop's list: equal trees take the same path.
    if t is Binary:
        if type(node.left) is not Binary:  # type: ignore[attr-defined]
            return hash((node.op, node.left, node.right))  # type: ignore[attr-defined]
    elif t is AttrRef:
        base = node.base  # type: ignore[attr-defined]
        if base is None or (type(base) is AttrRef and base.base is None):
            return hash((node.name, node.absolute, base))  # type: ignore[attr-defined]
    elif t is Paren:
        return hash((t, node.inner))  # type: ignore[attr-defined]
    elif t is not Subscript and t is not Unary:
        return hash((t, _fields(node)))
    parts: list[object] = []
    add = parts.append
    n: Node | None = node
    while n is not None:
        t = type(n)
        add(t)
        if t is Binary:
            add(n.op)  # type: ignore[attr-defined]
            add(hash(n.right))  # type: ignore[attr-defined]
            n = n.left  # type: ignore[attr-defined]
        elif t is AttrRef:
            add(n.name)  # type: ignore[attr-defined]
            add(n.absolute)  # type: ignore[attr-defined]
            n = n.base  # type: ignore[attr-defined]
        elif t is Paren:
            n = n.inner  # type: ignore[attr-defined]
        elif t is Unary:
            add(n.op)  # type: ignore[attr-defined]
            n = n.operand  # type: ignore[attr-defined]
        elif t is Subscript:
            add(hash(n.index))  # type: ignore[attr-defined]
            n = n.base  # type: ignore[attr-defined]
        else:
            add(hash(n) if t is Literal else hash(_fields(n)))
            n = None
    return hash(tuple(parts))


def _different(x: Node, y: object) -> bool:
    if not isinstance(y, Node):
        return NotImplemented  # type: ignore[no-any-return]
    return not same_tree(x, y)


Node.__eq__ = same_tree  # type: ignore[method-assign,assignment]
Node.__ne__ = _different  # type: ignore[method-assign,assignment]
Node.__hash__ = tree_hash  # type: ignore[method-assign,assignment]


def _fields(node: Node) -> tuple[object, ...]:
    """The fields of a node that is no chain, as equality compares them."""
    t = type(node)
    if t is Call:
        return (node.name, node.args)  # type: ignore[attr-defined]
    if t is ListExpr:
        return node.items  # type: ignore[attr-defined,no-any-return]
    if t is AdExpr:
        return node.attrs  # type: ignore[attr-defined,no-any-return]
    if t is Ternary:
        return (node.cond, node.then, node.other)  # type: ignore[attr-defined]
    if t is Elvis:
        return (node.left, node.right)  # type: ignore[attr-defined]
    if t is Literal:
        return (node,)
    return ()


def operands(node: Node, op: str) -> list[Node]:
    """The operands of a chain of `op` (`a && (b && c)` gives a, b, c), in source order,
    parentheses around the chain and around each operand removed."""
    out: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        while type(n) is Paren:
            n = n.inner
        if type(n) is Binary and n.op == op:
            stack.append(n.right)
            stack.append(n.left)
        else:
            out.append(n)
    return out
