"""The queue operations the API serves, each run on the queue thread as its caller.

Who may do what is the queue's rule (`Identity.may_act_on` against the jobs' Owner):
anyone may read, users act on their own jobs, administrators on all. A job submitted
by a user is owned by that user whatever its ad says. A job submitted held with
HoldReasonCode 16 (SpoolingInput) gets its own spool directory as Iwd (the submitter's
kept in SUBMIT_Iwd); its input arrives with `put_input` (or with other jobs' in one
`put_inputs`), which then releases it; its output leaves with `get_output` (or with
other jobs' in one `get_outputs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from htgrid._privsep import Account, OwnerPolicy, OwnerRefused
from htgrid.classad import ClassAd, ExprTree
from htgrid.net import Jobs
from htgrid.net.server import NO_LIMIT, SizeLimit
from htgrid.queue import (
    BatchCounts,
    FactoryInfo,
    Identity,
    InvalidSubmit,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    NotAuthorized,
    Quarantined,
)
from htgrid.schedd._annex_tokens import AnnexTokens
from htgrid.schedd._service_sandbox import SandboxTransfers
from htgrid.schedd._spool import make_dirs
from htgrid.schedd._submit import SubmitPrep, proxy_attrs
from htgrid.schedd._worker import QueueWorker

__all__ = ["QueueService"]

_log = logging.getLogger("htgrid.schedd.service")

_MAX_RESERVATIONS: Final = 10_000  # ids reserved by submitters that never came back
_PAGE: Final = 1000  # the ads of a streamed listing read at a time


class QueueService(SandboxTransfers):
    """Implements `htgrid.net.QueueBackend` over the queue thread."""

    def __init__(
        self,
        worker: QueueWorker,
        status: Callable[[], dict[str, Any]],
        *,
        spool: Callable[[int, int], Path],
        clock: Callable[[], float] = time.time,
        after_submit: Callable[[], Awaitable[None]] | None = None,
        before_history: Callable[[], Awaitable[None]] | None = None,
        proxy_renewed: Callable[[JobId, Path], None] | None = None,
        max_input: SizeLimit = NO_LIMIT,
        max_output: SizeLimit = NO_LIMIT,
        scratch: Path | None = None,
        fsync: bool = True,
        policy: OwnerPolicy | None = None,
        use_voms: bool = False,
        annex_tokens: AnnexTokens | None = None,
    ) -> None:
        """`spool(cluster, proc)` names a job's spool directory; `after_submit` runs
        once a submit of jobs with a user log (UserLog) has committed, before it is
        answered (the daemon writes their 000 events then); `before_history` runs after a
        history read that found jobs, before it is answered (the daemon writes every event
        committed so far then); `proxy_renewed(job, path)`
        hears of a job's X.509 proxy renewed in its spool; output tars are packed in
        `scratch` (default: the system's temporary directory); `fsync`: uploaded files
        are synced to disk before the job is released (QUEUE_FSYNC, as the queue);
        `policy`: whose jobs may be queued (None: anyone's, for tests of the service);
        `use_voms` (USE_VOMS_ATTRIBUTES): a job's proxy's VOMS FQANs go into its ad;
        `annex_tokens` mints the tokens of users' annexes (None: none are)."""
        self._annex_tokens = annex_tokens
        self._policy = policy
        self._use_voms = use_voms
        self._fsync = fsync
        self._max_input, self._max_output, self._scratch = max_input, max_output, scratch
        self._worker = worker
        self._after_submit = after_submit
        self._before_history = before_history
        self._proxy_renewed = proxy_renewed
        self._status = status
        self._spool = spool
        self._clock = clock
        self._reservations: dict[int, str] = {}  # cluster id -> the user who reserved it
        self._staging: set[JobId] = set()  # jobs whose input is being uploaded
        # Submitted clusters' spool directories being made (see submit); held here so
        # that the tasks are not collected before they end.
        self._making: set[asyncio.Task[None]] = set()

    async def annex_token(self, identity: Identity, request: Mapping[str, Any]) -> dict[str, Any]:
        tokens = self._annexes()
        return await tokens.mint(
            identity,
            request.get("annex"),
            request.get("lifetime"),
            authz=request.get("authz"),
            subject=request.get("identity"),
            expires=request.get("expires"),
            record=request.get("record"),
        )

    async def annex_revoke(self, identity: Identity, annex: object) -> int:
        return await self._annexes().revoke(identity, annex)

    def _annexes(self) -> AnnexTokens:
        if self._annex_tokens is None:
            raise NotAuthorized("this schedd mints no annex tokens")
        return self._annex_tokens

    async def reserve_cluster(self, identity: Identity) -> int:
        # It commits only the id counter: nothing for the change feed's followers.
        cluster = await self._worker.read(lambda q: q.reserve_cluster(), client=True)
        self._reservations[cluster] = identity.name
        while len(self._reservations) > _MAX_RESERVATIONS:
            del self._reservations[next(iter(self._reservations))]
        return cluster

    async def submit(
        self, identity: Identity, cluster: int, cluster_ad: ClassAd, procs: Sequence[ClassAd]
    ) -> list[JobId]:
        async def one_batch() -> AsyncIterator[Sequence[ClassAd]]:
            yield procs

        count = await self.submit_stream(identity, cluster, cluster_ad, one_batch())
        return [JobId(cluster, proc) for proc in range(count)]

    async def submit_stream(
        self,
        identity: Identity,
        cluster: int,
        cluster_ad: ClassAd,
        batches: AsyncIterable[Sequence[ClassAd]],
        *,
        factory: bool = False,
    ) -> int:
        owner = self._reservations.get(cluster)
        if owner is None:
            raise InvalidSubmit(
                f"cluster {cluster} was not reserved by this daemon, or is already submitted; "
                "submit again to get a new cluster id"
            )
        if owner != identity.name and not identity.admin:
            raise NotAuthorized(f"cluster {cluster} was reserved by {owner}, not {identity.name}")
        prep = await asyncio.to_thread(
            SubmitPrep, cluster, cluster_ad, identity, self._spool, self._scratch
        )
        making: asyncio.Task[None] | None = None
        try:
            account = self._check_owner(prep.ad.get("Owner", identity.name))
            # Each batch staged off the loop as it arrives: memory stays what one batch
            # takes, and nothing is queued until the last has come.
            async for batch in batches:
                await asyncio.to_thread(_stage, prep, batch)
            ad = prep.finish()
            await asyncio.to_thread(proxy_attrs, ad, account, voms=self._use_voms)
            late = factory and ("JobMaterializeLimit" in ad or "JobMaterializeMaxIdle" in ad)
            if late and prep.spooled:
                raise InvalidSubmit(
                    f"cluster {cluster}: input is not spooled for a late materialization "
                    "factory (max_materialize, max_idle), as in HTCondor"
                )
            if prep.has_myproxy:
                if late:
                    raise InvalidSubmit(
                        f"cluster {cluster}: a MyProxy password is not taken for a late "
                        "materialization factory (max_materialize, max_idle)"
                    )
                await asyncio.to_thread(prep.store_myproxy, self._spool_root())
            # Made while the submit commits and after it is answered: they are needed by
            # the stage-in, not by the answer. On this project's disk a new directory
            # costs up to a millisecond after many were removed, which held each
            # HTCondor-C submit of 250 jobs up by 0.3 s. A stage-in does not wait for
            # them either: it makes those of its own jobs still missing (`make_dirs`
            # takes a directory made meanwhile).
            if prep.spooled:
                making = self._make_dirs(cluster, prep.spooled, account)

            def submit(q: JobQueue) -> int:
                with q.transaction(identity, reserved=cluster) as tx:
                    cid = tx.new_cluster()
                    tx.set_cluster_ad(cid, ad)
                    return tx.add_staged(cid, prep.staged, factory=late)

            count = await self._worker.write(submit, client=True)
        except BaseException:
            if making is not None:
                await asyncio.wait([making])
                await asyncio.to_thread(_remove_dirs, prep.spooled)
            raise
        finally:
            await asyncio.to_thread(prep.close)
        self._reservations.pop(cluster, None)
        # Only a job with a log has a 000 event to wait for: the catch-up writes every
        # event since the last, the runner's hundreds of starts and ends included, and
        # held a remote submit of 250 jobs without one up by 0.1-0.25 s (HTCondor-C's
        # remote ads name no log).
        if self._after_submit is not None and prep.has_log:
            await self._after_submit()
        return count

    def _check_owner(self, owner: object, doing: str = "queue the job") -> Account | None:
        """The account jobs of `owner` run as (None: the daemon's own, when this service
        has no policy); NotAuthorized, saying why, when they may not run here (no such
        account, root's, or not the personal pool's user)."""
        if self._policy is None:
            return None
        try:
            return self._policy.account(owner)
        except OwnerRefused as exc:
            raise NotAuthorized(f"cannot {doing}: {exc}") from None

    def _account(self, ad: ClassAd, job_id: JobId) -> Account | None:
        """The account whose rights the job's files are touched with."""
        return self._check_owner(ad.get("Owner"), f"touch the files of job {job_id}")

    def _make_dirs(
        self, cluster: int, paths: list[Path], account: Account | None
    ) -> asyncio.Task[None]:
        """Start making a submitted cluster's spool directories `paths`."""

        def done(task: asyncio.Task[None]) -> None:
            self._making.discard(task)
            if not task.cancelled() and task.exception() is not None:
                # The stage-in tries again and refuses the jobs, saying why.
                _log.warning(
                    "cannot make the spool directories of cluster %d: %s",
                    cluster,
                    task.exception(),
                )

        task = asyncio.create_task(asyncio.to_thread(make_dirs, paths, account))
        self._making.add(task)
        task.add_done_callback(done)
        return task

    def _spool_root(self) -> Path:
        """The directory holding the clusters' spool directories."""
        return self._spool(0, 0).parent.parent

    async def query(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> list[ClassAd]:
        return await self._worker.read(
            lambda q: q.query(constraint, projection, limit=limit), client=True
        )

    async def query_pages(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> AsyncIterator[list[ClassAd]]:
        after: JobId | None = None
        left = limit
        while left is None or left > 0:
            count = _PAGE if left is None else min(_PAGE, left)

            def page(q: JobQueue, after: JobId | None = after, count: int = count) -> list[ClassAd]:
                return q.query_page(constraint, projection, after=after, count=count)

            ads = await self._worker.read(page, client=True)
            if ads:
                yield ads
            if len(ads) < count:
                return
            if left is not None:
                left -= len(ads)
            after = JobId(ads[-1]["ClusterId"], ads[-1]["ProcId"])

    async def summary(
        self, identity: Identity, constraint: str | None, *, batches: bool = True
    ) -> tuple[list[BatchCounts], dict[str, dict[int, int]], list[FactoryInfo]]:
        def read(
            q: JobQueue,
        ) -> tuple[list[BatchCounts], dict[str, dict[int, int]], list[FactoryInfo]]:
            if not batches:
                return [], q.count_owners(), []
            return q.summarize(constraint), q.count_owners(), q.factories()

        return await self._worker.read(read, client=True)

    async def history(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> list[ClassAd]:
        ads = await self._worker.read(
            lambda q: q.history(constraint, projection, limit=limit), client=True
        )
        # As in HTCondor, where the shadow writes a job's last event before the job leaves
        # the queue: a job found in the history has its events (005, 009) in its user log,
        # so a script that polls the history and then reads the log finds them. After the
        # read, so that the events of every job it found are written.
        if ads and self._before_history is not None:
            await self._before_history()
        return ads

    async def get(self, identity: Identity, job_id: JobId) -> ClassAd:
        return await self._worker.read(lambda q: q.get(job_id), client=True)

    async def cluster_ad(self, identity: Identity, cluster: int) -> ClassAd:
        """The ad a cluster's jobs share (JobNotFound when the cluster is gone)."""
        return await self._worker.read(lambda q: q.cluster_ad(cluster), client=True)

    async def act(
        self,
        identity: Identity,
        action: JobAction,
        jobs: Jobs,
        reason: str | None,
        *,
        trial: bool = False,
    ) -> list[JobId]:
        """The jobs acted on; with `trial`, those it would act on, nothing changed."""
        spec = jobs.spec(identity)
        return await self._worker.write(
            lambda q: q.act(action, spec, identity, reason, trial=trial), client=True
        )

    async def edit(
        self, identity: Identity, jobs: Jobs, attrs: dict[str, str], *, later: bool = False
    ) -> list[JobId]:
        spec = jobs.spec(identity)
        return await self._worker.write(
            lambda q: q.edit(spec, attrs, identity), client=not later, later=later
        )

    async def update_leases(self, identity: Identity, leases: Mapping[JobId, int]) -> list[JobId]:
        def renew(q: JobQueue) -> list[JobId]:
            groups: dict[int, list[JobId]] = {}
            for job_id, expiration in leases.items():
                try:
                    owner = q.get(job_id).get("Owner")
                except JobNotFound:
                    continue  # gone already: the submitter learns it from its query
                if isinstance(owner, str) and identity.may_act_on(owner):
                    groups.setdefault(expiration, []).append(job_id)
            done: list[JobId] = []
            for expiration, ids in groups.items():  # one transaction per expiration
                attrs = {"JobLeaseExpiration": expiration}
                try:
                    done += q.edit(ids, attrs, identity)
                except JobNotFound:  # one left meanwhile (another process): one by one
                    for job_id in ids:
                        with contextlib.suppress(JobNotFound):
                            done += q.edit([job_id], attrs, identity)
            return sorted(done)

        return await self._worker.write(renew, client=True)

    async def factories_matching(self, identity: Identity, constraint: str) -> list[int]:
        """The clusters whose factories `identity` may act on and whose cluster ad
        `constraint` matches (as HTCondor's schedd matches cluster ads by constraint)."""

        def read(q: JobQueue) -> list[int]:
            test = ExprTree(constraint)
            found = []
            for factory in q.factories():
                if not identity.may_act_on(factory.owner):
                    continue
                ad = q.cluster_ad(factory.cluster)
                ad.update({"ClusterId": factory.cluster, "ProcId": -1})
                if test.eval(ad) is True:
                    found.append(factory.cluster)
            return found

        return await self._worker.read(read, client=True)

    async def quarantined(self, identity: Identity) -> list[Quarantined]:
        found = await self._worker.read(lambda q: q.quarantined(), client=True)
        return [e for e in found if identity.admin or e.owner == identity.name]

    async def status(self) -> dict[str, Any]:
        return self._status()


def _stage(prep: SubmitPrep, batch: Sequence[ClassAd]) -> None:
    for proc in batch:
        prep.add(proc)


def _remove_dirs(paths: Sequence[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):  # left when not empty
            path.rmdir()
