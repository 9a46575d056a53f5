"""Printing syntax trees and values back to text, as HTCondor's sink.cpp does.

Three forms: compact new syntax (`repr`), old syntax (`printOld`: `=?=` kept, reals as
`%.16G`, strings with only `"` escaped) and the indented form `str()` shows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from htgrid.classad._ad import AdBase
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
from htgrid.classad._times import format_abstime, format_reltime
from htgrid.classad._values import ERROR, UNDEFINED, AbsTime, ListValue, RelTime

if TYPE_CHECKING:
    from htgrid.classad._values import Val

__all__ = [
    "Attribute",
    "format_real",
    "format_real_old",
    "quote_name",
    "quote_string",
    "unparse",
    "unparse_ad",
    "unparse_old",
    "unparse_pretty",
    "unparse_value",
]

_PLAIN_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The lexer's keywords, which sink.cpp quotes when they are used as names ('parent' too).
_RESERVED: Final = frozenset({"true", "false", "undefined", "error", "is", "isnt", "parent"})
_NAMED_ESCAPES: Final = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
}


def format_real(x: float) -> str:
    """A real in new syntax: `%1.15E`, zero as `0.0`, specials as real("INF") and the like."""
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    if math.isfinite(x):
        return f"{x:.15E}"
    return _special_real(x)


def format_real_old(x: float) -> str:
    """A real in old syntax and JSON: `%.16G`, with `.0` added when it looks integral."""
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    if not math.isfinite(x):
        return _special_real(x)
    text = f"{x:.16G}"
    if "." not in text and "E" not in text:
        text += ".0"
    return text


def _special_real(x: float) -> str:
    if math.isnan(x):
        return 'real("NaN")'
    return 'real("INF")' if x > 0 else 'real("-INF")'


def _escape(text: str, quote: str) -> str:
    out: list[str] = []
    for byte in text.encode("utf-8", "surrogateescape"):
        if byte == ord(quote):
            out.append("\\" + quote)
        elif byte in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return "".join(out)


def quote_string(text: str) -> str:
    """A string as a new-syntax literal (what classad2.quote returns)."""
    if text.isascii() and text.isprintable() and "\\" not in text and '"' not in text:
        return f'"{text}"'
    return f'"{_escape(text, chr(34))}"'


def quote_name(name: str) -> str:
    """An attribute name, quoted as 'a b' when it is not a plain identifier."""
    if _PLAIN_NAME.match(name) and name.lower() not in _RESERVED:
        return name
    return f"'{_escape(name, chr(39))}'"


#: How many attribute expressions and names an unparser remembers the text of.
_KEEP: Final = 8192


class _Unparser:
    """One printing style; `old` selects old syntax, `pretty` the indented form."""

    __slots__ = ("_names", "_texts", "old", "pretty")

    def __init__(self, *, old: bool = False, pretty: bool = False) -> None:
        self.old = old
        self.pretty = pretty
        # An ad's attributes share their trees with other ads (the parser's cache, copied
        # ads): a thousand job ads print the same Requirements once. Trees are frozen, and
        # each is held here with its text, so its id stays its own.
        self._texts: dict[int, tuple[Node, str]] = {}
        self._names: dict[str, str] = {}

    def node(self, n: Node, indent: int = 0) -> str:
        t = type(n)
        if t is Literal:
            return self.value(n.value, indent)  # type: ignore[attr-defined]
        if t is AttrRef:
            return self.attr(n)  # type: ignore[arg-type]
        if t is Binary:
            return self.chain(n, indent)  # type: ignore[arg-type]
        if t is Unary:
            u: Unary = n  # type: ignore[assignment]
            return f" {u.op}{self.node(u.operand, indent)}"
        if t is Paren:
            return f"({self.node(n.inner, indent)})"  # type: ignore[attr-defined]
        if t is Call:
            c: Call = n  # type: ignore[assignment]
            return f"{c.name}({','.join(self.node(a, indent) for a in c.args)})"
        if t is ListExpr:
            return self.list_items(n.items, indent)  # type: ignore[attr-defined]
        if t is AdExpr:
            return self.record(n.attrs, indent)  # type: ignore[attr-defined]
        if t is Ternary:
            x: Ternary = n  # type: ignore[assignment]
            return (
                f"{self.node(x.cond, indent)} ? {self.node(x.then, indent)} : "
                f"{self.node(x.other, indent)}"
            )
        if t is Elvis:
            e: Elvis = n  # type: ignore[assignment]
            return f"{self.node(e.left, indent)} ?: {self.node(e.right, indent)}"
        if t is Subscript:
            return self.postfix(n, indent)
        raise TypeError(f"cannot print {type(n).__name__}")

    def chain(self, b: Binary, indent: int) -> str:
        """A left-deep spine of binary operators, printed in a loop (it may be long)."""
        spine = [b]
        left = b.left
        while type(left) is Binary:
            spine.append(left)
            left = left.left
        parts = [self.node(left, indent)]
        for x in reversed(spine):
            op = x.op
            if not self.old:
                op = "is" if op == "=?=" else "isnt" if op == "=!=" else op
            parts.append(f" {op} {self.node(x.right, indent)}")
        return "".join(parts)

    def attr(self, a: AttrRef) -> str:
        if a.base is not None:
            return self.postfix(a, 0)
        if a.absolute:
            return f".{quote_name(a.name)}"
        return quote_name(a.name)

    def postfix(self, n: Node, indent: int) -> str:
        """`x.a[i].b ...`, printed in a loop (it may be long)."""
        steps: list[str] = []
        while True:
            t = type(n)
            if t is Subscript:
                steps.append(f"[{self.node(n.index, indent)}]")  # type: ignore[attr-defined]
            elif t is AttrRef and n.base is not None:  # type: ignore[attr-defined]
                # sink.cpp writes the selected name as it is, unquoted.
                steps.append(f".{n.name}")  # type: ignore[attr-defined]
                indent = 0  # what is selected from prints as at the left margin
            else:
                break
            n = n.base  # type: ignore[attr-defined]
        steps.append(self.node(n, indent))
        steps.reverse()
        return "".join(steps)

    def list_items(self, items: tuple[Node, ...], indent: int) -> str:
        if self.pretty:
            inner = indent + 6
            pad = "\n" + " " * inner
            body = ",".join(pad + self.node(i, inner) for i in items)
            return f"\n{' ' * (indent + 3)}{{{body}\n{' ' * (indent + 3)}}}"
        return "{ " + ",".join(self.node(i, indent) for i in items) + " }"

    def record(self, attrs: tuple[tuple[str, Node], ...], indent: int) -> str:
        if self.pretty:
            inner = indent + 8
            pad = "\n" + " " * inner
            body = "; ".join(
                f"{pad}{quote_name(name)} = {self.node(expr, inner)}" for name, expr in attrs
            )
            return f"\n{' ' * (indent + 4)}[{body}\n{' ' * (indent + 4)}]"
        return "[ " + "; ".join(f"{self._name(k)} = {self._attr(v)}" for k, v in attrs) + " ]"

    def _name(self, name: str) -> str:
        text = self._names.get(name)
        if text is None:
            if len(self._names) >= _KEEP:
                self._names.clear()
            text = self._names[name] = quote_name(name)
        return text

    def _attr(self, n: Node) -> str:
        """An attribute's expression in the one-line form (its indent does not matter)."""
        if type(n) is Literal:
            return self.value(n.value)
        hit = self._texts.get(id(n))
        if hit is not None and hit[0] is n:
            return hit[1]
        text = self.node(n)
        if len(self._texts) >= _KEEP:
            self._texts.clear()
        self._texts[id(n)] = (n, text)
        return text

    def value(self, v: Val, indent: int = 0) -> str:
        t = type(v)
        if t is int:
            return str(v)
        if t is str:
            if self.old:
                return '"' + str(v).replace('"', '\\"') + '"'
            return quote_string(v)  # type: ignore[arg-type]
        if t is bool:
            return "true" if v else "false"
        if t is float:
            return format_real_old(v) if self.old else format_real(v)  # type: ignore[arg-type]
        if v is UNDEFINED:
            return "undefined"
        if v is ERROR:
            return "error"
        if t is AbsTime:
            return f'absTime("{format_abstime(v)}")'  # type: ignore[arg-type]
        if t is RelTime:
            return f'relTime("{format_reltime(v)}")'  # type: ignore[arg-type]
        if t is ListValue:
            return self.list_items(v.items, indent)  # type: ignore[union-attr,arg-type]
        if isinstance(v, AdBase):
            return self.record(v._pairs(), indent)
        raise TypeError(f"cannot print value {v!r}")


_COMPACT: Final = _Unparser()
_OLD: Final = _Unparser(old=True)
_PRETTY: Final = _Unparser(pretty=True)


def unparse(node: Node) -> str:
    """Compact new syntax, as repr() of a classad2 ExprTree shows it."""
    return _COMPACT.node(node)


class Attribute(Protocol):
    """An ad's attribute as `unparse_ad` takes it (htgrid.classad's Entry)."""

    @property
    def name(self) -> str: ...

    @property
    def node(self) -> Node: ...


class _Printed(NamedTuple):
    """The last ad `unparse_ad` printed: its attributes, its text, and where the text of
    each attribute but the last ends (after its `; `)."""

    attrs: tuple[Attribute, ...]
    text: str
    ends: tuple[int, ...]


# Replaced whole, never changed: threads printing at once only miss the shortcut.
_printed: _Printed | None = None


def unparse_ad(attrs: Sequence[Attribute]) -> str:
    """An ad's attributes in the compact one-line form (`unparse` of the ad).

    A grid manager prints a cluster's thousand job ads in a row, each the cluster's ~70
    attributes (the same immutable attribute objects, shared) with the job's own few
    last: the text of the attributes an ad begins with the same as the last ad printed
    is taken from that ad's text, not made again.
    """
    global _printed
    if not attrs:
        return "[  ]"
    last = _printed
    shared = 0
    if last is not None:  # the most leading attributes the same (identical) objects
        before, high = last.attrs, min(len(attrs), len(last.ends))
        while shared < high:
            mid = (shared + high + 1) // 2
            if attrs[:mid] == before[:mid]:  # attributes compare by identity
                shared = mid
            else:
                high = mid - 1
    head = last.text[: last.ends[shared - 1]] if last is not None and shared else "[ "
    ends = list(last.ends[:shared]) if last is not None else []
    parts = [head]
    at = len(head)
    final = len(attrs) - 1
    for i in range(shared, len(attrs)):
        attr = attrs[i]
        piece = f"{_COMPACT._name(attr.name)} = {_COMPACT._attr(attr.node)}"
        if i < final:
            piece += "; "
            at += len(piece)
            ends.append(at)
        parts.append(piece)
    parts.append(" ]")
    text = "".join(parts)
    _printed = _Printed(tuple(attrs), text, tuple(ends))
    return text


def unparse_old(node: Node) -> str:
    """Old syntax, as printOld writes an attribute's expression."""
    return _OLD.node(node)


def unparse_pretty(node: Node) -> str:
    """The indented form str() of a classad2 ExprTree or ClassAd shows."""
    return _PRETTY.node(node)


def unparse_value(v: Val) -> str:
    """A value in compact new syntax."""
    return _COMPACT.value(v)
