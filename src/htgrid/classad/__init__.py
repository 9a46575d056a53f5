"""HTCondor's ClassAd language, with the API of the official `classad2` module.

`import htgrid.classad as classad` runs scripts written for classad2 unchanged. Evaluation
follows HTCondor mode (what every HTCondor daemon and tool uses): unscoped names fall back
to the TARGET ad, `MY.x` works in a single ad, and HTCondor's extra functions exist.
"""

from __future__ import annotations

import importlib

from htgrid.classad._ast import Literal
from htgrid.classad._classad import ClassAd, ExprTree
from htgrid.classad._factor import common_attrs
from htgrid.classad._io import ParserType, parseAds, parseNext, parseOne
from htgrid.classad._parser import parse_expr
from htgrid.classad._select import select_attrs
from htgrid.classad._unparse import quote_string as _quote_string
from htgrid.classad._values import Value
from htgrid.errors import ClassAdException, ClassAdSyntaxError, ClassAdValueError

__all__ = [
    "ClassAd",
    "ClassAdException",
    "ClassAdSyntaxError",
    "ClassAdValueError",
    "ExprTree",
    "Parser",
    "ParserType",
    "Value",
    "common_attrs",
    "lastError",
    "parseAds",
    "parseNext",
    "parseOne",
    "preload_functions",
    "quote",
    "select_attrs",
    "unquote",
    "version",
]

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
    if type(node) is not Literal or type(node.value) is not str:
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
    """Kept for classad2 scripts; htgrid reports errors as exceptions, so this is empty."""
    return ""


def version() -> str:
    """The ClassAd language version this library follows."""
    return "25.14.1"
