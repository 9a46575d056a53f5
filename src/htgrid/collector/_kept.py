"""The ads of one collector query, kept decoded between queries.

The negotiator reads every slot ad of the pool each cycle; decoding them all (hundreds,
most unchanged since the last cycle) was most of a cycle's work in the schedd, and
garbage for its collector to walk. `KeptAds` asks the collector for what changed since
its last answer (`AdStore.query_changes`) and decodes only the ads whose content
changed, refreshing the attributes every update changes in the others: the list it
returns is what a plain query would return, ad for ad.
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import copy
from typing import Any

from htgrid.classad import ClassAd
from htgrid.classad.adjson import ad_from_object, loads
from htgrid.collector._errors import ProtocolError
from htgrid.collector._types import AdType
from htgrid.collector.client import CollectorClient
from htgrid.errors import ClassAdSyntaxError

__all__ = ["KeptAds"]


class KeptAds:
    """`ads()` answers as `client.query(ad_type, constraint, projection)` would.

    The ads returned are shared with later answers: read them, copy to change them."""

    def __init__(
        self,
        client: CollectorClient,
        ad_type: AdType | str | None,
        constraint: str | None = None,
        projection: Sequence[str] | None = None,
    ) -> None:
        self.client = client
        self.ad_type = ad_type
        self.constraint = constraint
        self.projection = projection
        self._since: tuple[str, int] | None = None
        self._kept: dict[int, ClassAd] = {}  # by content version
        self.decoded = 0  # ads decoded in full, in all (for tests and logs)

    async def ads(self) -> list[ClassAd]:
        body = await self._ask(self._since)
        ads = self._read(body)
        if ads is None:  # it names an ad not kept here: ask for all of them
            self._kept.clear()
            ads = self._read(await self._ask(None))
            if ads is None:
                raise ProtocolError("the collector's answer names ads it did not send")
        return ads

    async def _ask(self, since: tuple[str, int] | None) -> bytes:
        return await self.client.query_changes(
            self.ad_type, self.constraint, self.projection, since
        )

    def _read(self, body: bytes) -> list[ClassAd] | None:
        """The answer's ads, the kept ones taken as they are; None when it names one
        not kept (the answer at `since` left it out: it did not match then)."""
        try:
            value = loads(body)
        except ValueError as err:
            raise ProtocolError(f"the collector's answer is not JSON: {err}") from None
        if isinstance(value, list):  # a collector that does not know `since`
            self._since, self._kept = None, {}
            return [self._decode(item, i) for i, item in enumerate(value)]
        if not isinstance(value, dict) or not isinstance(value.get("ads"), list):
            raise ProtocolError("the collector's answer is not a list of ads")
        kept: dict[int, ClassAd] = {}
        out = []
        for i, item in enumerate(value["ads"]):
            if type(item) is int:
                ad = self._kept.get(item)
                if ad is None:
                    return None
                version = item
            elif isinstance(item, list) and item and type(item[0]) is int and len(item) in (2, 3):
                version = item[0]
                ad = self._decode(item[1], i)
                if len(item) == 3:  # refreshed only: the kept ad with these set
                    base = self._kept.get(version)
                    if base is None:
                        return None
                    refreshed = copy(base)
                    refreshed.update(ad)
                    ad = refreshed
                else:
                    self.decoded += 1
            else:
                raise ProtocolError(f"item {i + 1} of the collector's answer is not an ad")
            kept[version] = ad
            out.append(ad)
        epoch, last = value.get("epoch"), value.get("version")
        if not isinstance(epoch, str) or not isinstance(last, int):
            raise ProtocolError("the collector's answer has no epoch and version")
        self._since, self._kept = (epoch, last), kept
        return out

    def _decode(self, item: Any, i: int) -> ClassAd:
        if not isinstance(item, dict):
            raise ProtocolError(f"item {i + 1} is not a JSON object, so not a ClassAd")
        try:
            return ad_from_object(item)
        except ClassAdSyntaxError as err:
            raise ProtocolError(f"ad {i + 1}: {err.reason}") from None
