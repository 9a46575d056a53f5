"""The remote copies a finished job left behind: their removal tried again until it works.

After a condor (HTCondor-C) job's output is back, the grid manager lets its remote copy go
(LeaveJobInQueue = false): the remote schedd then drops the job and its spool sweep the
sandbox. The local job has left the queue by then, so nothing there says the removal is
still owed. So the removal is recorded before the job's exit is committed (`expect`) and
the record dropped once it worked (`settled`): a kill -9 between the two leaves the record,
which a restarted grid manager tries. When it fails (the remote schedd down, a GAHP that
dies), the removal is kept in `<queue>/gridmanager/leftovers/<cluster>.<proc>.json` (written whole and synced
to disk): the grid manager's sweep tries it again with a growing pause
(GridManagerConfig.backoff), then, after `QUICK_TRIES`, every RETRY_MAX, until the remote
schedd takes it or answers that the job is not there (gone by itself, at the end of its
lease). A restart reads the file and goes on; a file that cannot be read is set aside
(`.bad`) and logged, and the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from htgrid._files import write_atomic
from htgrid.errors import HTGridError
from htgrid.gahp import Clock, first_of
from htgrid.grid._config import GridManagerConfig
from htgrid.queue import JobId

if TYPE_CHECKING:
    from htgrid.grid._resource import Resource

__all__ = ["QUICK_TRIES", "Leftover", "LeftoverSweep", "Leftovers"]

log = logging.getLogger("htgrid.grid")

#: Tries with a growing pause before the removal is left to the slow sweep.
QUICK_TRIES: Final = 5
#: The job attributes a removal needs to reach its resource again (after a restart).
KEPT_ATTRS: Final = ("GridResource", "Owner", "Iwd", "ScitokensFile", "x509userproxy")


@dataclass(frozen=True, slots=True)
class Leftover:
    """One remote copy still to remove: the local job it was, and its id there."""

    job: JobId
    remote: str
    #: What of the job's ad finds its resource (KEPT_ATTRS that were set).
    ad: Mapping[str, str] = field(default_factory=dict)
    tries: int = 0
    #: When (epoch seconds) to try again.
    due: float = 0.0
    last_error: str = ""
    #: What is owed, for the log ("its sandbox <path> at <host>").
    what: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "job": f"{self.job.cluster}.{self.job.proc}",
            "remote": self.remote,
            "ad": dict(self.ad),
            "tries": self.tries,
            "due": self.due,
            "last_error": self.last_error,
            "what": self.what,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Leftover:
        cluster, _, proc = str(data["job"]).partition(".")
        ad = data.get("ad", {})
        if not isinstance(ad, dict) or not all(isinstance(v, str) for v in ad.values()):
            raise ValueError("ad is not a mapping of strings")
        return cls(
            JobId(int(cluster), int(proc)),
            str(data["remote"]),
            ad,
            int(data.get("tries", 0)),
            float(data.get("due", 0.0)),
            str(data.get("last_error", "")),
            str(data.get("what", "")),
        )


class Leftovers:
    """The removals still owed, one file each in `directory` (blocking: call in a thread)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, job: JobId) -> Path:
        return self.directory / f"{job.cluster}.{job.proc}.json"

    def keep(self, item: Leftover) -> None:
        """Record `item` durably (in place of the job's earlier record)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = json.dumps(item.to_json(), sort_keys=True).encode()
        write_atomic(self._path(item.job), data, sync=True, mode=0o600)
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)  # the rename too: a power cut must not lose the record
        finally:
            os.close(fd)

    def drop(self, job: JobId) -> None:
        """The removal of `job`'s remote copy is done (or no longer owed)."""
        self._path(job).unlink(missing_ok=True)

    def load(self) -> list[Leftover]:
        """Every removal still owed, the earliest due first."""
        items = []
        with contextlib.suppress(FileNotFoundError), os.scandir(self.directory) as entries:
            for entry in entries:
                if not entry.name.endswith(".json") or entry.name.startswith("."):
                    continue
                path = Path(entry.path)
                try:
                    items.append(Leftover.from_json(json.loads(path.read_bytes())))
                except (OSError, ValueError, KeyError, TypeError) as err:
                    log.error(
                        "%s cannot be read (%s): set aside as %s.bad; the remote copy it "
                        "names is left to its lease",
                        path,
                        err,
                        path.name,
                    )
                    with contextlib.suppress(OSError):
                        path.replace(path.with_name(f"{path.name}.bad"))
        return sorted(items, key=lambda item: item.due)


def _kept(ad: Mapping[str, Any]) -> dict[str, str]:
    """What a record keeps of the job's ad: the KEPT_ATTRS it has as strings."""
    return {name: str(ad[name]) for name in KEPT_ATTRS if isinstance(ad.get(name), str)}


#: Finds the resource a removal goes through, from the job attributes it kept (GridError
#: when there is none to be had: it is tried again later).
ResourceOf = Callable[[Mapping[str, str]], Awaitable["Resource[Any, Any]"]]
#: Whether a job is still in the local queue (its own flow then owns its remote copy).
InQueue = Callable[[JobId], Awaitable[bool]]


class LeftoverSweep:
    """Tries the removals owed until each works, durably (see the module's docstring)."""

    def __init__(
        self,
        store: Leftovers,
        clock: Clock,
        config: Callable[[], GridManagerConfig],
        resource_of: ResourceOf,
        in_queue: InQueue,
    ) -> None:
        self.store = store
        self.clock = clock
        self._config = config
        self._resource_of = resource_of
        self._in_queue = in_queue
        self._items: dict[JobId, Leftover] = {}
        self._wake = asyncio.Event()

    def owed(self) -> list[Leftover]:
        """The removals still owed, the earliest due first."""
        return sorted(self._items.values(), key=lambda item: item.due)

    async def expect(self, job: JobId, remote: str, ad: Mapping[str, Any], *, what: str) -> None:
        """`job`'s `remote` part is about to be owed (its exit is committed next): recorded
        durably, not yet tried by the sweep, so that a crash before the removal is tried
        leaves the record for the next start."""
        item = Leftover(job, remote, _kept(ad), 0, self.clock.time(), "", what)
        await asyncio.to_thread(self.store.keep, item)

    async def settled(self, job: JobId) -> None:
        """The removal of `job`'s remote copy worked in its own flow: its record dropped."""
        self._items.pop(job, None)
        await asyncio.to_thread(self.store.drop, job)

    async def owe(
        self, job: JobId, remote: str, ad: Mapping[str, Any], error: str, *, what: str
    ) -> None:
        """The first removal of `job`'s `remote` part (`what`, for the log) failed with
        `error`: keep it, durably, to try again."""
        pause = self._config().backoff(1)
        item = Leftover(job, remote, _kept(ad), 1, self.clock.time() + pause, error, what)
        await asyncio.to_thread(self.store.keep, item)
        self._items[job] = item
        self._wake.set()
        log.warning("job %s: could not remove %s: %s; tried again in %g s", job, what, error, pause)

    async def run(self) -> None:
        """Until cancelled: each removal owed tried when due, those of before a restart first."""
        for item in await asyncio.to_thread(self.store.load):
            self._items[item.job] = item
        if self._items:
            log.info("%d remote copies of finished jobs still to remove", len(self._items))
        while True:
            self._wake.clear()
            for item in self.owed():
                if item.due <= self.clock.time():
                    await self._try(item)
            due = min((item.due for item in self._items.values()), default=None)
            wait = self._config().retry_max if due is None else due - self.clock.time()
            woken = asyncio.ensure_future(self._wake.wait())
            try:
                await first_of(woken, max(0.0, wait), self.clock)
            finally:
                woken.cancel()

    async def _try(self, item: Leftover) -> None:
        if item.tries == 0 and await self._in_queue(item.job):
            # Expected but never tried, and the exit was not committed: the job's own flow
            # fetches its output and lets the copy go (a release now would lose the output).
            # The record stays until that flow settles or owes it.
            self._items.pop(item.job, None)
            return
        try:
            resource = await self._resource_of(item.ad)
            error = await resource.let_go(item.remote)
        except HTGridError as err:
            error = str(err)
        if error is None:
            # Said before the record goes: a stop right after the drop still logs it.
            log.info("job %s: removed %s, after %d failed tries", item.job, item.what, item.tries)
            await asyncio.to_thread(self.store.drop, item.job)
            self._items.pop(item.job, None)
            return
        tries = item.tries + 1
        config = self._config()
        if tries <= QUICK_TRIES:
            pause = config.backoff(tries)
            then = f"tried again in {pause:g} s"
        else:
            pause = config.retry_max
            then = f"left to the sweep, every {pause:g} s, until the remote schedd takes it"
        new = replace(item, tries=tries, due=self.clock.time() + pause, last_error=error)
        await asyncio.to_thread(self.store.keep, new)
        self._items[item.job] = new
        log.warning(
            "job %s: removing %s failed again (try %d): %s; %s",
            item.job,
            item.what,
            tries,
            error,
            then,
        )
