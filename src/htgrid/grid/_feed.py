"""The queue's change feed as the grid manager follows it: read when the daemon rings the
doorbell (`wake`), and every `feed_interval` in any case; `feed.seq` holds the last
sequence number read, so the daemon's `trim_changes` keeps what is still unread. Changes
trimmed unread (a gap) call for a full scan of the queue instead."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final

from htgrid._files import write_atomic
from htgrid.gahp import Clock
from htgrid.grid._queueio import QueueIO
from htgrid.queue import Change, StoreError, feed_gap
from htgrid.queue.doorbell import Doorbell

__all__ = ["ChangeFeed"]

log = logging.getLogger("htgrid.grid")

_BATCH: Final = 10_000
#: The least time between two reads of the feed when the daemon keeps ringing (a queue
#: busy with local jobs changes many times a second; each read costs a query).
_MIN_GAP: Final = 0.05


class ChangeFeed:
    """The feed's position, its doorbell and the loop that reads it."""

    def __init__(self, directory: Path, clock: Clock, interval: Callable[[], float]) -> None:
        self.bell = Doorbell(directory / "wake")
        self.clock = clock
        self._interval = interval
        self._path = directory / "feed.seq"
        self.seq = 0
        self._saved = -1

    def open(self) -> None:
        """Listening before the start-up scan: a change made during it rings for the feed."""
        try:
            self.bell.open()
        except OSError as err:  # no named pipes here: the timer alone will do
            log.warning("grid manager: no doorbell at %s: %s", self.bell.path, err)

    def close(self) -> None:
        self.bell.close()

    async def follow(
        self,
        io: QueueIO,
        apply: Callable[[Sequence[Change]], Awaitable[None]],
        rescan: Callable[[], Awaitable[None]],
    ) -> None:
        """Until cancelled: each batch of changes given to `apply`, in order."""
        while True:
            try:
                top = await io.last_seq()
                changes = await io.changes_since(self.seq, _BATCH)
                if feed_gap(changes, self.seq, top):
                    # Changes we never read were trimmed: only a full scan is safe.
                    log.warning("change feed trimmed after %d: rescanning the queue", self.seq)
                    self.seq = await io.last_seq()
                    await rescan()
                    continue
                await apply(changes)
            except StoreError as err:
                log.warning("reading the change feed: %s", err)
                changes = []
            if changes:
                self.seq = changes[-1].seq
            if self.seq != self._saved:
                await asyncio.to_thread(self._save)
            if len(changes) < _BATCH:
                await self.clock.sleep(_MIN_GAP)
                await self._until_rung()

    async def _until_rung(self) -> None:
        """Until the daemon rings the doorbell, or `feed_interval` passes without a ring."""
        rung = asyncio.ensure_future(self.bell.wait())
        timer = asyncio.ensure_future(self.clock.sleep(self._interval()))
        try:
            await asyncio.wait({rung, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            rung.cancel()
            timer.cancel()

    def _save(self) -> None:
        seq = self.seq
        if seq == self._saved:
            return
        write_atomic(self._path, f"{seq}\n".encode("ascii"))
        self._saved = seq
