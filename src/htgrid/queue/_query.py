"""Constraints: which parts SQL can answer from indexed columns, and the full match.

A job matches a constraint when it evaluates to true (or a non-zero number) in the job
ad. The top-level `&&` conjuncts that compare `JobStatus`, `ClusterId`, `ProcId` or
`Owner` with a literal become SQL conditions on the indexed columns; a job can only match
when each conjunct is true, so those rows are the only candidates. The whole constraint
is then evaluated in Python on each candidate, so the translation only has to be sound,
never complete: anything it does not recognise simply stays in Python. When every
conjunct is translated the SQL says exactly what the constraint does (`exact`), and
counts can be taken without reading an ad.

It relies on what the store guarantees: those four attributes always hold an int (a
string for Owner) equal to their column. ClassAd `==` on strings ignores ASCII case, as
SQLite's NOCASE does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.syntax import AttrRef, Binary, Literal, Node, Paren, node_of, operands
from htgrid.queue._policy import truth

__all__ = ["Filter", "compile_constraint"]

_COLUMNS: Final = {"jobstatus": "status", "clusterid": "cluster", "procid": "proc"}
_STRING_COLUMNS: Final = {"owner": "owner"}
_NUMERIC_OPS: Final = {"==": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_IDENTITY_OPS: Final = {"=?=": "=", "=!=": "<>"}
_MIRROR: Final = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True, slots=True)
class Filter:
    """A compiled constraint: SQL conditions on candidates, then the full expression."""

    expr: ExprTree | None  # None: every candidate matches (the constraint is `true`)
    where: tuple[str, ...]
    params: tuple[object, ...]
    exact: bool = False  # the SQL conditions alone select exactly the matching jobs

    def matches(self, ad: ClassAd) -> bool:
        """Whether the job ad satisfies the whole constraint."""
        return self.expr is None or truth(self.expr.eval(scope=ad))

    def sql(self) -> str:
        """The WHERE clause (without the keyword), or `1` when SQL cannot narrow it."""
        return " AND ".join(self.where) if self.where else "1"


def compile_constraint(constraint: str | ExprTree | None) -> Filter:
    """Parse `constraint` (ClassAdSyntaxError when malformed) and extract SQL conditions."""
    if constraint is None:
        return Filter(None, (), (), exact=True)
    expr = constraint if isinstance(constraint, ExprTree) else ExprTree(constraint)
    node = _strip(node_of(expr))
    if type(node) is Literal and node.value is True:
        return Filter(None, (), (), exact=True)
    where: list[str] = []
    params: list[object] = []
    exact = True
    for conjunct in operands(node, "&&"):
        exact = _translate(conjunct, where, params) and exact
    return Filter(expr, tuple(where), tuple(params), exact)


def _strip(node: Node) -> Node:
    while type(node) is Paren:
        node = node.inner
    return node


def _attr_name(node: Node) -> str | None:
    node = _strip(node)
    if type(node) is not AttrRef or node.absolute:
        return None
    base = node.base
    if base is None or (type(base) is AttrRef and base.base is None and base.name.lower() == "my"):
        return node.name.lower()
    return None


def _comparison(node: Node) -> tuple[str, str, object] | None:
    """`(attribute, op, literal value)` for `attr op literal` or `literal op attr`."""
    if type(node) is not Binary:
        return None
    left, right = _strip(node.left), _strip(node.right)
    name = _attr_name(left)
    if name is not None and type(right) is Literal:
        return name, node.op, right.value
    name = _attr_name(right)
    if name is not None and type(left) is Literal:
        return name, _MIRROR.get(node.op, node.op), left.value
    return None


def _translate(node: Node, where: list[str], params: list[object]) -> bool:
    """Add the SQL of one conjunct, if it has one; whether it did."""
    node = _strip(node)
    if type(node) is Binary and node.op == "||":
        return _translate_in(node, where, params)
    found = _comparison(node)
    if found is None:
        return False
    before = len(where)
    name, op, value = found
    t = type(value)
    if name in _COLUMNS:
        column = _COLUMNS[name]
        if op in _NUMERIC_OPS and (t is int or t is float):
            where.append(f"{column} {_NUMERIC_OPS[op]} ?")
            params.append(value)
        elif op in _IDENTITY_OPS and t is int:
            where.append(f"{column} {_IDENTITY_OPS[op]} ?")
            params.append(value)
    elif name in _STRING_COLUMNS and t is str:
        column = _STRING_COLUMNS[name]
        if op in ("==", "!="):
            where.append(f"{column} {_NUMERIC_OPS[op]} ? COLLATE NOCASE")
            params.append(value)
        elif op in _IDENTITY_OPS:
            where.append(f"{column} {_IDENTITY_OPS[op]} ?")
            params.append(value)
    return len(where) > before


def _translate_in(node: Node, where: list[str], params: list[object]) -> bool:
    """`JobStatus == 1 || JobStatus == 2` -> `status IN (1, 2)`; anything else: nothing."""
    column = None
    values: list[object] = []
    for disjunct in operands(node, "||"):
        found = _comparison(disjunct)
        if found is None:
            return False
        name, op, value = found
        if op != "==" or type(value) is not int or name not in _COLUMNS:
            return False
        if column not in (None, _COLUMNS[name]):
            return False
        column = _COLUMNS[name]
        values.append(value)
    where.append(f"{column} IN ({', '.join('?' * len(values))})")
    params.extend(values)
    return True
