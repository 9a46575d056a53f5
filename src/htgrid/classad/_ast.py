"""The ClassAd syntax tree: frozen, slotted nodes.

Each node may carry its compiled closure in `_fn`, filled on first evaluation (see
`_compile.py`); it takes no part in equality and is never printed.
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
]


@dataclass(frozen=True, slots=True)
class Node:
    """Base of all syntax-tree nodes."""

    _fn: Any = field(default=None, init=False, repr=False, compare=False)


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


@dataclass(frozen=True, slots=True)
class AttrRef(Node):
    """An attribute reference: `name`, `base.name`, or `.name` (absolute)."""

    name: str = ""
    base: Node | None = None
    absolute: bool = False


@dataclass(frozen=True, slots=True)
class Unary(Node):
    """A prefix operator: one of `- + ~ !`."""

    op: str = ""
    operand: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Binary(Node):
    """An infix operator; `op` is its canonical spelling (`=?=`, not `is`)."""

    op: str = ""
    left: Node = None  # type: ignore[assignment]
    right: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Ternary(Node):
    """`cond ? then : else`."""

    cond: Node = None  # type: ignore[assignment]
    then: Node = None  # type: ignore[assignment]
    other: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Elvis(Node):
    """`left ?: right`: left unless it is undefined."""

    left: Node = None  # type: ignore[assignment]
    right: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Subscript(Node):
    """`base[index]`."""

    base: Node = None  # type: ignore[assignment]
    index: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Paren(Node):
    """`( inner )`, kept so the expression prints as written."""

    inner: Node = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function call; `name` keeps the spelling written."""

    name: str = ""
    args: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True)
class ListExpr(Node):
    """`{ e1, e2, ... }`."""

    items: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True)
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
