"""A run whose node stopped answering, as the shadow deals with it (see `_shadow_run`):
the activation's answer lost (`_in_doubt`: asked whether the node took the job), a node
cut off (`_cut`) or a schedd restarted with the job running there (`_lost`:
disconnected, 022; reconnected, 023; or given up, 024, the job back to idle), and a job
with no lease, which is not reconnected to (`_not_reconnected`). `ShadowRun` mixes
`ShadowReconnects` in."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final, NoReturn, cast

from htgrid._aio import wait_event
from htgrid.classad import ClassAd
from htgrid.queue import JobId
from htgrid.schedd._leases import NodeLink
from htgrid.schedd._shadow_base import (
    ACTIVATED,
    CUT,
    LEASE_MARGIN,
    NOT_SUPPORTED,
    GaveUp,
    NotStarted,
    ShadowHost,
    no_lease,
    reconnect_delay,
)
from htgrid.startd import (
    ClaimNotFound,
    ClaimState,
    ClaimStatus,
    StartdClient,
    StartdError,
    StartdUnavailable,
)

if TYPE_CHECKING:
    from htgrid.schedd._shadow_run import ShadowRun

__all__ = ["ShadowReconnects"]

_log = logging.getLogger("htgrid.schedd.shadow")

_RETRY: Final = 1.0
_NOT_FOUND: Final = "Job not found at execution machine"
_CLAIM_NOT_FOUND: Final = "Claim not found at execution machine"


class ShadowReconnects:
    """The run's dealings with a node that stopped answering, for `ShadowRun`."""

    m: ShadowHost
    job_id: JobId
    job: ClassAd
    client: StartdClient
    address: str
    claim_id: str
    lease: float
    vacate_time: float
    link: NodeLink | None
    lost: bool
    _watched: bool

    async def _release(self) -> None:
        raise NotImplementedError

    @property
    def _this(self) -> ShadowRun:
        """This run, as the manager's calls name it (only `ShadowRun` mixes this in)."""
        return cast("ShadowRun", self)

    async def _in_doubt(self, why: str) -> ClaimStatus:
        """The activation's answer was lost (`why`): whether the node took it is known
        once it answers, asked until the lease has surely run out there (a job with no
        lease is not waited for). The claim's status if it took it; NotStarted if not.
        The job stays idle meanwhile, this shadow's (matched nowhere else)."""
        _log.warning("job %s: its activation unanswered by %s: %s", self.job_id, self.address, why)
        wait = 0.0 if no_lease(self.job) else self.lease + self.vacate_time + LEASE_MARGIN
        deadline, attempts = self.m.now() + wait, 0
        while True:
            try:
                status = await asyncio.wait_for(
                    self.client.status(self.claim_id), self.m.settings.alive_interval
                )
            except ClaimNotFound:
                raise NotStarted("the execute node has no such claim") from None
            except (StartdError, TimeoutError) as exc:
                attempts += 1
                delay = min(reconnect_delay(attempts, self.m.settings), deadline - self.m.now())
                if delay <= 0:
                    raise NotStarted(f"the execute node does not answer ({exc})") from None
                await asyncio.sleep(delay)
                continue
            if status.job == str(self.job_id) and status.state in ACTIVATED:
                return status
            raise NotStarted(f"the execute node did not take it (claim {status.state.value})")

    async def _cut(self, why: str) -> ClaimStatus:
        """The node of another host stopped answering (`why`): a job with no lease is
        given up on at once (`_not_reconnected`), one with a lease reconnected to."""
        if no_lease(self.job):
            await self._not_reconnected(why)
        return await self._lost(why, CUT)

    async def _lost(self, why: str, reason: str) -> ClaimStatus:
        """The node of another host does not answer (`why`), or the schedd restarted:
        the job may run on there. Disconnected (022, HTCondor's `reason`) until the node
        answers within the lease: reconnected (023), the claim's status returned. The
        run is given up on (024, the job back to idle: `GaveUp`) once the node says the
        job or its claim is gone, or the lease has surely run out there. The attempts
        back off as HTCondor's shadow's do (RECONNECT_BACKOFF_FACTOR, _CEILING), never
        past the lease."""
        self.lost, self._watched = True, False
        try:
            return await self._reconnect(why, reason)
        finally:
            self.lost = False

    async def _reconnect(self, why: str, reason: str) -> ClaimStatus:
        deadline = self.m.now() + self.lease + self.vacate_time + LEASE_MARGIN
        await self.m.disconnected(self._this, why, reason, deadline)
        link, wait, attempts = self.link, self.m.settings.alive_interval, 0
        while True:
            left = deadline - self.m.now()
            if left <= 0:
                await self._give_up(
                    f"Job disconnected too long: JobLeaseDuration ({self.lease:g} seconds) expired"
                )
            if link is not None and not link.up.is_set():
                await wait_event(link.up, left)  # its keep-alives are answered again
                continue
            try:
                status = await asyncio.wait_for(self.client.status(self.claim_id), wait)
            except ClaimNotFound:
                await self._give_up(_CLAIM_NOT_FOUND)
            except (StartdError, TimeoutError) as exc:
                # An attempt that does not reach the node backs off; one it answers (its
                # claim being ended, say) is made again shortly.
                unreached = isinstance(exc, StartdUnavailable | TimeoutError)
                attempts += 1 if unreached else 0
                backoff = reconnect_delay(attempts, self.m.settings) if unreached else _RETRY
                delay = max(0.0, min(backoff, deadline - self.m.now()))
                _log.info(
                    "job %s: no reconnection to %s yet (%s): next attempt in %.0f s",
                    self.job_id,
                    self.address,
                    exc,
                    delay,
                )
                if link is None:
                    await asyncio.sleep(delay)
                else:  # its keep-alives go unanswered meanwhile: they tell when it is back
                    await wait_event(link.down, delay)
                continue
            if status.state is ClaimState.RELEASED:
                await self._give_up(_CLAIM_NOT_FOUND)
            if status.state is ClaimState.CLAIMED or (
                status.job is not None and status.job != str(self.job_id)
            ):  # never activated for this job (the claim's last job's end, perhaps)
                await self._release()
                await self._give_up(_NOT_FOUND)
            await self.m.reconnected(self._this)
            return status

    async def _not_reconnected(self, why: str) -> NoReturn:
        """A job with no lease lost its node (`why`): as HTCondor's shadow, which supports
        no reconnection for it, the run is given up at once (024, no 022) and the job goes
        back to idle. Its keep-alives stop, so the node, if it runs it still, ends it by
        itself; releasing the claim is tried once first (a node that does not answer
        keeps its record: the schedd's next start asks again)."""
        _log.warning(
            "job %s: lost %s (%s); it has no lease (JobLeaseDuration): not reconnected "
            "to, back to idle",
            self.job_id,
            self.address,
            why,
        )
        self.m.drop_lease(self._this)
        await self._release()
        await self.m.gave_up(self._this, NOT_SUPPORTED, forget=False)
        raise GaveUp(NOT_SUPPORTED)

    async def _give_up(self, reason: str) -> NoReturn:
        _log.warning("job %s: reconnection to %s failed: %s", self.job_id, self.address, reason)
        await self.m.gave_up(self._this, reason)
        raise GaveUp(reason)
