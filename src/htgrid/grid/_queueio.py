"""The job queue, reached from the event loop: every JobQueue call runs in one worker thread.

One thread because SQLite has one writer anyway and JobQueue serialises its calls; the
event loop never blocks on a commit. The grid manager acts as the schedd's own component
(`update`, `job_started`, `job_exited`, `destroy`) and, for holds, as a queue super user.

Two connections, one of them synced: only the writes nothing else could rebuild must be
on disk before the caller goes on (`durable=True`: the submission tag, committed before
the remote submit, and its clearing). Everything else (batch job ids, statuses, exits) is
recovered from the batch system should a power cut take the last commits; a kill -9 loses
none of them either way (SQLite's WAL).

Updates are group-committed: those waiting while the thread is busy go in one transaction
(a job's refusal is its own). Durable ones are then written again, the last of them,
through the synced connection, whose fsync of the write-ahead log makes every earlier
frame in it durable too. One transaction and one fsync per batch, not per job: that is
what lets 2,000 submits go as fast as the batch system takes them.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from htgrid.classad import ClassAd, ExprTree
from htgrid.queue import (
    Change,
    ExitOutcome,
    HoldReasonCode,
    Identity,
    InvalidTransition,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    QueueError,
    StoreError,
)

__all__ = ["GRIDMANAGER", "UNDEFINED", "QueueIO"]

_T = TypeVar("_T")
_Waiting = tuple[JobId, Mapping[str, Any], "asyncio.Future[None]"]

#: Who the grid manager acts as when it holds or removes jobs.
GRIDMANAGER = Identity("condor_gridmanager", admin=True)
#: The value that unsets an attribute, as HTCondor's AssignExpr(attr, "Undefined").
UNDEFINED = ExprTree("undefined")


class QueueIO:
    """Async access to one JobQueue."""

    def __init__(self, queue: JobQueue, durable: JobQueue | None = None) -> None:
        self.queue = queue
        self.durable = durable or queue
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="htgrid-queue")
        self._synced: list[_Waiting] = []  # durable updates waiting for the thread
        self._plain: list[_Waiting] = []  # the others
        self._flusher: asyncio.Task[None] | None = None
        self.writes = 0
        self.syncs = 0
        self.transactions = 0  # of grouped updates

    async def _run(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(fn, *args, **kwargs))

    async def close(self) -> None:
        """Close the queue (after the calls already queued) and stop the thread."""
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self._run(self.queue.close)
        if self.durable is not self.queue:
            await self._run(self.durable.close)
        self._thread.shutdown(wait=True)

    # ---- reading --------------------------------------------------------------------------

    async def query(
        self, constraint: str, projection: Sequence[str] | None = None
    ) -> list[ClassAd]:
        return await self._run(self.queue.query, constraint, projection)

    async def get(self, job_id: JobId) -> ClassAd:
        """The job's ad; JobNotFound once it left the queue."""
        return await self._run(self.queue.get, job_id)

    async def get_many(self, job_ids: Sequence[JobId]) -> dict[JobId, ClassAd]:
        """The ads of those of `job_ids` still in the queue, read together."""
        return await self._run(self.queue.get_many, job_ids)

    async def changes_since(self, seq: int, limit: int) -> list[Change]:
        return await self._run(self.queue.changes_since, seq, limit=limit)

    async def last_seq(self) -> int:
        return await self._run(lambda: self.queue.last_seq)

    # ---- writing ---------------------------------------------------------------------------

    async def update(
        self, job_id: JobId, attrs: Mapping[str, Any], *, durable: bool = False
    ) -> None:
        """Set attributes (none: nothing to write, no transaction); `durable`: on disk when
        this returns, even through a power cut."""
        if not attrs:
            return
        self.writes += 1
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        synced = durable and self.durable is not self.queue
        (self._synced if synced else self._plain).append((job_id, attrs, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        await future

    async def _flush(self) -> None:
        """The updates waiting, a transaction for all of them, until none is left."""
        while self._plain or self._synced:
            plain, self._plain = self._plain, []
            synced, self._synced = self._synced, []
            await self._settle(plain, self.queue.update_many)
            await self._settle(synced, self._write_synced)

    async def _settle(
        self,
        batch: list[_Waiting],
        write: Callable[[list[tuple[JobId, Mapping[str, Any]]]], Sequence[Exception | None]],
    ) -> None:
        if not batch:
            return
        self.transactions += 1
        errors: Sequence[Exception | None]
        try:
            errors = await self._run(write, [(job_id, attrs) for job_id, attrs, _ in batch])
        except Exception as err:  # the transaction failed: everyone's write did
            errors = [err] * len(batch)
        for (_, _, future), error in zip(batch, errors, strict=True):
            if future.done():  # its caller went away
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def _write_synced(self, batch: list[tuple[JobId, Mapping[str, Any]]]) -> list[Exception | None]:
        """(In the queue thread) the batch's updates, then one synced commit for them all."""
        self.syncs += 1
        errors: list[Exception | None] = list(self.queue.update_many(batch))
        done = [update for update, error in zip(batch, errors, strict=True) if error is None]
        for job_id, attrs in reversed(done):
            try:
                self.durable.update(job_id, attrs)  # the same values, through the fsync
            except (QueueError, JobNotFound):
                continue  # that job just left; sync through another
            return errors
        if not done:
            return errors
        failure = StoreError("the job queue could not sync a commit to disk")
        return [failure if error is None else error for error in errors]

    async def started(self, job_id: JobId, attrs: Mapping[str, Any] | None = None) -> None:
        """Idle -> Running (001), `attrs` set in the same transaction."""
        self.writes += 1
        await self._run(self.queue.job_started, job_id, attrs)

    async def evicted(self, job_id: JobId, attrs: Mapping[str, Any] | None = None) -> None:
        """Running -> Idle (004), `attrs` set in the same transaction."""
        self.writes += 1
        await self._run(self.queue.job_evicted, job_id, attrs=attrs)

    async def exited(self, job_id: JobId, code: int, *, by_signal: bool) -> ExitOutcome:
        self.writes += 1
        return await self._run(self.queue.job_exited, job_id, code, by_signal=by_signal)

    async def hold(self, job_id: JobId, reason: str, code: HoldReasonCode, subcode: int) -> bool:
        """Hold the job; False when its status does not allow it (already held, removed)."""
        self.writes += 1
        try:
            done = await self._run(
                self.queue.act,
                JobAction.Hold,
                job_id,
                GRIDMANAGER,
                reason,
                code=code,
                subcode=subcode,
            )
        except InvalidTransition:
            return False
        return bool(done)

    async def remove(self, job_id: JobId, reason: str) -> bool:
        """Remove the job (a Nonessential job's hold); False if it was already removed."""
        self.writes += 1
        try:
            done = await self._run(self.queue.act, JobAction.Remove, job_id, GRIDMANAGER, reason)
        except InvalidTransition:
            return False
        return bool(done)

    async def destroy(self, job_id: JobId) -> bool:
        """Let a removed or completed job leave the queue; whether it left."""
        self.writes += 1
        return await self._run(self.queue.destroy, job_id)
