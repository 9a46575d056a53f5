"""The ClassAd parser: tokens to syntax trees, by recursive descent as source.cpp does.

Precedence, loosest first: `?:` ternary, `||`, `&&`, `|`, `^`, `&`, equality
(`== != =?= =!= is isnt`), relational, shifts, `+ -`, `* / %`, unary `- + ~ !`, then the
postfix forms `x.a`, `x[i]` and the Elvis operator `x ?: y`, which binds tighter than any
binary operator (`5 ?: 1 + 2` is 7 in HTCondor).
"""

from __future__ import annotations

import re
import sys
from typing import Final

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
    children,
)
from htgrid.classad._lexer import EOF, ID, INT, KW, OP, REAL, STR, Token, tokenize
from htgrid.classad._split import BLANK, piece_attr, split_pieces
from htgrid.classad._times import parse_abstime, parse_reltime
from htgrid.classad._values import ERROR, UNDEFINED, AbsTime, ListValue, RelTime
from htgrid.errors import ClassAdSyntaxError, ClassAdValueError

__all__ = [
    "BRACKET_DEPTH",
    "MAX_DEPTH",
    "PRECEDENCE",
    "START_DEPTH",
    "TOO_DEEP",
    "check_depth",
    "depth_of",
    "parse_ad_body",
    "parse_expr",
    "parse_new_ad",
    "parse_old_line",
]

# Python frames per nesting level of the deepest expressions the language accepts (about
# 500 parser levels) exceed the default limit; CPython 3.11 keeps Python-to-Python calls
# off the C stack, so a higher limit is safe.
if sys.getrecursionlimit() < 12000:
    sys.setrecursionlimit(12000)

# Binary operators by precedence, loosest first; those of one level chain left to right.
PRECEDENCE: Final = {
    "||": 1,
    "&&": 2,
    "|": 3,
    "^": 4,
    "&": 5,
    "==": 6,
    "!=": 6,
    "=?=": 6,
    "=!=": 6,
    "<": 7,
    "<=": 7,
    ">": 7,
    ">=": 7,
    "<<": 8,
    ">>": 8,
    ">>>": 8,
    "+": 9,
    "-": 9,
    "*": 10,
    "/": 10,
    "%": 10,
}
_UNARY: Final = frozenset({"-", "+", "~", "!"})
# The nesting budget of source.cpp: an expression starts 3 levels deep, a bracketed
# sub-expression costs 3 more, a unary operator or a ternary/Elvis operand 1, and parsing
# fails past 500. An ad's own brackets cost nothing, so an attribute may nest as deep
# alone, in an ad, in old syntax or in JSON, and whatever is printed parses back.
MAX_DEPTH: Final = 500
START_DEPTH: Final = 3
BRACKET_DEPTH: Final = 3
TOO_DEEP: Final = (
    f"expression nested too deeply: more than {MAX_DEPTH} levels (each bracket, call, "
    "list or nested ad counts 3, each unary operator, '?:' or ternary branch 1)"
)


class _Parser:
    __slots__ = ("depth", "i", "origin", "text", "tokens")

    def __init__(self, text: str, tokens: list[Token], origin: str) -> None:
        self.text = text
        self.tokens = tokens
        self.i = 0
        self.depth = START_DEPTH
        self.origin = origin

    # -- helpers -------------------------------------------------------------------------

    def fail(self, reason: str, tok: Token | None = None) -> ClassAdSyntaxError:
        tok = tok if tok is not None else self.tokens[self.i]
        return ClassAdSyntaxError(reason, text=self.text, offset=tok[2], origin=self.origin)

    def expect(self, op: str) -> None:
        tok = self.tokens[self.i]
        if tok[0] != OP or tok[1] != op:
            raise self.fail(f"expected '{op}' but found {describe(tok)}")
        self.i += 1

    def enter(self, cost: int) -> None:
        self.depth += cost
        if self.depth > MAX_DEPTH:
            raise self.fail(TOO_DEEP)

    # -- grammar -------------------------------------------------------------------------

    def expression(self) -> Node:
        cond = self.binary(1)
        tok = self.tokens[self.i]
        if tok[0] == OP and tok[1] == "?":
            self.i += 1
            self.enter(1)
            then = self.expression()
            self.expect(":")
            other = self.expression()
            self.depth -= 1
            return Ternary(cond, then, other)
        return cond

    def binary(self, min_prec: int) -> Node:
        left = self.unary()
        tokens = self.tokens
        while True:
            tok = tokens[self.i]
            if tok[0] != OP:
                return left
            prec = PRECEDENCE.get(str(tok[1]))
            if prec is None or prec < min_prec:
                return left
            self.i += 1
            right = self.binary(prec + 1)
            left = Binary(str(tok[1]), left, right)

    def unary(self) -> Node:
        tok = self.tokens[self.i]
        if tok[0] == OP and tok[1] in _UNARY:
            self.i += 1
            self.enter(1)
            operand = self.unary()
            self.depth -= 1
            return Unary(str(tok[1]), operand)
        return self.postfix()

    def postfix(self) -> Node:
        node = self.primary()
        tokens = self.tokens
        while True:
            tok = tokens[self.i]
            if tok[0] != OP:
                return node
            op = tok[1]
            if op == ".":
                name_tok = tokens[self.i + 1]
                if name_tok[0] != ID:
                    raise self.fail(
                        f"expected an attribute name after '.' but found {describe(name_tok)}",
                        name_tok,
                    )
                self.i += 2
                node = AttrRef(str(name_tok[1]), node)
            elif op == "[":
                self.i += 1
                self.enter(BRACKET_DEPTH)
                index = self.expression()
                self.expect("]")
                self.depth -= BRACKET_DEPTH
                node = Subscript(node, index)
            elif op == "?:":
                self.i += 1
                self.enter(1)
                right = self.unary()
                self.depth -= 1
                return Elvis(node, right)
            else:
                return node

    def primary(self) -> Node:
        tok = self.tokens[self.i]
        kind, value = tok[0], tok[1]
        if kind == INT or kind == REAL or kind == STR:
            self.i += 1
            return Literal(value)  # type: ignore[arg-type]
        if kind == KW:
            self.i += 1
            return _KEYWORD_NODES[str(value)]
        if kind == ID:
            self.i += 1
            nxt = self.tokens[self.i]
            if nxt[0] == OP and nxt[1] == "(":
                return self.call(str(value))
            return AttrRef(str(value))
        if kind == OP:
            if value == "(":
                self.i += 1
                self.enter(BRACKET_DEPTH)
                inner = self.expression()
                self.expect(")")
                self.depth -= BRACKET_DEPTH
                return Paren(inner)
            if value == "{":
                return self.list_()
            if value == "[":
                return self.record()
            if value == ".":
                name_tok = self.tokens[self.i + 1]
                if name_tok[0] != ID:
                    raise self.fail(
                        f"expected an attribute name after '.' but found {describe(name_tok)}",
                        name_tok,
                    )
                self.i += 2
                return AttrRef(str(name_tok[1]), None, True)
        raise self.fail(f"expected an expression but found {describe(tok)}")

    def call(self, name: str) -> Node:
        start = self.tokens[self.i - 1]
        self.i += 1  # the "("
        self.enter(BRACKET_DEPTH)
        args: list[Node] = []
        tok = self.tokens[self.i]
        if not (tok[0] == OP and tok[1] == ")"):
            while True:
                args.append(self.expression())
                tok = self.tokens[self.i]
                # HTCondor mode also takes ';' between arguments.
                if tok[0] == OP and tok[1] in (",", ";"):
                    self.i += 1
                    continue
                break
        self.expect(")")
        self.depth -= BRACKET_DEPTH
        node = fold_time_literal(name, tuple(args))
        if node is None:
            text = args[0].value  # type: ignore[attr-defined]
            raise self.fail(f"{name}({text!r}): not a valid time", start)
        return node

    def list_(self) -> Node:
        self.i += 1  # the "{"
        self.enter(BRACKET_DEPTH)
        items: list[Node] = []
        tok = self.tokens[self.i]
        if not (tok[0] == OP and tok[1] == "}"):
            while True:
                items.append(self.expression())
                tok = self.tokens[self.i]
                if tok[0] == OP and tok[1] == ",":
                    self.i += 1
                    continue
                break
        self.expect("}")
        self.depth -= BRACKET_DEPTH
        return ListExpr(tuple(items))

    def record(self, *, top: bool = False) -> AdExpr:
        """`[ ... ]`; a `top` one (an ad, not a value in an expression) costs no depth."""
        cost = 0 if top else BRACKET_DEPTH
        self.i += 1  # the "["
        self.enter(cost)
        attrs = self.ad_body("]")
        self.expect("]")
        self.depth -= cost
        return AdExpr(attrs)

    def ad_body(self, closer: str | None) -> tuple[tuple[str, Node], ...]:
        """`name = expr` separated by ';' (extra ';' allowed) up to `closer` or the end."""
        found: dict[str, tuple[str, Node]] = {}
        tokens = self.tokens
        while True:
            tok = tokens[self.i]
            if tok[0] == OP and tok[1] == ";":
                self.i += 1
                continue
            if (closer is None and tok[0] == EOF) or (tok[0] == OP and tok[1] == closer):
                break
            if tok[0] != ID:
                raise self.fail(f"expected an attribute name but found {describe(tok)}")
            self.i += 1
            self.expect("=")
            expr = self.expression()
            name = str(tok[1])
            key = name.lower()
            # A repeated name: the last value wins, the first spelling stays.
            previous = found.get(key)
            found[key] = (previous[0] if previous else name, expr)
            nxt = tokens[self.i]
            if nxt[0] == OP and nxt[1] == ";":
                continue
            if (closer is None and nxt[0] == EOF) or (nxt[0] == OP and nxt[1] == closer):
                break
            raise self.fail(f"expected ';' or '{closer or 'end'}' but found {describe(nxt)}")
        return tuple(found.values())

    def end(self) -> None:
        tok = self.tokens[self.i]
        if tok[0] != EOF:
            raise self.fail(f"unexpected {describe(tok)} after the expression")


_KEYWORD_NODES: Final = {
    "true": Literal(True),
    "false": Literal(False),
    "undefined": Literal(UNDEFINED),
    "error": Literal(ERROR),
}


def describe(tok: Token) -> str:
    """A token as an error message names it."""
    kind, value = tok[0], tok[1]
    if kind == EOF:
        return "the end of the input"
    if kind == STR:
        return f"string {value!r}"
    if kind == ID:
        return f"name '{value}'"
    if kind == KW:
        return f"keyword '{value}'"
    if kind == OP:
        return f"'{value}'"
    return f"number {value!r}"


def fold_time_literal(name: str, args: tuple[Node, ...]) -> Node | None:
    """absTime("...") and relTime("...") of a string literal become time literals.

    None when the string is not a valid time: the parser then refuses it, as source.cpp does.
    """
    if len(args) == 1 and isinstance(args[0], Literal) and type(args[0].value) is str:
        low = name.lower()
        if low == "abstime":
            abs_value = parse_abstime(args[0].value)
            return None if abs_value is None else Literal(abs_value)
        if low == "reltime":
            rel_value = parse_reltime(args[0].value)
            return None if rel_value is None else Literal(rel_value)
    return Call(name, args)


def parse_expr(text: str, *, origin: str = "", nested: int = 0) -> Node:
    """Parse one expression (new syntax); `nested`: the depth it starts inside others."""
    return _cached(text, False, origin, nested)


def parse_new_ad(text: str, *, origin: str = "") -> AdExpr:
    """Parse exactly one new-syntax ad `[ ... ]`."""
    pairs = _split_parse(text, origin)
    if pairs is not None:
        return AdExpr(pairs)
    return parse_new_ad_whole(text, origin=origin)


def parse_record_value(text: str, *, origin: str = "") -> Node:
    """Parse one attribute's value as it stands in an ad."""
    return _cached(text, False, origin)


def _split_parse(text: str, origin: str) -> tuple[tuple[str, Node], ...] | None:
    """The ad's attributes, its `name = value` pieces parsed one by one through a cache.

    The jobs of one cluster repeat most of their pieces, so most come from the cache. None
    when the splitter is unsure or a piece does not parse: the whole parse then gives the
    answer, or the error with its place in the whole text.
    """
    pieces = split_pieces(text)
    if pieces is None:
        return None
    found: dict[str, tuple[str, Node]] = {}
    for piece in pieces:
        known = _PIECES.get(piece)
        if known is None:
            pair = piece_attr(piece)
            if pair is None:
                return None
            if pair is BLANK:
                continue
            try:
                node = parse_record_value(pair[1], origin=origin)
            except ClassAdSyntaxError:
                return None
            known = (pair[0].lower(), pair[0], node)
            if len(_PIECES) >= _CACHE_LIMIT:
                _PIECES.clear()
            _PIECES[piece] = known
        key, name, node = known
        # A repeated name: the last value wins, the first spelling stays (as ad_body).
        previous = found.get(key)
        found[key] = (previous[0] if previous else name, node)
    return tuple(found.values())


def parse_new_ad_whole(text: str, *, origin: str = "") -> AdExpr:
    """Parse exactly one new-syntax ad `[ ... ]`, all of it through the tokenizer."""
    parser = _Parser(text, tokenize(text, origin=origin), origin)
    tok = parser.tokens[0]
    if not (tok[0] == OP and tok[1] == "["):
        raise parser.fail(f"expected '[' to open a ClassAd but found {describe(tok)}")
    node = parser.record(top=True)
    parser.end()
    return node


def parse_ad_body(text: str, *, origin: str = "") -> tuple[tuple[str, Node], ...]:
    """Parse `a = 1; b = 2` with no brackets (the body of an ad)."""
    parser = _Parser(text, tokenize(text, origin=origin), origin)
    return parser.ad_body(None)


# `Name = literal`, the usual shape of an old-syntax line, read without the tokenizer.
_SIMPLE_LINE: Final = re.compile(
    r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?:"
    r"(-?(?:0|[1-9]\d{0,17}))"  # an integer that surely fits in 64 bits
    r'|"([^"\\\n]*)"'  # a string without escapes
    r"|(-?\d+\.\d+(?:[eE][+-]?\d+)?)"  # a real
    r"|([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])"
    r")\s*\Z"
)
# Parsed expressions by their text: job ads repeat the same expressions endlessly, and
# nodes are immutable, so they (and their compiled closures) can be shared.
_CACHE: dict[str, Node] = {}
_CACHE_LIMIT: Final = 20_000
# The same for whole `name = value` pieces of new-syntax ads: (lower-case name, name, node).
_PIECES: dict[str, tuple[str, str, Node]] = {}


def _cached(text: str, old: bool, origin: str, nested: int = 0) -> Node:
    key = f"{'o' if old else 'n'}{nested} {text}"
    node = _CACHE.get(key)
    if node is None:
        parser = _Parser(text, tokenize(text, old=old, origin=origin), origin)
        parser.depth += nested  # an ad's value starts inside its brackets
        node = parser.expression()
        parser.end()
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = node
    return node


def parse_old_line(text: str, *, origin: str = "") -> tuple[str, Node]:
    """Parse one old-syntax line `Name = expr`."""
    m = _SIMPLE_LINE.match(text)
    if m is not None:
        name, integer, string, real, boolean = m.groups()
        if integer is not None:
            return name, Literal(int(integer))
        if string is not None:
            return name, Literal(string)
        if real is not None:
            return name, Literal(float(real))
        return name, Literal(boolean.lower() == "true")
    eq = text.find("=")
    name_part = text[:eq].strip() if eq > 0 else ""
    # `a == b` or `a =?= b` is no assignment: leave those to the full parser's error.
    if eq > 0 and _NAME.match(name_part) and not text.startswith(("==", "=?=", "=!="), eq):
        try:
            return name_part, _cached(text[eq + 1 :], True, origin)
        except ClassAdSyntaxError as err:
            raise ClassAdSyntaxError(
                err.reason, text=text, offset=eq + 1 + err.offset, origin=origin
            ) from None
    parser = _Parser(text, tokenize(text, old=True, origin=origin), origin)
    tok = parser.tokens[0]
    if tok[0] != ID:
        raise parser.fail(f"expected an attribute name but found {describe(tok)}")
    parser.i = 1
    parser.expect("=")
    node = parser.expression()
    parser.end()
    return str(tok[1]), node


_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def depth_of(node: Node) -> int:
    """The depth the parser reaches reading `node` back from its printed form.

    Walked without recursion: it is asked of trees built by API calls, before they are
    known to be within the limit.
    """
    deepest = START_DEPTH
    stack: list[tuple[object, int]] = [(node, START_DEPTH)]
    pop, push = stack.pop, stack.append
    while stack:
        n, depth = pop()
        if depth > deepest:
            deepest = depth
        t = type(n)
        if t is Binary:
            push((n.left, depth))  # type: ignore[attr-defined]
            push((n.right, depth))  # type: ignore[attr-defined]
        elif t is AttrRef:
            if n.base is not None:  # type: ignore[attr-defined]
                push((n.base, depth))  # type: ignore[attr-defined]
        elif t is Literal:
            v = n.value  # type: ignore[attr-defined]
            tv = type(v)
            # Times and infinities print as calls (absTime("..."), real("INF")).
            if tv is AbsTime or tv is RelTime or (tv is float and v - v != 0.0):
                push((None, depth + BRACKET_DEPTH))
            elif tv is ListValue:
                for item in v.items:
                    push((item, depth + BRACKET_DEPTH))
                push((None, depth + BRACKET_DEPTH))
            elif isinstance(v, AdBase):
                for entry in v._attrs.values():
                    push((entry.node, depth + BRACKET_DEPTH))
                push((None, depth + BRACKET_DEPTH))
        elif t is Unary:
            push((n.operand, depth + 1))  # type: ignore[attr-defined]
        elif t is Ternary:
            push((n.cond, depth))  # type: ignore[attr-defined]
            push((n.then, depth + 1))  # type: ignore[attr-defined]
            push((n.other, depth + 1))  # type: ignore[attr-defined]
        elif t is Elvis:
            push((n.left, depth))  # type: ignore[attr-defined]
            push((n.right, depth + 1))  # type: ignore[attr-defined]
        elif t is Subscript:
            push((n.base, depth))  # type: ignore[attr-defined]
            push((n.index, depth + BRACKET_DEPTH))  # type: ignore[attr-defined]
        elif t is Paren:
            push((n.inner, depth + BRACKET_DEPTH))  # type: ignore[attr-defined]
        elif t is Call or t is ListExpr or t is AdExpr:
            for child in children(n):  # type: ignore[arg-type]
                push((child, depth + BRACKET_DEPTH))
            push((None, depth + BRACKET_DEPTH))
    return deepest


def check_depth(node: Node) -> Node:
    """`node` itself, or ClassAdValueError when it nests deeper than the parser reads."""
    if depth_of(node) > MAX_DEPTH:
        raise ClassAdValueError(f"cannot store the value: {TOO_DEEP}")
    return node
