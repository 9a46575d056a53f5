"""What a shadow records in the queue (see `_shadow_run`): a job's start, once the node
took its activation (the 001 then, never for a job the node refused); when its run ends,
the exit with the run's usage (then the job's policy completes, requeues or holds it), a
stop before the end (back to idle, or held or removed as asked), an eviction, or a hold.
`ShadowRun` mixes `ShadowRecords` in."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from copy import copy
from typing import TYPE_CHECKING, Any, cast

from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import HTGridError
from htgrid.negotiator import Updates, apply_updates
from htgrid.queue import (
    HoldReasonCode,
    InvalidTransition,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
)
from htgrid.schedd._claims import started_on
from htgrid.schedd._local import SCHEDD
from htgrid.schedd._shadow_base import (
    RUNNING,
    NotStarted,
    ShadowHost,
    StopReason,
    after_stop,
    vacate_time,
)
from htgrid.schedd._shadow_files import remove_tree
from htgrid.startd import Outcome

if TYPE_CHECKING:
    from htgrid.schedd._shadow_run import ShadowRun

__all__ = ["ShadowRecords"]

_log = logging.getLogger("htgrid.schedd.shadow")


class ShadowRecords:
    """The queue writes of a run's end, for `ShadowRun`, which holds what they read."""

    m: ShadowHost
    job_id: JobId
    stop_reason: StopReason | None
    _sent: dict[str, Any]  # the current job's BytesSent, once its input went
    _spooled: bool  # whether the current job may have an evicted run's output
    _idle: list[ClassAd] | None  # idle jobs that may follow, read with the last exit
    start_attrs: dict[str, Any]  # what the start of the current job records
    start_seq: int  # the change that started the current job
    address: str  # the node's
    claim_id: str
    renewed: int  # the job's LastJobLeaseRenewal, as last recorded
    vacate_time: float

    async def _prepare(
        self, slot: str, updates: Updates, expanded: Updates, read: ClassAd | None = None
    ) -> ClassAd | None:
        """The job's ad to activate the claim with (as it runs: where, Running), or None
        if it is no longer idle. Its start is recorded once the node took it.

        `read`: the job as a read of its idle jobs found it, which the change feed has
        not touched since (`ShadowManager.next_job`'s): no queue call for it. The start's
        write checks again that it is idle: one held or removed meanwhile is not
        recorded as started, and its claim's release stops it on the node."""
        jid = self.job_id
        attrs: dict[str, Any] = {name: ExprTree(text) for name, text in updates}
        self.renewed = int(self.m.now())  # the claim was just granted or readied
        attrs.update(started_on(slot, self.address, self.claim_id, self.renewed))
        self.start_attrs = attrs

        def get(q: JobQueue) -> ClassAd | None:
            try:
                ad = q.get(jid)
            except JobNotFound:
                return None
            return ad if ad["JobStatus"] == JobStatus.IDLE else None

        found = read if read is not None else await self.m.read(get)
        if found is None:
            return None
        ad = copy(found)  # the queue's stays as committed
        ad.update(attrs)
        ad.update(JobStatus=int(JobStatus.RUNNING), JobCurrentStartDate=self.renewed)
        self.vacate_time = vacate_time(ad)
        return apply_updates(ad, expanded)

    async def _record_start(self) -> None:
        """The node took the job's activation: record its start (Running, 001, where it
        runs: `start_attrs`). NotStarted when it was held or removed meanwhile (the
        claim's release then stops it on the node)."""
        jid, attrs = self.job_id, self.start_attrs

        def start(q: JobQueue) -> int | None:
            try:
                q.job_started(jid, attrs)  # one transaction
            except (InvalidTransition, JobNotFound):
                return None
            return q.last_seq  # one writer: job_started's change

        seq = await self.m.write(start)
        if seq is None:
            raise NotStarted("held or removed as it was activated")
        self.start_seq = seq  # the changes after it are about this run
        _log.info("job %s started on %s", jid, attrs.get("RemoteHost"))

    def _usage(self, ad: ClassAd, outcome: Outcome, received: int) -> dict[str, Any]:
        def num(name: str) -> float:
            value = ad.get(name, 0)
            return float(value) if isinstance(value, int | float) else 0.0

        usage: dict[str, Any] = {
            "RemoteUserCpu": outcome.user_cpu,
            "RemoteSysCpu": outcome.sys_cpu,
            "CumulativeRemoteUserCpu": num("CumulativeRemoteUserCpu") + outcome.user_cpu,
            "CumulativeRemoteSysCpu": num("CumulativeRemoteSysCpu") + outcome.sys_cpu,
            "RemoteWallClockTime": num("RemoteWallClockTime") + max(0.0, outcome.wall),
            "BytesRecvd": received,
            **self._sent,
        }
        if outcome.disk_kb:
            usage["DiskUsage"] = max(outcome.disk_kb, 1)
        return usage

    async def _record_exit(
        self, usage: Mapping[str, Any], outcome: Outcome, *, scan: bool = False
    ) -> None:
        """Record the exit; with `scan`, read the idle jobs that may follow on the claim
        in the same call on the queue thread (`_idle`)."""
        jid = self.job_id
        idle = self.m.idle_scan(cast("ShadowRun", self)) if scan else None  # it is one

        def record(q: JobQueue) -> str:
            by_signal = outcome.signal is not None
            code = outcome.signal if by_signal else outcome.exit_code
            try:  # the usage with the exit, in its transaction: one commit
                return q.job_exited(jid, code or 0, by_signal=by_signal, usage=usage).value
            except InvalidTransition:  # held or removed as it ended: that stands
                with contextlib.suppress(InvalidTransition, JobNotFound):
                    q.update(jid, usage)
                return after_stop(q, jid)
            except JobNotFound:
                return "gone from the queue"

        def record_and_scan(q: JobQueue) -> tuple[str, list[ClassAd] | None]:
            return record(q), ([] if idle is None else idle(q))

        result, self._idle = await self.m.write(record_and_scan)
        if self._spooled:
            await asyncio.to_thread(remove_tree, self.m.settings.spooled(jid))
        by_signal = outcome.signal is not None
        how, code = ("signal", outcome.signal) if by_signal else ("exit", outcome.exit_code)
        _log.info("job %s ended (%s %s): %s", jid, how, code, result)

    async def _record_stop(self, usage: Mapping[str, Any], why: str, code: int = 0) -> None:
        """The run stopped before the job ended: back to idle (`why` its VacateReason,
        `code` its VacateReasonCode), or held/removed as asked."""
        jid, reason = self.job_id, self.stop_reason

        def record(q: JobQueue) -> str:
            try:
                q.update(jid, usage)
                status = JobStatus(q.get(jid)["JobStatus"])
                if status in RUNNING:
                    q.job_evicted(jid, why, code)
                    return "back to idle"
                return after_stop(q, jid)
            except (InvalidTransition, JobNotFound):
                return "gone from the queue"

        result = await self.m.write(record)
        if reason is StopReason.REMOVE:
            await asyncio.to_thread(remove_tree, self.m.settings.spooled(jid))
        _log.info("job %s stopped (%s): %s", jid, reason.value if reason else "evicted", result)

    async def _record_evicted(self, why: str) -> None:
        _log.warning("job %s: %s", self.job_id, why)
        with contextlib.suppress(HTGridError):
            await self._record_stop(self._sent, why)

    async def _hold(self, reason: str, code: HoldReasonCode, subcode: int) -> bool:
        """Hold the job (a removed one leaves the queue); whether this held it."""
        jid, sent = self.job_id, self._sent
        _log.warning("job %s held: %s", jid, reason)

        def hold(q: JobQueue) -> bool:
            held = False
            with contextlib.suppress(InvalidTransition, JobNotFound):
                if sent:
                    q.update(jid, sent)
                held = bool(q.act(JobAction.Hold, jid, SCHEDD, reason, code=code, subcode=subcode))
            with contextlib.suppress(InvalidTransition, JobNotFound):
                after_stop(q, jid)
            return held

        return bool(await self.m.write(hold))
