"""Ads on the wire: HTCondor's JSON form of a ClassAd (what `condor_status -json` prints).

Literals travel as JSON values and expressions as `"\\/Expr(...)\\/"` strings, so nothing
is evaluated on the way. A body of 10,000 ads is read with one `json.loads` and written
from per-attribute fragments the store caches, which keeps queries of a large pool quick.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from htgrid.classad import ClassAd

# The classad package's JSON codec, one value at a time (its whole-document reader
# rescans the text for every ad, which is slow for thousands of ads in one array).
from htgrid.classad._json import _MARK, _node, _pairs
from htgrid.collector._errors import ProtocolError
from htgrid.errors import ClassAdSyntaxError

__all__ = ["Fragments", "decode_ads", "encode_ad", "fragments", "join_ads"]

# An ad's attributes as JSON members, by lower-case name (`"Memory": 2048`).
Fragments = Mapping[str, str]


def fragments(ad: ClassAd) -> dict[str, str]:
    """Each attribute of `ad` as a JSON object member, keyed by its lower-case name."""
    return {
        key: f"{json.dumps(entry.name, ensure_ascii=False)}: {_node(entry.node, 0)}"
        for key, entry in ad._attrs.items()
    }


def encode_ad(parts: Fragments, names: Iterable[str] | None = None) -> str:
    """The JSON object of an ad's fragments, all of them or only those in `names`."""
    if names is None:
        return "{" + ", ".join(parts.values()) + "}"
    chosen = [parts[n.lower()] for n in names if n.lower() in parts]
    return "{" + ", ".join(chosen) + "}"


def join_ads(objects: Iterable[str]) -> str:
    """A JSON array of already-encoded ads."""
    return "[" + ",\n".join(objects) + "]"


def decode_ads(body: str | bytes) -> list[ClassAd]:
    """The ads of a JSON array (or one object) in HTCondor's JSON form."""
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    # The raw `"\/Expr(` marker must survive decoding; json.loads would turn `\/` into `/`
    # and make it indistinguishable from a string that happens to start with "/Expr(".
    marked = text.replace('"\\/Expr(', json.dumps(_MARK)[:-1])
    try:
        value = json.loads(marked)
    except json.JSONDecodeError as err:
        raise ProtocolError(f"not JSON: {err.msg} at line {err.lineno}") from None
    except RecursionError:
        raise ProtocolError("not JSON the collector reads: nested too deeply") from None
    items = value if isinstance(value, list) else [value]
    ads = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ProtocolError(f"item {i + 1} is not a JSON object, so not a ClassAd")
        try:
            ads.append(ClassAd._from_pairs(_pairs(item, text, 0)))
        except ClassAdSyntaxError as err:
            raise ProtocolError(f"ad {i + 1}: {err.reason}") from None
    return ads
