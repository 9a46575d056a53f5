"""The narrow slice of the ClassAd library that submit needs.

Everything goes through here so the rest of the package deals in plain
strings and Python values; `htgrid.classad` is imported lazily, on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = [
    "ERROR",
    "UNDEFINED",
    "ExprValue",
    "classad_module",
    "eval_text",
    "external_refs",
    "internal_refs",
    "is_literal",
    "normalize",
    "parses",
    "unparse_value",
]

# What evaluation returns: a Python scalar, a list, a ClassAd, or the
# library's Undefined/Error markers.
ExprValue = Any

_MODULE: ModuleType | None = None


def classad_module() -> ModuleType:
    """The ClassAd library (`htgrid.classad`, whose API mirrors classad2)."""
    global _MODULE
    if _MODULE is None:
        _MODULE = importlib.import_module("htgrid.classad")
    return _MODULE


def _expr(text: str) -> Any:
    return classad_module().ExprTree(text)


def parses(text: str) -> bool:
    """Whether `text` is one ClassAd expression."""
    if not text.strip():
        return False
    try:
        _expr(text)
    except Exception:  # the library signals syntax errors with its own types
        return False
    return True


def normalize(text: str) -> str:
    """`text` parsed and printed back the way the library unparses it."""
    return str(_expr(text))


class _Special:
    """UNDEFINED or ERROR as an evaluation result (never confused with a number)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNDEFINED = _Special("undefined")
ERROR = _Special("error")


def eval_text(text: str) -> ExprValue | None:
    """Evaluate `text` in an empty ad; None when it does not parse.

    UNDEFINED and ERROR come back as this module's `UNDEFINED` and `ERROR`
    (the library's markers are int-like, which would pass for numbers).
    """
    try:
        expr = _expr(text)
    except Exception:
        return None
    value = expr.eval()
    ca = classad_module()
    if value is ca.Value.Undefined:
        return UNDEFINED
    if value is ca.Value.Error:
        return ERROR
    return value


def is_undefined(value: ExprValue) -> bool:
    """Whether an evaluation result is UNDEFINED."""
    return value is UNDEFINED


def is_error(value: ExprValue) -> bool:
    """Whether an evaluation result is ERROR."""
    return value is ERROR


def unparse_value(value: ExprValue) -> str:
    """A value printed in ClassAd syntax (strings quoted)."""
    ca = classad_module()
    if isinstance(value, _Special):
        return value.name
    ad = ca.ClassAd()
    ad["V"] = value
    return str(ad.lookup("V"))


def is_literal(text: str) -> bool:
    """Whether the expression is a plain literal (its unparse evaluates to itself)."""
    try:
        expr = _expr(text)
    except Exception:
        return False
    value = eval_text(str(expr))
    if isinstance(value, (list,)) or hasattr(value, "keys"):
        return False
    return unparse_value(value) == str(expr)


def internal_refs(text: str, job_attrs: dict[str, ExprValue]) -> set[str]:
    """Attribute names of `job_attrs` that `text` refers to, lower-cased."""
    ca = classad_module()
    ad = ca.ClassAd()
    for name, value in job_attrs.items():
        ad[name] = value
    return {str(ref).split(".")[-1].lower() for ref in ad.internalRefs(_expr(text)) if str(ref)}


def external_refs(text: str, job_attrs: dict[str, ExprValue]) -> set[str]:
    """Attribute names `text` takes from the other (TARGET) ad, lower-cased.

    Like HTCondor's GetExprReferences: a `TARGET.` prefix is dropped, and a
    reference to something not in `job_attrs` counts as external.
    """
    ca = classad_module()
    ad = ca.ClassAd()
    for name, value in job_attrs.items():
        ad[name] = value
    names: set[str] = set()
    for ref in ad.externalRefs(_expr(text)):
        name = str(ref)
        if not name:
            continue
        low = name.lower()
        for prefix in ("target.", "my."):
            if low.startswith(prefix):
                name = name[len(prefix) :]
                break
        names.add(name.split(".")[0].lower())
    return names
