"""A released dynamic slot's removal that the collector refuses (a token that may not
remove that name, say) is asked for at a few updates, then given up with a clear log
line: not asked for at every update for ever, and it keeps no other removal back."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from htgrid.classad import ClassAd
from htgrid.collector import CollectorRefused, UpdateResult
from htgrid.startd import StartdConfig
from htgrid.startd._ads import AdContext
from htgrid.startd._claims import Slots
from htgrid.startd._daemon import Startd

from .conftest import MACHINE

_REFUSED = "slot1_1@node.test"
_TAKEN = "slot1_2@node.test"


class _Collector:
    """Takes every update and every removal but that of `_REFUSED`; a request naming it
    removes nothing (as the collector checks all of a request's queries first)."""

    def __init__(self) -> None:
        self.updates = 0
        self.removals: list[str] = []  # the names removed
        self.refusals = 0  # requests for `_REFUSED` alone refused

    async def advertise_changes(
        self, command: str, epoch: str, ads: list[object], refreshes: list[object]
    ) -> tuple[str, list[UpdateResult]]:
        self.updates += 1
        taken = [UpdateResult(True, "", version=1)] * (len(ads) + len(refreshes))
        return "epoch", taken

    async def invalidate(self, command: str, query: ClassAd | list[ClassAd]) -> Any:
        names = [q["Name"] for q in ([query] if isinstance(query, ClassAd) else query)]
        if _REFUSED in names:
            self.refusals += names == [_REFUSED]
            raise CollectorRefused("node.test may not remove slot1_1@node.test", status=403)
        self.removals += names


def test_a_refused_removal_is_given_up_after_a_few_updates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "htgrid.conf").write_text("")
    config = StartdConfig.load(tmp_path)
    startd = Startd(config, pool="127.0.0.1:1", machine=MACHINE)
    startd._slots = Slots(MACHINE.offered, MACHINE.hostname)
    startd._ctx = AdContext(config, MACHINE, "<127.0.0.1:1>", startd.started)
    startd.slots.released = [_REFUSED, _TAKEN]
    collector = _Collector()

    async def updates(count: int) -> None:
        for _ in range(count):
            await startd._ads.advertise(collector)  # type: ignore[arg-type]

    with caplog.at_level(logging.WARNING, logger="htgrid.startd"):
        asyncio.run(updates(6))
    assert collector.updates == 6
    assert collector.removals.count(_TAKEN) == 1  # taken at once, not held back
    assert collector.refusals == 3 and _REFUSED not in collector.removals
    assert not startd.slots.released
    (last,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "refused to remove the ad of slot1_1@node.test 3 times" in last.getMessage()
    assert "no longer asked" in last.getMessage()
