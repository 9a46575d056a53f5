"""Ads on the wire: HTCondor's JSON form of a ClassAd (what `condor_status -json` prints).

Literals travel as JSON values and expressions as `"\\/Expr(...)\\/"` strings, so nothing
is evaluated on the way. A body of 10,000 ads is read with one `json.loads` and written
from per-attribute fragments the store caches, which keeps queries of a large pool quick.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from htgrid.classad import ClassAd
from htgrid.classad.adjson import ad_from_object, loads
from htgrid.collector._errors import ProtocolError
from htgrid.errors import ClassAdSyntaxError

__all__ = ["Changes", "Fragments", "decode_ads", "decode_changes", "encode_ad", "join_ads"]

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


@dataclass(frozen=True)
class Changes:
    """A daemon's update of its ads in two parts (`POST /v1/changes/{command}`): the
    ads that changed, whole, and refreshes (a stored version and the `VOLATILE`
    attributes to set in it) of those that did not, as of the store's `epoch`."""

    epoch: str
    ads: tuple[ClassAd, ...]
    refreshes: tuple[tuple[int, ClassAd], ...]


def _loads(body: str | bytes) -> Any:
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    try:
        return loads(text)
    except json.JSONDecodeError as err:
        raise ProtocolError(f"not JSON: {err.msg} at line {err.lineno}") from None
    except RecursionError:
        raise ProtocolError("not JSON the collector reads: nested too deeply") from None


def decode_changes(body: str | bytes) -> Changes:
    """The `Changes` of `{"epoch": E, "ads": [ad...], "refresh": [[version, ad]...]}`."""
    value = _loads(body)
    if not isinstance(value, dict):
        raise ProtocolError('changes are a JSON object: {"epoch", "ads", "refresh"}')
    epoch, ads, refresh = value.get("epoch", ""), value.get("ads", []), value.get("refresh", [])
    if not isinstance(epoch, str) or not isinstance(ads, list) or not isinstance(refresh, list):
        raise ProtocolError("changes: epoch is a string, ads and refresh are arrays")
    refreshes = []
    for i, item in enumerate(refresh):
        if not (
            isinstance(item, list)
            and len(item) == 2
            and type(item[0]) is int
            and isinstance(item[1], dict)
        ):
            raise ProtocolError(f"refresh {i + 1} is not [version, ad]")
        refreshes.append((item[0], _ad(item[1], f"refresh {i + 1}")))
    return Changes(epoch, tuple(_ads(ads)), tuple(refreshes))


def decode_ads(body: str | bytes) -> list[ClassAd]:
    """The ads of a JSON array (or one object) in HTCondor's JSON form."""
    value = _loads(body)
    return _ads(value if isinstance(value, list) else [value])


def _ad(item: dict[str, Any], what: str) -> ClassAd:
    try:
        return ad_from_object(item)
    except ClassAdSyntaxError as err:
        raise ProtocolError(f"{what}: {err.reason}") from None


def _ads(items: list[Any]) -> list[ClassAd]:
    ads = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ProtocolError(f"item {i + 1} is not a JSON object, so not a ClassAd")
        ads.append(_ad(item, f"ad {i + 1}"))
    return ads
