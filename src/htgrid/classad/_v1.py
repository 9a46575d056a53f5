"""The names of the version-1 `classad` module that classad2 dropped: its parsers
(`parse`, `parseOld`, `parseOldAds`), expression builders (`Literal`, `Function`,
`Attribute`), Python functions callable from ClassAd expressions (`register`), and the
iterator types its parsers returned.

They behave as in HTCondor 24.0's module, and warn as it does where it warned
(DeprecationWarning for the parsers it deprecated). Where version 1 refused what htgrid
reads (blank lines and `//` comments in `parseOld`, bytes), they accept it.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from htgrid.classad._ad import to_node_value
from htgrid.classad._ast import AdExpr, AttrRef, Call, ListExpr, Literal, Node
from htgrid.classad._classad import BuiltExpr, ClassAd, ExprTree, to_node, to_python
from htgrid.classad._compile import RaisedInPython
from htgrid.classad._io import ParserType, iter_ads, parseAds, parseOne
from htgrid.classad._parser import check_depth
from htgrid.classad._state import EvalState, eval_in
from htgrid.classad._values import Val
from htgrid.errors import ClassAdOSError, ClassAdSyntaxError

__all__ = [
    "Attribute",
    "ClassAdFileIterator",
    "ClassAdStringIterator",
    "Function",
    "Literal_",
    "OldClassAdIterator",
    "parse",
    "parseOld",
    "parseOldAds",
    "register",
    "registerLibrary",
]

_PARSERS = "use parseOne, parseNext, or parseAds instead."


def _text(input: str | bytes | IO[str] | Iterable[str]) -> str:
    """Text from a string, bytes (UTF-8), a text file or an iterable of lines."""
    if isinstance(input, str):
        return input
    if isinstance(input, bytes):
        return input.decode("utf-8")
    read = getattr(input, "read", None)
    if callable(read):
        return str(read())
    return "".join(line if line.endswith("\n") else line + "\n" for line in input)


def parse(input: str | IO[str]) -> ClassAd:
    """The first new-syntax ad of `input` (deprecated in version 1, as here)."""
    what = "parse(string)" if isinstance(input, str) else "parse"
    warnings.warn(f"ClassAd Deprecation: {what} is deprecated; {_PARSERS}", DeprecationWarning, 2)
    text = _text(input)
    for ad, _ in iter_ads(text, ParserType.New):
        return ad
    raise ClassAdSyntaxError(
        "expected a ClassAd but found the end of the input", text=text, offset=len(text)
    )


def parseOld(input: str | bytes | IO[str] | Iterable[str]) -> ClassAd:
    """All `Name = value` lines of `input` (old syntax) in one ad; `#` lines are comments
    (deprecated in version 1, as here). Version 1 refused blank lines; they are skipped."""
    warnings.warn(f"ClassAd Deprecation: parseOld is deprecated; {_PARSERS}", DeprecationWarning, 2)
    return parseOne(_text(input), ParserType.Old)


class _AdIterator(Iterator[ClassAd]):
    """The ads a version-1 parser reads, one at a time."""

    __slots__ = ("_ads",)

    def __init__(self, ads: Iterator[ClassAd]) -> None:
        self._ads = ads

    def __iter__(self) -> _AdIterator:
        return self

    def __next__(self) -> ClassAd:
        return next(self._ads)


class OldClassAdIterator(_AdIterator):
    """Old-syntax ads, one per blank-line-separated block (what `parseOldAds` returns)."""


class ClassAdStringIterator(_AdIterator):
    """New-syntax ads of a string."""


class ClassAdFileIterator(_AdIterator):
    """New-syntax ads of a file."""


def parseOldAds(input: str | bytes | IO[str] | Iterable[str]) -> OldClassAdIterator:
    """Each old-syntax ad of `input`: a string, a file, or an iterable of lines
    (deprecated in version 1, as here)."""
    warnings.warn(
        "ClassAd Deprecation: parseOldAds is deprecated; use parseAds instead.",
        DeprecationWarning,
        2,
    )
    if hasattr(input, "read") and hasattr(input, "seek"):
        return OldClassAdIterator(parseAds(input, ParserType.Old))  # type: ignore[arg-type]
    return OldClassAdIterator(parseAds(_text(input), ParserType.Old))


# -- building expressions --------------------------------------------------------------


def Literal_(obj: object) -> ExprTree:
    """`obj` as a literal expression; an expression is evaluated to its value."""
    node = to_node(obj)
    if type(node) is not Literal and type(node) is not ListExpr and type(node) is not AdExpr:
        node = to_node_value(ExprTree._of(node)._evaluate(None, None))
    return BuiltExpr._of(node)


def Function(name: str, *args: object) -> ExprTree:
    """The call `name(args...)`, unevaluated; each argument a value or an ExprTree."""
    if not isinstance(name, str):
        raise TypeError("Function() takes the function's name first")
    return BuiltExpr._of(check_depth(Call(name, tuple(to_node(a) for a in args))))


def Attribute(name: str) -> ExprTree:
    """A reference to the attribute `name` (`Attribute("Memory") >= 1024` builds on it)."""
    if not isinstance(name, str):
        raise TypeError("Attribute() takes a name")
    return BuiltExpr._of(AttrRef(name))


# -- Python functions in ClassAd expressions -------------------------------------------

_REGISTERED: dict[str, Callable[..., Any]] = {}


def register(function: Callable[..., Any], name: str | None = None) -> None:
    """Make `function` callable from ClassAd expressions, as `name` (default: its own).

    As in version 1: literal arguments arrive as Python values, others as unevaluated
    ExprTrees (which Python operators combine); a function taking `state` gets the ad
    being evaluated; what it returns is converted and evaluated there. An exception it
    raises reaches the caller of the evaluation.
    """
    # The function library loads at its first use (start-up; see preload_functions), and
    # before this registers into it, so that no built-in loaded later replaces `name`.
    from htgrid.classad._functions import FUNCTIONS, Builtin

    if not callable(function):
        raise TypeError("register() takes a callable")
    key = str(name if name is not None else function.__name__)
    _REGISTERED[key.lower()] = function
    FUNCTIONS[key.lower()] = Builtin(key, _trampoline(key.lower()), lazy=True, pure=False)


def _trampoline(key: str) -> Callable[..., Val]:
    def call(state: EvalState, *nodes: Node) -> Val:
        function = _REGISTERED[key]  # looked up each time: a name may be registered again
        args = [
            to_python(eval_in(n, state))
            if type(n) in (Literal, ListExpr, AdExpr)
            else ExprTree._of(n, state.ad)
            for n in nodes
        ]
        kwargs: dict[str, Any] = {}
        if state.ad is not None and _takes_state(function):
            kwargs["state"] = ClassAd._from_pairs(state.ad._pairs())
        try:
            result = function(*args, **kwargs)
            node = to_node(result)
        except Exception as err:  # the caller of the evaluation gets it
            raise RaisedInPython(err) from err
        return eval_in(node, state)

    return call


def _takes_state(function: Callable[..., Any]) -> bool:
    """Whether `function` has a `state` parameter or takes any keyword (version 1's test)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "state" or p.kind is p.VAR_KEYWORD for p in parameters)


def registerLibrary(path: str) -> None:
    """Version 1 loaded C++ ClassAd functions from a shared library; htgrid cannot."""
    raise ClassAdOSError(
        f"cannot load ClassAd functions from the shared library {path}: htgrid runs no "
        "C++ plugins (register Python functions with classad.register)"
    )
