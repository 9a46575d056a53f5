"""Ads on the wire: HTCondor's JSON form of a ClassAd (what `condor_status -json` prints).

Literals travel as JSON values and expressions as `"\\/Expr(...)\\/"` strings, so nothing
is evaluated on the way. A body of 10,000 ads is read with one `json.loads` and written
from per-attribute fragments the store caches, which keeps queries of a large pool quick.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from htgrid.classad import ClassAd
from htgrid.classad.adjson import ad_from_object, loads
from htgrid.collector._errors import ProtocolError
from htgrid.errors import ClassAdSyntaxError

__all__ = ["Fragments", "decode_ads", "encode_ad", "join_ads"]

# An ad's attributes as JSON members, by lower-case name (`"Memory": 2048`): what
# `adjson.json_members` makes of it.
Fragments = Mapping[str, str]


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
    try:
        value = loads(text)
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
            ads.append(ad_from_object(item))
        except ClassAdSyntaxError as err:
            raise ProtocolError(f"ad {i + 1}: {err.reason}") from None
    return ads
