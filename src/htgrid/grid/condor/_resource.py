"""The condor resource: one remote schedd (`condor <schedd> <pool>`) and its GAHP server.

What HTCondor's CondorResource does:

* ping: `CONDOR_JOB_STATUS_CONSTRAINED <schedd> False`; the schedd counts as down only
  when the GAHP could not reach or locate it (an authorization failure is the jobs'
  business: their submits fail and they are held with the schedd's words).
* status: ONE `CONDOR_JOB_STATUS_CONSTRAINED <schedd> (SubmitterId =?= "<ours>")` per poll
  interval for all of this grid manager's jobs there. A job missing from a successful
  answer is asked about on its own (it may have vanished). The answer carries whole job
  ads (2.5 KiB for a small job, more with a big environment) on one GAHP line: HTCondor's
  grid manager reads 500 KiB, enough for ~200 jobs; htgrid's starts its condor GAHP with
  `--max-line` = GridManagerConfig.gahp_max_line (64 MiB), so one request answers for
  `STATUS_CHUNK` jobs. More jobs than that, or an answer still too long, and the question
  goes in chunks by remote ClusterId range, asked again in halves when too long (and
  when it was a full chunk, later chunks are half as big).
* requests in flight: up to the GAHP's accept limit (`MAX_PENDING`), not
  GRIDMANAGER_MAX_PENDING_REQUESTS: the GAHP coalesces what waits into remote batches.
* leases: ONE `CONDOR_JOB_UPDATE_LEASE` per renewal for every job there: one shared
  expiration, now + the shortest JobLeaseDuration, sent once a third of that duration
  passed since the oldest lease a job holds was set (at its submit or the last renewal):
  jobs just submitted carry a fresh lease and cost the remote schedd nothing more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from htgrid.classad import ClassAd
from htgrid.gahp import GahpError, GahpRequestRefused
from htgrid.gahp.commands import Spec, condor
from htgrid.grid._errors import NO_ANSWER, GahpUnavailable, GridError
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._resource import Resource
from htgrid.grid._task import Services
from htgrid.grid.condor._ad import RemoteJob, submitter_id
from htgrid.grid.condor._ids import CondorJobId, CondorResourceName

if TYPE_CHECKING:
    from htgrid.grid.condor._job import CondorJob

__all__ = ["MAX_PENDING", "STATUS_CHUNK", "CondorResource", "RemoteCallFailed", "is_down_error"]

log = logging.getLogger("htgrid.grid")

#: Requests in flight to the condor GAHP: its --accept-limit. The GAHP bounds its own work
#: (one remote cluster per batch of waiting submits, one upload per batch of stage-ins, at
#: most two batches out per schedd and kind); holding requests back here at
#: GRIDMANAGER_MAX_PENDING_REQUESTS (50) cut every batch to 50 jobs and made each wait for
#: the grid manager to take the previous one's answers: 1,000 jobs were staged in on the
#: remote schedd after ~13 s instead of ~9 s (bench/htcondor_c.py).
MAX_PENDING = 1000
#: Most jobs asked about in one status request at first (see the module's docstring):
#: 10,000 ads of ~2.5 KiB fit the 64 MiB line htgrid's grid manager reads.
STATUS_CHUNK = 10_000
#: Status ads read in one step (~5 ms of the event loop).
_READ_PART = 50
# The condor GAHP writes ServerTime (the answer's time) last in each status ad: the text
# before it is the job's, to be read again only when it changed.
_SERVER_TIME_LAST = re.compile(r";\s*ServerTime\s*=\s*(\d+)\s*\]\s*")
_A = TypeVar("_A", bound="_Answer")


class _Answer(Protocol):
    """A condor GAHP result (htgrid.gahp.commands.condor): its error, None after an S."""

    @property
    def error(self) -> str | None: ...


def is_down_error(text: str) -> bool:
    """Whether a GAHP error says the remote schedd could not be reached."""
    return condor.DOWN.search(text) is not None


class RemoteCallFailed(GridError):
    """A condor GAHP command failed; `down` when the schedd could not be reached."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text
        self.down = is_down_error(text)


class CondorResource(Resource["CondorJob", CondorResourceName]):
    """One remote schedd, reached through its own condor GAHP server."""

    def __init__(self, where: CondorResourceName, gahp: GahpHandle, services: Services) -> None:
        super().__init__(where, gahp, services, max_pending=MAX_PENDING)
        self.schedd = where.schedd
        self.pool = where.pool
        self.submitter = submitter_id(services.home)
        self.lease_updates = 0
        #: Most jobs asked about in one status request (halved when an answer is too long).
        self.status_chunk = STATUS_CHUNK
        #: Status ads read, by a digest of their text before ServerTime: those of the last
        #: poll (a job that did not change since is not read again: ~0.2 ms an ad).
        self._known: dict[bytes, RemoteJob] = {}
        self._seen: dict[bytes, RemoteJob] = {}
        #: Status ads taken from `_known` instead of being read again.
        self.status_ads_reused = 0

    def start(self) -> None:
        super().start()
        self._tasks.append(self._spawn_lease_loop())

    def _spawn_lease_loop(self) -> asyncio.Task[None]:
        return asyncio.create_task(self._lease_loop(), name=f"leases {self.name}")

    # ---- requests --------------------------------------------------------------------------

    async def command(
        self, result: Callable[[Sequence[str]], _A], command: Spec, *args: str, later: bool = False
    ) -> _A:
        """A condor GAHP command to this schedd, its result read by `result`;
        RemoteCallFailed when it failed. A `later` one (a submit: new work) waits behind
        the others queued."""
        try:
            answer = await self.ask(result, command, self.schedd, *args, later=later)
        except GahpRequestRefused as err:
            raise RemoteCallFailed(str(err)) from err
        if answer.error is not None:
            raise RemoteCallFailed(answer.error or f"{command.name} failed with no reason given")
        return answer

    async def let_go(self, remote: str) -> str | None:
        """CONDOR_JOB_UPDATE LeaveJobInQueue = false: the remote copy, its output fetched,
        may leave the remote queue (whose spool sweep then removes its sandbox)."""
        update = ClassAd()
        update["LeaveJobInQueue"] = False
        try:
            await self.command(condor.Done.of, condor.UPDATE, remote, repr(update))
        except RemoteCallFailed as err:
            return None if condor.ALREADY.search(err.text) else err.text
        except NO_ANSWER as err:
            return str(err) or type(err).__name__
        return None

    async def query(self, constraint: str) -> list[RemoteJob]:
        """The remote jobs matching `constraint` (RemoteCallFailed, GAHP errors)."""
        texts = (await self.command(condor.Statuses.of, condor.STATUS, constraint)).ads
        now = self.clock.time()
        found: list[RemoteJob] = []
        # A thousand ads are read a part at a loop turn: the GAHP's pipes wait meanwhile.
        for start in range(0, len(texts), _READ_PART):
            read = functools.partial(self._read, texts[start : start + _READ_PART], now)
            found += await self.services.turns.run(read)
        return found

    def _read(self, texts: Sequence[str], now: float) -> list[RemoteJob]:
        found: list[RemoteJob] = []
        known, seen = self._known, self._seen
        for text in texts:
            last = _SERVER_TIME_LAST.fullmatch(text, max(text.rfind(";"), 0))
            key = _digest(text, last.start()) if last else None
            job = known.get(key) if key is not None else None
            if job is not None and last is not None:
                job = dataclasses.replace(job, server_time=float(last.group(1)))
                self.status_ads_reused += 1
            else:
                try:
                    job = RemoteJob.from_text(text, now)
                except ValueError as err:
                    log.warning("resource %s: %s", self.name, err)
                    continue
            if key is not None:
                seen[key] = job
            found.append(job)
        return found

    def constraint(self) -> str:
        return f'(SubmitterId =?= "{_quote(self.submitter)}")'

    # ---- the type's part -------------------------------------------------------------------

    async def ping(self) -> str | None:
        try:
            await self.command(condor.Statuses.of, condor.STATUS, "False")
        except RemoteCallFailed as err:
            return err.text if err.down else None
        return None

    async def poll(self, jobs: list[CondorJob]) -> None:
        by_id = {job.remote_id.remote: job for job in jobs if job.remote_id is not None}
        if not by_id:
            return
        pending = _chunks(sorted(by_id.values(), key=_cluster_of), self.status_chunk)
        try:
            await self._poll_chunks(pending, by_id)
        finally:
            # What this poll read is what the next one may find unchanged; older texts go.
            self._known, self._seen = self._seen, {}

    async def _poll_chunks(
        self, pending: list[Sequence[CondorJob]], by_id: dict[str, CondorJob]
    ) -> None:
        while pending:
            chunk = pending.pop(0)
            # The range always: jobs not polled now (still staging in, say) stay out.
            low, high = _cluster_of(chunk[0]), _cluster_of(chunk[-1])
            constraint = f"{self.constraint()} && ClusterId >= {low} && ClusterId <= {high}"
            self.stats.status_commands += 1
            try:
                answer = await self.query(constraint)
            except (RemoteCallFailed, GahpError, GahpUnavailable) as err:
                if condor.TOO_LONG.search(str(err)) and len(chunk) > 1:
                    half = (len(chunk) + 1) // 2
                    if len(chunk) >= self.status_chunk:  # a full chunk: smaller ones, for good
                        self.status_chunk = half
                    log.info(
                        "resource %s: the status of %d jobs is too long for one answer "
                        "(%s); asking again in halves of %d",
                        self.name,
                        len(chunk),
                        err,
                        half,
                    )
                    pending[:0] = _chunks(chunk, half)
                    continue
                self.poll_failed(str(err))
                return
            self._answered(chunk, by_id, answer)

    def _answered(
        self, chunk: Sequence[CondorJob], by_id: dict[str, CondorJob], answer: list[RemoteJob]
    ) -> None:
        seen: set[str] = set()
        for status in answer:
            job = by_id.get(status.job_id)
            if job is not None:
                seen.add(status.job_id)
                job.remote_status(status)
        for job in chunk:
            assert job.remote_id is not None
            if job.remote_id.remote not in seen:
                job.remote_missing()

    # ---- leases ----------------------------------------------------------------------------

    def _leased(self) -> list[CondorJob]:
        return [job for job in self.jobs.values() if job.remote_id is not None]

    def _check_interval(self) -> float:
        # Looked at every poll interval (cheap: no request unless a renewal is due), more
        # often for short leases.
        leases = [job.lease for job in self._leased()]
        shortest = min(leases) if leases else 600
        return max(1.0, min(self.config.poll_interval, shortest / 6))

    async def _lease_loop(self) -> None:
        while True:
            await self.clock.sleep(self._check_interval())
            if not self.up:
                continue
            try:
                await self.renew_leases()
            except Exception:  # a bug must not stop the renewals for good
                log.exception("resource %s: lease renewal failed", self.name)

    async def renew_leases(self, *, force: bool = False) -> bool:
        """Renew every job's lease if a third of one passed; whether a request was sent."""
        jobs = self._leased()
        if not jobs:
            return False
        duration = min(job.lease for job in jobs)
        now = int(self.clock.time())
        # A job whose lease is not known (found again after a restart) is renewed now.
        oldest = min(job.lease_expiration or 0 for job in jobs)
        if not force and oldest - now > duration * 2 / 3:
            return False
        expiration = now + duration
        leases = condor.Leases(tuple((job.remote, expiration) for job in _remote_ids(jobs)))
        self.lease_updates += 1
        try:
            renewed = await self.command(condor.Renewed.of, condor.UPDATE_LEASE, *leases.args())
        except (RemoteCallFailed, GahpError, GahpUnavailable) as err:
            log.warning("resource %s: lease renewal failed: %s", self.name, err)
            self.request_ping()
            return True
        updated = set(renewed.jobs)
        for job in jobs:
            assert job.remote_id is not None
            if job.remote_id.remote in updated:
                await job.lease_renewed(expiration)
        return True


def _remote_ids(jobs: Sequence[CondorJob]) -> list[CondorJobId]:
    return [job.remote_id for job in jobs if job.remote_id is not None]


def _cluster_of(job: CondorJob) -> int:
    return job.remote_id.cluster if job.remote_id is not None else 0


def _chunks(items: Sequence[CondorJob], size: int) -> list[Sequence[CondorJob]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def _digest(text: str, end: int) -> bytes:
    """A digest of `text[:end]` (128 bits: two different ads never share one in practice)."""
    return hashlib.blake2b(text[:end].encode(), digest_size=16).digest()


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
