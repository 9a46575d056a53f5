"""The built-in functions of the ClassAd language, HTCondor's compat functions included.

Importing this package registers every function in `FUNCTIONS` (keyed by lower-case name).
"""

from __future__ import annotations

from htgrid.classad._functions import (  # noqa: F401 - imported to register the functions
    _environ,
    _lists,
    _math,
    _meta,
    _regex,
    _stringlist,
    _strings,
    _time,
    _types,
)
from htgrid.classad._functions._registry import FUNCTIONS, Builtin, builtin

__all__ = ["FUNCTIONS", "Builtin", "builtin"]
