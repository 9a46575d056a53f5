"""The syntax of the ClassAd language as htgrid's own code reads it: expression trees,
their text, and ads read from text.

Beyond classad2's API, for code that looks inside an expression (which attributes it
reaches, which comparisons a constraint makes) or moves expressions between ads without
evaluating them. A tree is made of the frozen node classes below; equality and hashing
are structural (`1`, `1.0` and `true` differ). Trees are shared between ads and between
threads: never change one (they are frozen), build a new one.

- `Literal(value)`: a constant; `value` is a bool, int, float, str, `Value.Undefined`
  or `Value.Error` (function results may also hold times, lists and ads).
- `AttrRef(name, base, absolute)`: `name`, `base.name` (`MY.x`: base is `AttrRef("MY")`)
  or `.name` (absolute).
- `Unary(op, operand)`, `Binary(op, left, right)` (`op` canonical: `=?=`, not `is`),
  `Ternary(cond, then, other)`, `Elvis(left, right)` (`?:`), `Subscript(base, index)`,
  `Paren(inner)`, `Call(name, args)`, `ListExpr(items)`, `AdExpr(attrs)` (name, tree).

A long chain of one operator is a left-deep spine of `Binary` nodes, thousands deep in
generated policies: walk it with `operands` or in a loop, never by recursion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from htgrid.classad import _ast
from htgrid.classad._ad import to_node_value
from htgrid.classad._ast import *  # noqa: F403 - the tree's classes and walkers, public here
from htgrid.classad._ast import ListExpr, Node
from htgrid.classad._classad import ExprTree, to_node
from htgrid.classad._io import iter_ads
from htgrid.classad._unparse import unparse
from htgrid.classad._values import ListValue, Val

if TYPE_CHECKING:
    from htgrid.classad._classad import ClassAd

__all__ = ["evaluated", "expr_of", "iter_ads", "node_of", "to_node", "unparse"]
__all__ += _ast.__all__


def node_of(expr: ExprTree) -> Node:
    """The tree of an ExprTree (shared, not copied)."""
    return expr._node


def expr_of(node: Node, scope: ClassAd | None = None) -> ExprTree:
    """An ExprTree of `node`; with a `scope`, `eval()` without one evaluates there, as for
    an expression taken from that ad."""
    return ExprTree._of(node, scope)


def evaluated(
    expr: ExprTree, scope: ClassAd | None = None, target: ClassAd | None = None
) -> ExprTree:
    """The value of `expr` (`scope` as MY, `target` as TARGET) as a constant expression,
    a list's items evaluated too (`simplify()` leaves a list literal's items as written)."""
    return ExprTree._of(_value_node(expr._evaluate(scope, target)))


def _value_node(value: Val) -> Node:
    if type(value) is ListValue:
        return ListExpr(tuple(_value_node(v) for v in value.values()))
    return to_node_value(value)
