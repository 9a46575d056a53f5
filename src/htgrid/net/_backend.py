"""What the API serves: the queue operations a daemon (or a test double) provides."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, BinaryIO, Protocol

from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.net._wire import Jobs
from htgrid.queue import BatchCounts, FactoryInfo, Identity, JobAction, JobId, Quarantined

__all__ = ["QueueBackend"]


class QueueBackend(Protocol):
    """The queue operations behind the routes, each done as `identity`."""

    async def reserve_cluster(self, identity: Identity) -> int:
        """A new cluster id for `identity` to build ads for."""
        ...

    async def submit(
        self, identity: Identity, cluster: int, cluster_ad: ClassAd, procs: Sequence[ClassAd]
    ) -> list[JobId]:
        """Queue all procs of a reserved cluster in one transaction; their ids."""
        ...

    async def submit_stream(
        self,
        identity: Identity,
        cluster: int,
        cluster_ad: ClassAd,
        batches: AsyncIterable[Sequence[ClassAd]],
        *,
        factory: bool = False,
    ) -> int:
        """Queue a reserved cluster whose procs come batch after batch, in one
        transaction once the last has come (none if `batches` raises); how many. With
        `factory`, a cluster ad with JobMaterializeLimit or JobMaterializeMaxIdle is
        materialized late (htgrid.queue's `_factory`)."""
        ...

    async def query(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> list[ClassAd]:
        """The queued jobs matching `constraint`."""
        ...

    def query_pages(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> AsyncIterator[list[ClassAd]]:
        """`query`'s ads a page at a time, in job-id order (a listing of any length in
        the memory of a page)."""
        ...

    async def summary(
        self, identity: Identity, constraint: str | None, *, batches: bool = True
    ) -> tuple[list[BatchCounts], dict[str, dict[int, int]], list[FactoryInfo]]:
        """The jobs matching `constraint` counted by batch, everyone's jobs by owner and
        status (condor_q's batch view and totals), without their ads, and the late
        materialization factories. Not `batches`: the owners' counts alone (the batches
        and factories empty), for totals that need no more."""
        ...

    async def history(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> list[ClassAd]:
        """The jobs that left the queue, most recent first."""
        ...

    async def get(self, identity: Identity, job_id: JobId) -> ClassAd:
        """One queued job's ad."""
        ...

    async def act(
        self, identity: Identity, action: JobAction, jobs: Jobs, reason: str | None
    ) -> list[JobId]:
        """Hold, release or remove jobs; the jobs acted on."""
        ...

    async def edit(
        self, identity: Identity, jobs: Jobs, attrs: dict[str, str], *, later: bool = False
    ) -> list[JobId]:
        """Set attributes (ClassAd expression text) of jobs; the jobs edited. `later`:
        background work, which may wait while the daemon is busy with its jobs."""
        ...

    async def put_input(
        self, identity: Identity, job_id: JobId, body: AsyncIterable[bytes], length: int | None
    ) -> list[JobId]:
        """Unpack a tar (the request body as it arrives; `length` its declared size) into
        the job's spool directory; release it if it was spooling."""
        ...

    async def put_proxy(self, identity: Identity, job_id: JobId, data: bytes) -> None:
        """Replace the spooled job's X.509 proxy file with `data`."""
        ...

    async def put_inputs(
        self, identity: Identity, body: AsyncIterable[bytes], length: int | None
    ) -> dict[JobId, HTGridError | None]:
        """Unpack a tar of several jobs' inputs (top-level directories named by job id)
        as `put_input` does for each; per job, None when staged or why it was refused."""
        ...

    async def get_output(self, identity: Identity, job_id: JobId) -> BinaryIO:
        """The job's output sandbox as a tar in a file, rewound; the caller closes it."""
        ...

    async def get_outputs(
        self,
        identity: Identity,
        job_ids: Sequence[JobId],
        describe: Callable[[Mapping[JobId, ClassAd | HTGridError]], bytes],
    ) -> BinaryIO:
        """Several jobs' output sandboxes in one tar in a file, rewound; the caller closes
        it. Its first member, `jobs.json`, is `describe` of what each job got (its ad, or
        the error refusing it, as `get_output` would raise); then the files of each job
        answered, under its id (`12.0/out.txt`)."""
        ...

    async def update_leases(self, identity: Identity, leases: Mapping[JobId, int]) -> list[JobId]:
        """Set JobLeaseExpiration of the caller's jobs (unknown ids skipped); those set."""
        ...

    async def quarantined(self, identity: Identity) -> list[Quarantined]:
        """The rows the queue set aside because it could not read them (the caller's
        jobs; an administrator's: all)."""
        ...

    async def annex_token(self, identity: Identity, request: Mapping[str, Any]) -> dict[str, Any]:
        """A token for the caller's annex (`annex`, `lifetime`; `authz` and `identity` if
        asked, refused beyond the annex's own): the token, its identity, expiry and id,
        the trust domain and the pool's CA certificate."""
        ...

    async def annex_revoke(self, identity: Identity, annex: object) -> int:
        """Revoke the tokens of the caller's annex `annex`; how many."""
        ...

    async def status(self) -> dict[str, Any]:
        """What the daemon is doing (local jobs running, limits...), for health and analysis."""
        ...
