"""HTCondor's JSON form of ClassAds, decoded and encoded again without losing expressions.

The form marks an expression by the escaped slashes of `"\\/Expr(...)\\/"`, which a JSON
decoder turns into plain slashes, indistinguishable from a string that happens to read
"/Expr(...)/". So the marker is swapped for a NUL (never in a ClassAd string) before
decoding, and back after encoding. (The API's side has its own copy in htgrid.net._wire:
a GAHP server imports nothing of the daemons.)
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = ["dumps", "loads"]

_RAW: Final = '"\\/Expr('
_HELD: Final = '"\\u0000Expr('


def loads(text: str | bytes) -> Any:
    """JSON holding job ads, their expressions kept recognisable."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(text.replace(_RAW, _HELD))


def dumps(obj: Any) -> str:
    """`obj` (from `loads`) as JSON again, its expressions marked as HTCondor marks them."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace(_HELD, _RAW)
