"""What the version-1 `classad` module's ExprTree adds to classad2's: Python operators that
build expressions (`classad.Attribute("Memory") >= 1024`, `e.and_(f)`), `sameAs`, and
int(), float() and indexing, which evaluate.

An expression built here is a `BuiltExpr`: its truth is its value, as in version 1
(undefined is false, error raises ClassAdEvaluationError). Operands are put in
parentheses where the printed text would otherwise mean something else (version 1
printed `(a + b) * 2` as `a + b * 2`), and a result nested deeper than the parser
reads is refused (ClassAdValueError).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from htgrid.classad._ast import Binary, ListExpr, Node, Paren, Subscript, Ternary
from htgrid.classad._parser import PRECEDENCE, check_depth
from htgrid.classad._values import Value
from htgrid.errors import ClassAdEvaluationError, ClassAdValueError

if TYPE_CHECKING:
    from htgrid.classad._classad import BuiltExpr, ClassAd

__all__ = ["ExprOperators", "combine", "truth_of"]


def combine(op: str, left: Node, right: Node) -> Node:
    """`left op right`, each side in parentheses where its own operator binds looser."""
    level = PRECEDENCE[op]
    if _looser(left, level, right_side=False):
        left = Paren(left)
    if _looser(right, level, right_side=True):
        right = Paren(right)
    return check_depth(Binary(op, left, right))


def _looser(node: Node, level: int, *, right_side: bool) -> bool:
    t = type(node)
    if t is Ternary:
        return True
    if t is Binary:
        mine = PRECEDENCE.get(node.op, 0)  # type: ignore[attr-defined]
        # Binary operators chain to the left: an equal one on the right needs them too.
        return mine < level or (right_side and mine == level)
    return False


def _binary(op: str) -> Callable[[ExprOperators, object], BuiltExpr]:
    def method(self: ExprOperators, other: object) -> BuiltExpr:
        return self._built(combine(op, self._node, self._operand(other)))

    method.__name__ = f"({op})"
    return method


def _reflected(op: str) -> Callable[[ExprOperators, object], BuiltExpr]:
    def method(self: ExprOperators, other: object) -> BuiltExpr:
        return self._built(combine(op, self._operand(other), self._node))

    method.__name__ = f"(reflected {op})"
    return method


class ExprOperators:
    """The version-1 operators of ExprTree (classad2 has none of them).

    ExprTree, the one class built on this, gives what they build with: `_built` (a new
    BuiltExpr), `_operand` (a Python value as a tree) and `_python` (a tree as Python
    reads it from an ad).
    """

    __slots__ = ()

    if TYPE_CHECKING:
        _node: Node
        _scope: ClassAd | None

        def eval(self, scope: ClassAd | None = None, target: ClassAd | None = None) -> Any: ...

        @staticmethod
        def _built(node: Node) -> BuiltExpr: ...

        @staticmethod
        def _operand(value: object) -> Node: ...

        @staticmethod
        def _python(node: Node, parent: ClassAd | None) -> Any: ...

    __add__ = _binary("+")
    __radd__ = _reflected("+")
    __sub__ = _binary("-")
    __rsub__ = _reflected("-")
    __mul__ = _binary("*")
    __rmul__ = _reflected("*")
    __truediv__ = _binary("/")
    __rtruediv__ = _reflected("/")
    __mod__ = _binary("%")
    __rmod__ = _reflected("%")
    __lshift__ = _binary("<<")
    __rlshift__ = _reflected("<<")
    __rshift__ = _binary(">>")
    __rrshift__ = _reflected(">>")
    __and__ = _binary("&")
    __rand__ = _reflected("&")
    __or__ = _binary("|")
    __ror__ = _reflected("|")
    __xor__ = _binary("^")
    __rxor__ = _reflected("^")
    __lt__ = _binary("<")
    __le__ = _binary("<=")
    __gt__ = _binary(">")
    __ge__ = _binary(">=")
    # Python's `and`/`or` cannot be overloaded: these build `&&` and `||`.
    and_ = _binary("&&")
    or_ = _binary("||")
    is_ = _binary("=?=")
    isnt_ = _binary("=!=")

    def sameAs(self, expr: object) -> bool:
        """Whether `expr` is the same expression, node for node (parentheses count)."""
        if not isinstance(expr, ExprOperators):  # an ExprTree
            raise TypeError("sameAs() takes an ExprTree")
        return self._node == expr._node

    def _get(self, index: object) -> BuiltExpr:
        """The expression `self[index]`, unevaluated."""
        return self._built(check_depth(Subscript(self._node, self._operand(index))))

    def __getitem__(self, index: Any) -> Any:
        """An item of the list this is (or evaluates to), or a character of its string."""
        node = self._node
        if type(node) is ListExpr:
            return self._python(node.items[index], self._scope)
        value = self.eval()
        if isinstance(value, str | list):
            return value[index]
        raise ClassAdValueError("ClassAd expression is unsubscriptable.")

    def __int__(self) -> int:
        return int(_number(self.eval(), int))

    def __float__(self) -> float:
        return float(_number(self.eval(), float))


def _number(value: object, kind: type[int] | type[float]) -> int | float:
    """An evaluated value as int() or float() gives it in version 1."""
    if isinstance(value, Value):
        raise ClassAdValueError("Unable to convert expression to numeric type.")
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, float):
        if kind is int and not math.isfinite(value):
            raise ClassAdValueError("Unable to convert expression to numeric type.")
        return int(value) if kind is int else value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            raise ClassAdValueError(f"Unable to convert string to {kind.__name__}.") from None
    raise ClassAdValueError("Unable to convert expression to numeric type.")


def truth_of(value: object) -> bool:
    """An evaluated value as a condition, as version 1's bool() of an expression."""
    if value is Value.Error:
        raise ClassAdEvaluationError("Unable to evaluate expression.")
    if value is Value.Undefined:
        return False
    return bool(value)
