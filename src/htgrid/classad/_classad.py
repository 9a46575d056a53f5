"""`ClassAd` and `ExprTree`: the Python face of the language, as classad2 shapes it."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, MutableMapping
from typing import Any, Self

from htgrid.classad._ad import AdBase, Entry, to_node_value
from htgrid.classad._ast import AdExpr, ListExpr, Literal, Node
from htgrid.classad._compile import EvaluationFailed, RaisedInPython, compiled
from htgrid.classad._exprops import ExprOperators, combine, truth_of
from htgrid.classad._match import requirements_hold
from htgrid.classad._parser import (
    BRACKET_DEPTH,
    MAX_DEPTH,
    START_DEPTH,
    TOO_DEEP,
    check_depth,
    parse_expr,
    parse_new_ad,
)
from htgrid.classad._state import COMPILERS, Compiled, EvalState, charge
from htgrid.classad._tojson import ad_to_json
from htgrid.classad._unparse import quote_name, unparse, unparse_ad, unparse_old, unparse_pretty
from htgrid.classad._values import (
    ERROR,
    INT64_MAX,
    INT64_MIN,
    UNDEFINED,
    AbsTime,
    ListValue,
    RelTime,
    Val,
    Value,
)
from htgrid.errors import ClassAdEvaluationError, ClassAdValueError

__all__ = ["BuiltExpr", "ClassAd", "Entry", "ExprTree", "to_node", "to_python"]

# Lists and dicts nested more than this can never be within the parser's depth limit.
_MAX_LEVELS = (MAX_DEPTH - START_DEPTH) // BRACKET_DEPTH


class ClassAd(AdBase, MutableMapping[str, Any]):
    """A ClassAd: a mutable mapping of case-insensitive attribute names to expressions.

    Reading an attribute gives its Python value when it is a constant (bool, int, float,
    str, datetime for absolute times, float seconds for relative times, list, ClassAd,
    `Value.Undefined`, `Value.Error`) and an `ExprTree` otherwise. Setting one takes those
    types, `None` (undefined), dicts (nested ads) and ExprTrees.
    """

    __slots__ = ()  # _attrs and _parent: see AdBase

    def __init__(self, input: str | dict[str, Any] | None = None) -> None:
        self._attrs = {}
        self._parent = None
        if input is None:
            return
        if isinstance(input, dict):
            for key, value in input.items():
                self[key] = value
            return
        if isinstance(input, str):
            # Loaded at the first ad read from text, not with the package (start-up).
            from htgrid.classad._prefix import read_entries

            entries = read_entries(input)
            if entries is not None:
                self._attrs = entries
                return
            for name, node in parse_new_ad(input).attrs:
                self._attrs[name.lower()] = Entry(name, node)
            return
        raise TypeError("input must be None, str, or dict")

    # -- internal construction ------------------------------------------------------------

    @classmethod
    def _from_pairs(cls, pairs: tuple[tuple[str, Node], ...] | list[tuple[str, Node]]) -> ClassAd:
        ad = cls()
        attrs = ad._attrs
        for name, node in pairs:
            key = name.lower()
            previous = attrs.get(key)
            attrs[key] = Entry(previous.name if previous else name, node)
        return ad

    def _instance(self, parent: ClassAd | None) -> ClassAd:
        """A copy sharing the entries, nested under `parent` (a nested ad being evaluated)."""
        ad = ClassAd()
        ad._attrs = self._attrs.copy()
        ad._parent = parent
        return ad

    def _insert(self, name: str, node: Node) -> None:
        key = name.lower()
        previous = self._attrs.get(key)
        self._attrs[key] = Entry(previous.name if previous else name, node)

    def _lookup_entry(self, name: str) -> Entry | None:
        return self._attrs.get(name.lower())

    def _pairs(self) -> tuple[tuple[str, Node], ...]:
        return tuple((e.name, e.node) for e in self._attrs.values())

    def _node(self) -> AdExpr:
        return AdExpr(self._pairs())

    # -- the mapping --------------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        if not isinstance(key, str):
            raise TypeError("ClassAd keys are strings")
        entry = self._attrs.get(key.lower())
        if entry is None:
            raise KeyError(key)
        return node_to_python(entry.node, self)

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError("ClassAd keys are strings")
        self._insert(key, to_node(value))

    def __delitem__(self, key: str) -> None:
        if not isinstance(key, str):
            raise TypeError("ClassAd keys are strings")
        try:
            del self._attrs[key.lower()]
        except KeyError:
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[str]:
        return iter([e.name for e in self._attrs.values()])

    def __len__(self) -> int:
        return len(self._attrs)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._attrs

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, ClassAd)
        if self._attrs.keys() != other._attrs.keys():
            return False
        return all(e.node == other._attrs[k].node for k, e in self._attrs.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return unparse_ad(tuple(self._attrs.values()))

    def __str__(self) -> str:
        return unparse_pretty(self._node())

    def __reduce__(self) -> tuple[Any, ...]:
        return (ClassAd, (repr(self),))

    def __copy__(self) -> ClassAd:
        ad = ClassAd()
        ad._attrs = self._attrs.copy()  # entries are immutable: shared, not copied
        return ad

    def __deepcopy__(self, memo: dict[int, Any]) -> ClassAd:
        return self.__copy__()

    def update(self, other: Any = (), /, **kwds: Any) -> None:
        """Set each attribute of `other` (a ClassAd, a mapping or pairs) and of `kwds`.

        From a ClassAd the expressions are taken as they are, not turned into values and
        back: the same as `self[name] = other[name]` for each, at a fraction of the cost.
        """
        if type(other) is not ClassAd:
            super().update(other, **kwds)
            return
        attrs = self._attrs
        for key, entry in other._attrs.items():
            previous = attrs.get(key)
            if previous is None or previous.name == entry.name:
                attrs[key] = entry  # immutable: shared
            else:
                attrs[key] = Entry(previous.name, entry.node)  # the name keeps its spelling
        if kwds:
            super().update(**kwds)

    # -- classad2's methods -------------------------------------------------------------

    def lookup(self, attr: str) -> ExprTree:
        """The expression of `attr`, unevaluated (KeyError when missing)."""
        if not isinstance(attr, str):
            raise TypeError("ClassAd keys are strings")
        entry = self._attrs.get(attr.lower())
        if entry is None:
            raise KeyError(attr)
        return ExprTree._of(entry.node, self)

    def eval(self, attr: str) -> Any:
        """Evaluate `attr` in the context of this ad."""
        return self.lookup(attr).eval(self)

    def printOld(self) -> str:
        """This ad in the old syntax: one `Name = expr` line each."""
        if not self._attrs:
            return "\n"
        return "".join(
            f"{quote_name(e.name)} = {unparse_old(e.node)}\n" for e in self._attrs.values()
        )

    formatOld = printOld

    def printJson(self) -> str:
        """This ad in HTCondor's JSON form."""
        return ad_to_json(self)

    formatJson = printJson

    def matches(self, ad: ClassAd) -> bool:
        """Whether `ad`'s Requirements hold with `ad` as MY and this ad as TARGET."""
        if not isinstance(ad, ClassAd):
            raise TypeError("ad must be a ClassAd")
        return requirements_hold(ad, self)

    def symmetricMatch(self, ad: ClassAd) -> bool:
        """Both ads' Requirements hold against each other."""
        return self.matches(ad) and ad.matches(self)

    def externalRefs(self, expr: ExprTree) -> list[str]:
        """The attributes `expr` references that this ad does not define."""
        if not isinstance(expr, ExprTree):
            raise TypeError("expr must be an ExprTree")
        # Loaded at the first use, not with the package (start-up), as are _flatten's.
        from htgrid.classad._refs import references

        return references(self, expr._node, external=True)

    def internalRefs(self, expr: ExprTree) -> list[str]:
        """The attributes `expr` references that this ad defines."""
        if not isinstance(expr, ExprTree):
            raise TypeError("expr must be an ExprTree")
        from htgrid.classad._refs import references  # (start-up: see externalRefs)

        return references(self, expr._node, external=False)

    def flatten(self, expr: ExprTree) -> Any:
        """Partially evaluate `expr` here: what this ad defines is folded in.

        Gives the value when everything was known, else the reduced ExprTree.
        """
        if not isinstance(expr, ExprTree):
            raise TypeError("expr must be an ExprTree")
        from htgrid.classad._flatten import flatten_value  # (start-up: see externalRefs)

        try:
            value, tree = flatten_value(expr._node, EvalState(self))
        except RecursionError:  # attributes followed into each other past Python's stack
            return Value.Error
        return to_python(value) if tree is None else ExprTree._of(tree)


class ExprTree(ExprOperators):
    """An expression in the ClassAd language.

    One taken from an ad (`ad[name]`, `ad.lookup(name)`) remembers it: `eval()` and
    `simplify()` without a scope evaluate there, as in the version-1 module (classad2
    would evaluate in no ad at all). The Python operators of version 1 build new
    expressions (see `_exprops.py`). `==` of two expressions is classad2's (whether they
    are the same); of an expression and a Python value, version 1's expression, whose
    truth is classad2's answer (false for `==`).
    """

    __slots__ = ("_node", "_scope")

    def __init__(self, expr: str | ExprTree | Any = None) -> None:
        self._scope: ClassAd | None = None
        if expr is None:
            self._node: Node = Literal(UNDEFINED)
        elif isinstance(expr, ExprTree):
            self._node = expr._node
        elif isinstance(expr, ClassAd):
            self._node = check_depth(expr._node())
        else:
            self._node = parse_expr(expr if isinstance(expr, str) else str(expr))

    @classmethod
    def _of(cls, node: Node, scope: ClassAd | None = None) -> Self:
        tree = cls.__new__(cls)
        tree._node = node
        tree._scope = scope
        return tree

    def __eq__(self, other: object) -> Any:
        return _compared(self, other, "==")

    def __ne__(self, other: object) -> Any:
        return _compared(self, other, "!=")

    def __hash__(self) -> int:
        return hash(self._node)

    def __str__(self) -> str:
        return unparse_pretty(self._node)

    def __repr__(self) -> str:
        return unparse(self._node)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ExprTree, (repr(self),))

    # What the version-1 operators (ExprOperators) build with.

    @staticmethod
    def _built(node: Node) -> BuiltExpr:
        """A new expression; as in version 1 it belongs to no ad (not its operands')."""
        return BuiltExpr._of(node)

    @staticmethod
    def _operand(value: object) -> Node:
        return to_node(value)

    @staticmethod
    def _python(node: Node, parent: ClassAd | None) -> Any:
        return node_to_python(node, parent)

    def eval(self, scope: ClassAd | None = None, target: ClassAd | None = None) -> Any:
        """Evaluate with `scope` as MY (and for unscoped names) and `target` as TARGET."""
        v = self._evaluate(scope, target)
        t = type(v)
        if t is bool or t is int or t is str or t is float:
            return v
        return to_python(v)

    def _evaluate(self, scope: ClassAd | None, target: ClassAd | None) -> Val:
        if scope is None:
            scope = self._scope
        if scope is None:
            # classad2 matches only when there is a scope to match: TARGET alone is unseen.
            if target is not None and not isinstance(target, ClassAd):
                raise TypeError("target must be a ClassAd")
            target = None
        elif type(scope) is not ClassAd and not isinstance(scope, ClassAd):
            raise TypeError("scope must be a ClassAd")
        elif target is not None and not isinstance(target, ClassAd):
            raise TypeError("target must be a ClassAd")
        try:
            fn = self._node._fn or compiled(self._node)
            st = EvalState(scope, None, target)
            v = fn(st)
            budget = st.budget
            if budget is not None and budget[0] < 0:
                return ERROR  # it took too many steps: whatever came of it (`overspent`)
            return v
        except RecursionError:  # attributes followed into each other past Python's stack
            return ERROR
        except EvaluationFailed as err:
            raise ClassAdEvaluationError(f"evaluation failed: {err}") from None
        except RaisedInPython as err:  # a function registered with classad.register
            raise err.error from None

    def simplify(self, scope: ClassAd | None = None, target: ClassAd | None = None) -> ExprTree:
        """Evaluate and give the result back as an expression."""
        return ExprTree._of(to_node_value(self._evaluate(scope, target)))


class BuiltExpr(ExprTree):
    """An expression built by Python operators; its truth is its value (version 1), or
    for `==`/`!=` with a Python value, classad2's answer (false for `==`)."""

    __slots__ = ("_truth",)
    _truth: bool

    def __bool__(self) -> bool:
        truth: bool | None = getattr(self, "_truth", None)
        return truth_of(self.eval()) if truth is None else truth


def _compared(tree: ExprTree, other: object, op: str) -> Any:
    """`tree == other` (or `!=`): classad2's answer, as an expression where it can be one.

    Two expressions compare as classad2 compares them (a bool: the same expression or
    not). An expression and a Python value give version 1's expression `tree == value`
    (what scripts build constraints with), whose truth is classad2's answer (they differ).
    """
    if isinstance(other, ExprTree):
        same = tree._node == other._node
        return same if op == "==" else not same
    if other is None or not isinstance(other, _CONVERTIBLE):
        return NotImplemented if other is not None else op == "!="
    try:
        node = to_node(other)
    except ClassAdValueError:
        return op == "!="
    result = BuiltExpr._of(combine(op, tree._node, node))
    result._truth = op == "!="
    return result


# Python values `==` makes an expression with (anything else is left to Python).
_CONVERTIBLE = (bool, int, float, str, list, tuple, dict, _dt.datetime, Value)


def _record(node: AdExpr) -> Compiled:
    """The compiler of `[a = 1; ...]`, whose value is a new ClassAd nested in the scope."""
    template = ClassAd._from_pairs(node.attrs)
    cost = 1 + len(node.attrs)  # each instance copies the table; attributes pay when evaluated

    def f(st: EvalState) -> Val:
        charge(st, cost)
        return template._instance(st.ad)

    return f


COMPILERS[AdExpr] = _record  # (the other node types' compilers are in _compile.py)


# -- conversions ------------------------------------------------------------------------

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def to_python(v: Val) -> Any:
    """A value as classad2 hands it to Python."""
    t = type(v)
    if t is bool or t is int or t is float or t is str or t is Value:
        return v
    if t is AbsTime:
        return _EPOCH + _dt.timedelta(seconds=int(v.secs))  # type: ignore[union-attr]
    if t is RelTime:
        return float(v.secs)  # type: ignore[union-attr]
    if t is ListValue:
        lv: ListValue = v  # type: ignore[assignment]
        if lv.state is None:
            return [to_python(x) for x in lv.values()]
        return [node_to_python(n, None) for n in lv.items]
    return v  # a ClassAd


def node_to_python(node: Node, parent: ClassAd | None) -> Any:
    """An attribute's expression as classad2's `ad[name]` gives it."""
    t = type(node)
    if t is Literal:
        return to_python(node.value)  # type: ignore[attr-defined]
    if t is ListExpr:
        return [node_to_python(n, parent) for n in node.items]  # type: ignore[attr-defined]
    if t is AdExpr:
        ad = ClassAd._from_pairs(node.attrs)  # type: ignore[attr-defined]
        ad._parent = parent
        return ad
    return ExprTree._of(node, parent)


def to_node(value: Any) -> Node:
    """A Python value as an expression node (what `ad[name] = value` stores).

    A list, dict or ad nested deeper than the parser reads is refused
    (ClassAdValueError), so that whatever is stored prints and parses back.
    """
    node = _to_node(value, 0)
    # An ExprTree is within the limit already (parsed, or checked when it was built).
    if isinstance(value, ClassAd | dict | list | tuple):
        check_depth(node)
    return node


def _to_node(value: Any, levels: int) -> Node:
    if isinstance(value, ExprTree):
        return value._node
    if value is None:
        return Literal(UNDEFINED)
    t = type(value)
    if t is bool or t is str or t is float:
        return Literal(value)
    if t is int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise ClassAdValueError(f"integer {value} does not fit in a ClassAd (64 bits)")
        return Literal(value)
    if isinstance(value, Value):
        return Literal(UNDEFINED if value == Value.Undefined else ERROR)
    if isinstance(value, bool | int):
        return Literal(bool(value) if isinstance(value, bool) else int(value))
    if isinstance(value, float):
        return Literal(float(value))
    if isinstance(value, str):
        return Literal(str(value))
    if isinstance(value, ClassAd):
        return value._node()
    if isinstance(value, dict | list | tuple):
        if levels >= _MAX_LEVELS:  # refused before the Python recursion gets deep
            raise ClassAdValueError(f"cannot store the value: {TOO_DEEP}")
        if isinstance(value, dict):
            return AdExpr(tuple((str(k), _to_node(v, levels + 1)) for k, v in value.items()))
        return ListExpr(tuple(_to_node(v, levels + 1) for v in value))
    if isinstance(value, _dt.datetime):
        return Literal(AbsTime(_datetime_secs(value), 0))
    raise ClassAdValueError(f"cannot store a {type(value).__name__} in a ClassAd")


def _datetime_secs(dt: _dt.datetime) -> int:
    if dt.tzinfo is not None and dt.tzinfo.utcoffset(dt) is not None:
        return int((dt - _EPOCH).total_seconds() // 1)
    # A naive datetime is local time, as classad2 reads it.
    return int(dt.timestamp() // 1)
