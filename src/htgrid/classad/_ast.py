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

    Equality and hashing are structural (the spelling of names included), computed
    without recursion so that any tree the parser makes can be compared.
    """

    _fn: Any = field(default=None, init=False, repr=False, compare=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return same_tree(self, other)

    def __hash__(self) -> int:
        return tree_hash(self)


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


def _parts(node: Node) -> tuple[object, tuple[Node, ...]]:
    """A node's own fields (what equality compares besides the sub-trees), and its
    sub-trees."""
    t = type(node)
    if t is Binary:
        return (t, node.op), (node.left, node.right)  # type: ignore[attr-defined]
    if t is AttrRef:
        a: AttrRef = node  # type: ignore[assignment]
        return (t, a.name, a.absolute), (() if a.base is None else (a.base,))
    if t is Unary:
        return (t, node.op), (node.operand,)  # type: ignore[attr-defined]
    if t is Call:
        return (t, node.name), node.args  # type: ignore[attr-defined]
    if t is AdExpr:
        attrs: tuple[tuple[str, Node], ...] = node.attrs  # type: ignore[attr-defined]
        return (t, tuple(name for name, _ in attrs)), tuple(expr for _, expr in attrs)
    return t, children(node)


def same_tree(a: Node, b: Node) -> bool:
    """Whether two trees are equal node for node (literals by type and value)."""
    stack = [(a, b)]
    pop, extend = stack.pop, stack.extend
    while stack:
        x, y = pop()
        if x is y:
            continue
        tx = type(x)
        if tx is not type(y):
            return False
        if tx is Literal:
            if x != y:
                return False
            continue
        kx, cx = _parts(x)
        ky, cy = _parts(y)
        if kx != ky or len(cx) != len(cy):
            return False
        extend(zip(cx, cy, strict=True))
    return True


def tree_hash(node: Node) -> int:
    """A hash equal for equal trees (`same_tree`)."""
    out: list[object] = []
    stack = [node]
    pop, extend, add = stack.pop, stack.extend, out.append
    while stack:
        n = pop()
        if type(n) is Literal:
            add(hash(n))
            continue
        key, kids = _parts(n)
        add(key)
        add(len(kids))
        extend(kids)
    return hash(tuple(out))


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
