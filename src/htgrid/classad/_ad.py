"""What the modules below `ClassAd` need of an ad: its class, to recognise one, and its
entries.

`ClassAd` (in _classad.py) sits above the parser, the printer and the evaluator, whose
work its methods are; they in turn meet ads as values. They recognise one with
`isinstance(v, AdBase)`: `AdBase` is ClassAd's base and ClassAd its only subclass, so
the test means the same, and against a plain class it is quicker than against ClassAd
(an ABC, a MutableMapping).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from htgrid.classad._ast import ListExpr, Literal, Node
from htgrid.classad._values import ERROR, UNDEFINED, AbsTime, ListValue, RelTime, Val

if TYPE_CHECKING:
    from htgrid.classad._classad import ClassAd

__all__ = ["AdBase", "Entry", "to_node_value"]


class _Marker:
    __slots__ = ()


#: `Entry.lit` of an attribute whose expression is not a constant (`fast.NOT_CONSTANT`).
_NOLIT: Final[Any] = _Marker()

_SCALAR_TYPES = (bool, int, float, str, AbsTime, RelTime)


class Entry:
    """One attribute of an ad: `name` as spelled, `node` its expression's tree, and `lit`
    its value when a constant (a bool, int, float or str, an absolute time, `Value.Undefined`
    or `Value.Error`; a relative time as float seconds), else `fast.NOT_CONSTANT`.

    Entries are immutable once made and may be shared between ads. `ClassAd._attrs`
    (lower-case name -> Entry) is the table `htgrid.classad.fast.entries` hands out.
    """

    __slots__ = ("lit", "name", "node")

    def __init__(self, name: str, node: Node) -> None:
        self.name = name
        self.node = node
        if type(node) is Literal and (
            type(node.value) in _SCALAR_TYPES or node.value is UNDEFINED or node.value is ERROR
        ):
            value = node.value
            # A relTime("...") literal evaluates to a real, as in HTCondor.
            self.lit: object = float(value.secs) if type(value) is RelTime else value
        else:
            self.lit = _NOLIT


class AdBase:
    """The base of `ClassAd`, and of nothing else: an ad's table of entries (lower-case
    name -> Entry) and the ad it is nested in, if any."""

    __slots__ = ("_attrs", "_parent")

    _attrs: dict[str, Entry]
    _parent: ClassAd | None


def to_node_value(v: Val) -> Node:
    """A value as a node: lists and ads become their syntax, anything else a literal."""
    if type(v) is ListValue:
        lv: ListValue = v
        if lv.state is not None:
            return ListExpr(lv.items)  # a list literal's items stay as written
        return ListExpr(tuple(to_node_value(x) for x in lv.values()))
    if isinstance(v, AdBase):
        return v._node()
    return Literal(v)
