"""A running job suspended and continued by its node's policy (SUSPEND, CONTINUE), as the
shadow records it: JobStatus Suspended (7) with TotalSuspensions and LastSuspensionTime
when the node stops the job, Running again with CumulativeSuspensionTime when it
continues it; the user log then has 010 and 011 (`_userlog_events`). The claim's status
counts the suspensions of its job (`ClaimStatus.suspensions`): one the shadow's polls
did not see (suspended and continued between two) is recorded all the same.
`ShadowRun` mixes `ShadowSuspensions` in."""

from __future__ import annotations

import contextlib
import logging
from typing import Final

from htgrid.classad import ClassAd
from htgrid.queue import InvalidTransition, JobId, JobNotFound, JobQueue, JobStatus
from htgrid.schedd._shadow_base import ShadowHost
from htgrid.startd import ClaimState, ClaimStatus, OutcomeKind

__all__ = ["ShadowSuspensions"]

_log = logging.getLogger("htgrid.schedd.shadow")

#: The claim's states in which its job runs again after a suspension.
_RUNS: Final = frozenset({ClaimState.RUNNING, ClaimState.RETIRING})


class ShadowSuspensions:
    """The queue writes of a job's suspensions, for `ShadowRun`."""

    m: ShadowHost
    job_id: JobId
    # The suspensions of the claim's job recorded (None: take the next status's count as
    # recorded, a run reconnected to), and whether the job is recorded as suspended.
    _seen_suspensions: int | None = 0
    _suspended: bool = False

    def _suspensions_from(self, ad: ClassAd, *, fresh: bool) -> None:
        """Follow the suspensions of the job of `ad` from now: a `fresh` activation has
        had none; a run reconnected to has those its queue record shows."""
        self._seen_suspensions = 0 if fresh else None
        self._suspended = ad.get("JobStatus") == int(JobStatus.SUSPENDED)

    async def _record_suspensions(self, status: ClaimStatus) -> None:
        """Record what `status` tells of the job's suspensions that is not recorded yet."""
        if self._seen_suspensions is None:
            self._seen_suspensions = status.suspensions
        while self._seen_suspensions < status.suspensions:
            if self._suspended:  # continued, and suspended again, between two polls
                await self._write_suspension(False)
            await self._write_suspension(True)
            self._seen_suspensions += 1
        if self._suspended and self._resumed(status):
            await self._write_suspension(False)

    @staticmethod
    def _resumed(status: ClaimStatus) -> bool:
        """Whether the job runs again (a job vacated stays Suspended until it is
        evicted; one that exited ran again first)."""
        if status.state in _RUNS:
            return True
        outcome = status.outcome
        return (
            status.state is ClaimState.ENDED
            and outcome is not None
            and outcome.kind is OutcomeKind.EXITED
        )

    async def _write_suspension(self, suspended: bool) -> None:
        jid, now = self.job_id, int(self.m.now())

        def write(q: JobQueue) -> None:
            with contextlib.suppress(InvalidTransition, JobNotFound):  # held, removed
                ad = q.get(jid)
                if suspended:
                    total = ad.get("TotalSuspensions", 0)
                    q.update(
                        jid,
                        {
                            "JobStatus": int(JobStatus.SUSPENDED),
                            "TotalSuspensions": (total if type(total) is int else 0) + 1,
                            "LastSuspensionTime": now,
                        },
                    )
                    return
                last = ad.get("LastSuspensionTime", 0)
                before = ad.get("CumulativeSuspensionTime", 0)
                spent = now - last if type(last) is int and last > 0 else 0
                q.update(
                    jid,
                    {
                        "JobStatus": int(JobStatus.RUNNING),
                        "CumulativeSuspensionTime": (before if type(before) is int else 0)
                        + max(0, spent),
                        "LastSuspensionTime": 0,
                    },
                )

        await self.m.write(write)
        self._suspended = suspended
        _log.info("job %s %s on its node", jid, "suspended" if suspended else "continued")
