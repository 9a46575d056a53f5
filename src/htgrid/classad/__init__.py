"""HTCondor's ClassAd language, with the API of the official `classad2` module and of the
version-1 `classad` module before it.

`import htgrid.classad as classad` runs scripts written for classad2 unchanged, and
scripts written for the version-1 `classad` module (HTCondor 8.x to 24): its parsers
(`parseOld`, `parse`, `parseOldAds`), expression builders (`Attribute`, `Function`,
`Literal`, Python operators on ExprTree such as `Attribute("Memory") >= 1024` and
`e.and_(f)`), Python functions called from expressions (`register`), and its exception
names (`ClassAdParseError`, `ClassAdEvaluationError`, ...). Where the two differ, what
serves both is done: an ExprTree from an ad evaluates in that ad, `==` of two
expressions is an expression that is true when they are the same, and `Value.Undefined`
and `Value.Error` are false as conditions.

Evaluation follows HTCondor mode (what every HTCondor daemon and tool uses): unscoped
names fall back to the TARGET ad, `MY.x` works in a single ad, and HTCondor's extra
functions exist. Chains of operators of any length evaluate (a 50,000-term `&&` is
fine); nesting (brackets, calls, lists, nested ads: 3 levels each; unary operators,
`?:` and ternary branches: 1) stops at 500 levels, the same in ClassAd text, old
syntax, JSON and Python values. One evaluation that takes more than a million steps
(attributes evaluated, large expressions by their size) gives Value.Error, and so does a
regular expression that backtracks for more than a tenth of a second, as HTCondor bounds
both.

Beyond classad2's API, htgrid's own daemons use public modules of this package, never
its private ones: `fast` (an ad's entry table, matching, for the queue and negotiator),
`syntax` (expression trees and their text), `analysis` (why two ads match or not) and
`adjson` (HTCondor's JSON form).

Inside, each module imports only those in the layers below its own, none beside it
(the import-linter contract "classad-layers" in pyproject.toml holds them there):

    analysis | fast | syntax          the public modules beside this one
    _v1                               version 1's names
    _io                               ads read from text in any syntax
    adjson | _select | _factor        JSON's reader, projections, common attributes
    _functions                        the built-in functions
    _classad                          ClassAd and ExprTree, whose methods use all below
    _match | _refs | _flatten         matching, references, partial evaluation
    _compile | _exprops | _tojson | _prefix
                                      the compiler, version 1's operators, the JSON
                                      writer, ads that begin as the last one read
    _compile_ops                      the operators' compilers
    _lookup | _ops | _parser | _unparse | _compile_cost
                                      _compile_cost: what a large expression costs
    _ad | _lexer | _times             _ad: AdBase (ClassAd's base, for isinstance) and Entry
    _values
    _ast | _state | _split            _state: the evaluation state, and compiled(node)

Evaluation recurses through the layers (an attribute's expression is compiled when a
reference first reaches it, a list's items when read), so `compiled` finds each node
type's compiler in a table in _state, which _compile fills, and _classad for `[...]`
(its value is a ClassAd). The only imports upward load the function library, at the
first call compiled or flattened (start-up, see `preload_functions`).
"""

from __future__ import annotations

import importlib

from htgrid.classad._ast import Literal as _LiteralNode
from htgrid.classad._classad import ClassAd, ExprTree
from htgrid.classad._factor import common_attrs
from htgrid.classad._io import ParserType, parseAds, parseNext, parseOne
from htgrid.classad._parser import parse_expr
from htgrid.classad._select import select_attrs
from htgrid.classad._unparse import quote_string as _quote_string
from htgrid.classad._v1 import (
    Attribute,
    ClassAdFileIterator,
    ClassAdStringIterator,
    Function,
    OldClassAdIterator,
    parse,
    parseOld,
    parseOldAds,
    register,
    registerLibrary,
)
from htgrid.classad._v1 import Literal_ as Literal
from htgrid.classad._values import Value
from htgrid.errors import (
    ClassAdEnumError,
    ClassAdEvaluationError,
    ClassAdException,
    ClassAdInternalError,
    ClassAdOSError,
    ClassAdSyntaxError,
    ClassAdTypeError,
    ClassAdValueError,
)

__all__ = [
    "Attribute",
    "ClassAd",
    "ClassAdEnumError",
    "ClassAdEvaluationError",
    "ClassAdException",
    "ClassAdFileIterator",
    "ClassAdInternalError",
    "ClassAdOSError",
    "ClassAdParseError",
    "ClassAdStringIterator",
    "ClassAdSyntaxError",
    "ClassAdTypeError",
    "ClassAdValueError",
    "ExprTree",
    "Function",
    "Literal",
    "OldClassAdIterator",
    "Parser",
    "ParserType",
    "Value",
    "common_attrs",
    "lastError",
    "parse",
    "parseAds",
    "parseNext",
    "parseOld",
    "parseOldAds",
    "parseOne",
    "preload_functions",
    "quote",
    "register",
    "registerLibrary",
    "select_attrs",
    "unquote",
    "version",
]

# The version-1 name of a syntax error.
ClassAdParseError = ClassAdSyntaxError

# classad2 keeps the version-1 name too.
Parser = ParserType


def quote(input: str) -> str:
    """`input` as a ClassAd string literal, quotes and escapes included."""
    if not isinstance(input, str):
        raise TypeError("quote() takes a str")
    return _quote_string(input)


def unquote(input: str) -> str:
    """The string a ClassAd string literal stands for (the inverse of `quote`)."""
    if not isinstance(input, str):
        raise TypeError("unquote() takes a str")
    node = parse_expr(input)
    if type(node) is not _LiteralNode or type(node.value) is not str:
        raise ClassAdSyntaxError("expected one string literal", text=input, offset=0)
    return node.value


def preload_functions() -> None:
    """Load the built-in function library now, not at the first call an expression makes.

    For a daemon, before it serves: an import in a busy process is slow (each of its file
    system calls waits for the GIL behind the other threads), ~0.1 s measured in the queue
    daemon, which came under its first job's policy expressions.
    """
    importlib.import_module("htgrid.classad._functions")


def lastError() -> str:
    """Kept for classad2 and version-1 scripts; htgrid reports errors as exceptions, so
    this is empty (as it mostly was in both)."""
    return ""


def version() -> str:
    """The ClassAd language version this library follows."""
    return "25.14.1"
