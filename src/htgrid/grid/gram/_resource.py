"""The GRAM resource (one per `gt2|gt5 <contact>` and proxy): pinged with GRAM_PING; its
jobs polled with one GRAM_JOB_STATUS each per poll interval (GRAM has no bulk status).

GRAM_VERSION_DETECTION (on by default, as in HTCondor): a gt2 resource asks the job
manager's version once (GRAM_GET_JOBMANAGER_VERSION) and, when it is GRAM5's, runs its
jobs as gt5 does (stdout and stderr staged out by the job manager, not streamed). A gt5
resource is GRAM5 without asking.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from htgrid.gahp import GahpError
from htgrid.gahp.commands import gram
from htgrid.grid._errors import GahpUnavailable
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._resource import Resource
from htgrid.grid._task import Services
from htgrid.grid.gram._ids import GramResourceName

if TYPE_CHECKING:
    from htgrid.grid.gram._job import GramJob

__all__ = ["GramResource", "GramStatus"]

log = logging.getLogger("htgrid.grid")


@dataclass(frozen=True, slots=True)
class GramStatus:
    """What one GRAM_JOB_STATUS said about one job."""

    answer: gram.JobState
    when: float


class GramResource(Resource["GramJob", GramResourceName]):
    """A GRAM job manager, through the gt GAHP."""

    def __init__(
        self,
        where: GramResourceName,
        gahp: GahpHandle,
        services: Services,
        *,
        version_detection: bool = True,
    ) -> None:
        super().__init__(where, gahp, services)
        self.contact = where.contact
        #: Whether the job manager is GRAM5's (gt5; gt2 once detected).
        self.gram5 = where.kind == "gt5"
        self._detect = version_detection and where.kind == "gt2"

    async def ping(self) -> str | None:
        answer = await self.ask(gram.Code.of, gram.PING, self.contact)
        if not answer.ok:
            return f"GRAM_PING failed: {gram.error_text(answer.code)}"
        if self._detect:
            version = await self.ask(gram.Version.of, gram.GET_JOBMANAGER_VERSION, self.contact)
            self._detect = False
            self.gram5 = version.gram5
            log.info(
                "%s: the job manager is %s (%s)",
                self.name,
                "GRAM5" if self.gram5 else "GRAM2",
                " ".join(f"{k}={v}" for k, v in version.extensions.items()) or "no version",
            )
        return None

    async def gass_url(self) -> str:
        """The GAHP's GASS server's URL; GahpUnavailable if it has none. Asked at each
        submit and proxy renewal: the GAHP server restarts the GASS server when the proxy
        changed, keeping its URL."""
        fields = await self.call(gram.GASS_SERVER_INIT, "0")
        if len(fields) < 2 or fields[0] != "0" or not fields[1].startswith("https://"):
            raise GahpUnavailable(f"GASS_SERVER_INIT failed: {' '.join(fields)}")
        return fields[1]

    async def poll(self, jobs: list[GramJob]) -> None:
        self.stats.status_commands += 1

        async def one(job: GramJob) -> None:
            if job.contact is None:
                return
            try:
                answer = await self.ask(gram.JobState.of, gram.JOB_STATUS, job.contact)
            except (GahpError, GahpUnavailable) as err:
                self.poll_failed(str(err))
                return
            if answer.code in gram.TRANSIENT:
                self.poll_failed(f"GRAM_JOB_STATUS failed: {gram.error_text(answer.code)}")
                return
            job.gram_status(GramStatus(answer, self.clock.time()))

        await asyncio.gather(*(one(job) for job in jobs))
