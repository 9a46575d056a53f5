"""A job ad under construction, before it becomes a ClassAd."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from htgrid.submit import _classad

__all__ = ["Expr", "JobAd", "Value"]


@dataclass(frozen=True, slots=True)
class Expr:
    """An attribute value that is an expression, kept as ClassAd text."""

    text: str


Value = str | int | float | bool | Expr


class JobAd:
    """Attributes with case-insensitive names, in insertion order."""

    __slots__ = ("_attrs",)

    def __init__(self) -> None:
        self._attrs: dict[str, tuple[str, Value]] = {}

    def __setitem__(self, name: str, value: Value) -> None:
        key = name.lower()
        old = self._attrs.get(key)
        self._attrs[key] = (old[0] if old else name, value)

    def __getitem__(self, name: str) -> Value:
        return self._attrs[name.lower()][1]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._attrs

    def __delitem__(self, name: str) -> None:
        del self._attrs[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._attrs.values())

    def __len__(self) -> int:
        return len(self._attrs)

    def get(self, name: str) -> Value | None:
        """The value of `name`, or None."""
        item = self._attrs.get(name.lower())
        return item[1] if item else None

    def items(self) -> Iterator[tuple[str, Value]]:
        """(name, value) pairs in insertion order."""
        return iter(list(self._attrs.values()))

    def nul_attribute(self) -> str | None:
        """The first attribute whose name or value holds a NUL character (None: none)."""
        for name, value in self._attrs.values():
            text = value.text if isinstance(value, Expr) else value
            if "\0" in name or (isinstance(text, str) and "\0" in text):
                return name
        return None

    def expr(self, name: str, text: str) -> None:
        """Set `name` to an expression; raises ValueError when it does not parse."""
        if not _classad.parses(text):
            raise ValueError(text)
        self[name] = Expr(text)

    def string(self, name: str) -> str | None:
        """The value of `name` when it is a string literal."""
        value = self.get(name)
        if isinstance(value, str):
            return value
        if isinstance(value, Expr):
            result = _classad.eval_text(value.text) if _classad.is_literal(value.text) else None
            return result if isinstance(result, str) else None
        return None

    def boolean(self, name: str) -> bool | None:
        """The value of `name` when it is a boolean literal."""
        value = self.get(name)
        if isinstance(value, bool):
            return value
        if isinstance(value, Expr) and _classad.is_literal(value.text):
            result = _classad.eval_text(value.text)
            return result if isinstance(result, bool) else None
        return None

    def number(self, name: str) -> float | None:
        """The value of `name` when it is a numeric literal."""
        value = self.get(name)
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, Expr) and _classad.is_literal(value.text):
            result = _classad.eval_text(value.text)
            if isinstance(result, (int, float)) and not isinstance(result, bool):
                return float(result)
        return None

    def evaluated(self, name: str) -> Any:
        """The value of `name` evaluated alone (literals as themselves)."""
        value = self.get(name)
        if isinstance(value, Expr):
            return _classad.eval_text(value.text)
        return value

    def to_classad(self) -> Any:
        """A `htgrid.classad.ClassAd` holding these attributes."""
        ca = _classad.classad_module()
        ad = ca.ClassAd()
        for name, value in self._attrs.values():
            ad[name] = ca.ExprTree(value.text) if isinstance(value, Expr) else value
        return ad
