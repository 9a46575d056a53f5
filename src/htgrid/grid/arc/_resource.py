"""The ARC CE resource (one per `arc <url>` and credential): pinged with ARC_PING, polled
with ONE ARC_JOB_STATUS_ALL per poll interval for all its jobs (HTCondor's
ArcResource::DoBatchStatus), answered by ARC job id.

A job the CE's list no longer shows is told so; the CE's own lag (states change only
when its information provider runs, about once a minute) is no failure: a job stays
ACCEPTED as long as the CE says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from htgrid.gahp import GahpError
from htgrid.gahp.commands import arc
from htgrid.grid._errors import GahpUnavailable
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._resource import Resource
from htgrid.grid._task import Services
from htgrid.grid.arc._ids import ArcResourceName

if TYPE_CHECKING:
    from htgrid.grid.arc._job import ArcJob

__all__ = ["ArcResource", "ArcStatus"]


@dataclass(frozen=True, slots=True)
class ArcStatus:
    """What one ARC_JOB_STATUS_ALL said about one job (`state` None: not listed)."""

    state: str | None
    #: Which poll it came from (ArcResource.poll_seq when the list was sent).
    seq: int
    when: float


class ArcResource(Resource["ArcJob", ArcResourceName]):
    """An ARC CE's REST interface, through the ARC GAHP."""

    def __init__(self, where: ArcResourceName, gahp: GahpHandle, services: Services) -> None:
        super().__init__(where, gahp, services)
        self.url = where.url
        #: Numbers the polls: a job trusts only an answer to a list sent after it asked.
        self.poll_seq = 0
        #: The last list's states by ARC job id (CHECK looks among them for its job).
        self.last_states: dict[str, str] = {}

    def next_seq(self) -> int:
        return self.poll_seq + 1

    async def ping(self) -> str | None:
        answer = await self.ask(arc.Answer.of, arc.PING, self.url)
        return None if answer.ok else f"ARC_PING failed: {answer.error}"

    async def poll(self, jobs: list[ArcJob]) -> None:
        self.poll_seq += 1
        seq = self.poll_seq
        self.stats.status_commands += 1
        try:
            answer = await self.ask(arc.StatusAll.of, arc.JOB_STATUS_ALL, self.url, "NULL")
        except (GahpError, GahpUnavailable) as err:
            self.poll_failed(str(err))
            return
        if not answer.answer.ok:
            self.poll_failed(answer.answer.error)
            return
        self.last_states = answer.states
        now = self.clock.time()
        for job in jobs:
            job.arc_status(ArcStatus(answer.states.get(job.arc_id or ""), seq, now))
