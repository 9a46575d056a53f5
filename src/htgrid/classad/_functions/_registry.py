"""The table of built-in functions and the decorator that fills it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from htgrid.classad._values import Val

__all__ = ["FUNCTIONS", "Builtin", "builtin"]


@dataclass(frozen=True, slots=True)
class Builtin:
    """A built-in function.

    A strict function is called as `fn(state, *values)` with its arguments evaluated.
    A lazy one is called as `fn(state, *nodes)` with the argument syntax trees, and
    evaluates what it needs with `htgrid.classad._state.eval_in(node, state)`.
    `pure` functions of constant arguments may be folded at compile time.
    """

    name: str
    fn: Callable[..., Val]
    lazy: bool
    pure: bool


FUNCTIONS: dict[str, Builtin] = {}


def builtin(*names: str, lazy: bool = False, pure: bool = True) -> Callable[[Any], Any]:
    """Register the decorated function under each of `names` (matched case-insensitively)."""

    def register(fn: Callable[..., Val]) -> Callable[..., Val]:
        for name in names:
            FUNCTIONS[name.lower()] = Builtin(name, fn, lazy, pure)
        return fn

    return register
