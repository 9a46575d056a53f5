"""The queue operations the API serves, each run on the queue thread as its caller."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, Final

from htgrid.classad import ClassAd
from htgrid.net._wire import Jobs
from htgrid.queue import Identity, InvalidSubmit, JobAction, JobId, JobQueue, NotAuthorized
from htgrid.schedd._worker import QueueWorker

__all__ = ["QueueService"]

_MAX_RESERVATIONS: Final = 10_000  # ids reserved by submitters that never came back
GRID: Final = 9  # JobUniverse


class QueueService:
    """Implements `htgrid.net.QueueBackend` over the queue thread."""

    def __init__(self, worker: QueueWorker, status: Callable[[], dict[str, Any]]) -> None:
        self._worker = worker
        self._status = status
        self._reservations: dict[int, str] = {}  # cluster id -> the user who reserved it

    async def reserve_cluster(self, identity: Identity) -> int:
        # It commits only the id counter: nothing for the change feed's followers.
        cluster = await self._worker.read(lambda q: q.reserve_cluster())
        self._reservations[cluster] = identity.name
        while len(self._reservations) > _MAX_RESERVATIONS:
            del self._reservations[next(iter(self._reservations))]
        return cluster

    async def submit(
        self, identity: Identity, cluster: int, cluster_ad: ClassAd, procs: Sequence[ClassAd]
    ) -> list[JobId]:
        owner = self._reservations.get(cluster)
        if owner is None:
            raise InvalidSubmit(
                f"cluster {cluster} was not reserved by this daemon, or is already submitted; "
                "submit again to get a new cluster id"
            )
        if owner != identity.name and not identity.admin:
            raise NotAuthorized(f"cluster {cluster} was reserved by {owner}, not {identity.name}")
        ad = copy.copy(cluster_ad)
        # condor_q's DONE column counts the procs that left the queue against this.
        ad["TotalSubmitProcs"] = len(procs)
        resource = ad.get("GridResource")
        if ad.get("JobUniverse") == GRID and isinstance(resource, str) and "$$(" in resource:
            # As condor_submit marks it: the job waits for grid matchmaking, and the grid
            # manager leaves it alone until a match has filled GridResource in.
            ad["Matched"] = False

        def submit(q: JobQueue) -> list[JobId]:
            with q.transaction(identity, reserved=cluster) as tx:
                cid = tx.new_cluster()
                tx.set_cluster_ad(cid, ad)
                return [tx.new_proc(cid, proc if len(proc) else None) for proc in procs]

        ids = await self._worker.write(submit)
        self._reservations.pop(cluster, None)
        return ids

    async def query(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> list[ClassAd]:
        return await self._worker.read(lambda q: q.query(constraint, projection, limit=limit))

    async def history(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> list[ClassAd]:
        return await self._worker.read(lambda q: q.history(constraint, projection, limit=limit))

    async def get(self, identity: Identity, job_id: JobId) -> ClassAd:
        return await self._worker.read(lambda q: q.get(job_id))

    async def act(
        self, identity: Identity, action: JobAction, jobs: Jobs, reason: str | None
    ) -> list[JobId]:
        spec = jobs.spec(identity)
        return await self._worker.write(lambda q: q.act(action, spec, identity, reason))

    async def edit(self, identity: Identity, jobs: Jobs, attrs: dict[str, str]) -> list[JobId]:
        spec = jobs.spec(identity)
        return await self._worker.write(lambda q: q.edit(spec, attrs, identity))

    async def status(self) -> dict[str, Any]:
        return self._status()
