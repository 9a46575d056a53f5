"""Names of a package loaded when first asked for (PEP 562's module `__getattr__`).

A package lists, for each such name, the module of its own that defines it; importing the
package then loads only what it imports itself. The command line's start is the reason:
`htgrid q` needs the queue's error classes and ids, not SQLite and the submit language.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["on_demand"]


def on_demand(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: each name of `modules` (name -> its module, relative
    to the package) imported when first asked for, then kept in the package."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # asked once
        return value

    return __getattr__
