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
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Final

from htgrid._privsep import Account, OwnerPolicy, OwnerRefused, as_owner
from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import HTGridError
from htgrid.net import BadRequest, Jobs, SandboxTooLarge
from htgrid.net.server import NO_LIMIT, SizeLimit
from htgrid.queue import (
    BatchCounts,
    FactoryInfo,
    Identity,
    InvalidSubmit,
    InvalidTransition,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
    NotAuthorized,
    Quarantined,
)
from htgrid.schedd._annex_tokens import AnnexTokens
from htgrid.schedd._spool import (
    BatchInput,
    JobOutput,
    make_dirs,
    output_files,
    pack_output,
    pack_outputs,
    proxy_expiration,
    read_batch,
    receive_input,
    replace_proxy,
    unpack_input,
    unpack_members,
)
from htgrid.schedd._submit import SubmitPrep, proxy_attrs
from htgrid.schedd._worker import QueueWorker

__all__ = ["QueueService"]

_log = logging.getLogger("htgrid.schedd.service")

_MAX_RESERVATIONS: Final = 10_000  # ids reserved by submitters that never came back
SPOOLED: Final = "Data files spooled"  # the ReleaseReason HTCondor's schedd writes
_STAGEABLE: Final = frozenset({JobStatus.HELD, JobStatus.IDLE})  # not yet started
#: The most jobs one batch upload may carry; its body may be this many times the per-job
#: MAX_TRANSFER_INPUT_MB.
MAX_BATCH_JOBS: Final = 1000
_PAGE: Final = 1000  # the ads of a streamed listing read at a time


class QueueService:
    """Implements `htgrid.net.QueueBackend` over the queue thread."""

    def __init__(
        self,
        worker: QueueWorker,
        status: Callable[[], dict[str, Any]],
        *,
        spool: Callable[[int, int], Path],
        clock: Callable[[], float] = time.time,
        after_submit: Callable[[], Awaitable[None]] | None = None,
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
        answered (the daemon writes their 000 events then); `proxy_renewed(job, path)`
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
        return await self._worker.read(
            lambda q: q.history(constraint, projection, limit=limit), client=True
        )

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

    async def put_input(
        self, identity: Identity, job_id: JobId, body: AsyncIterable[bytes], length: int | None
    ) -> list[JobId]:
        if job_id in self._staging:
            raise InvalidTransition(f"job {job_id}: another upload of its input is under way")
        self._staging.add(job_id)
        try:
            ad = await self._owned(identity, job_id, "stage input for")
            status = JobStatus(ad.get("JobStatus", JobStatus.IDLE))
            if status not in _STAGEABLE:
                raise InvalidTransition(
                    f"job {job_id} is {status.label}: its input can no longer change"
                )
            what = f"the input sandbox of job {job_id}"
            if length is not None:  # refused before a byte of it is read
                self._max_input.check(length, what)
            account = self._account(ad, job_id)
            start = int(self._clock())
            sandbox = self._spool(*_ids(job_id))
            # Spooled (past 1 MiB) beside the spool, which is there: the job's directory
            # may not be yet.
            tar = await receive_input(self._spool_root(), body, self._max_input, what)

            def unpack() -> None:
                make_dirs([sandbox], account)  # if the submit's task has not made it yet
                with as_owner(account):
                    unpack_input(sandbox, tar, self._max_input, what, sync=self._fsync)

            try:
                await asyncio.to_thread(unpack)
            finally:
                tar.close()
            done = {"StageInStart": start, "StageInFinish": int(self._clock())}
            # After the files are written: a crash before this commits leaves the job
            # held, and the submitter uploads again.
            await self._worker.write(
                lambda q: q.input_staged([job_id], identity, done, SPOOLED), client=True
            )
        finally:
            self._staging.discard(job_id)
        return [job_id]

    async def put_inputs(
        self, identity: Identity, body: AsyncIterable[bytes], length: int | None
    ) -> dict[JobId, HTGridError | None]:
        """The input sandboxes of several jobs in one tar (`12.0/file`, `12.1/file`), each
        unpacked into its job's spool directory as `put_input` does; the jobs staged (None)
        or refused (the error), each on its own. The spooling ones are released together.

        MAX_TRANSFER_INPUT_MB applies to each job's files; the whole body may be
        MAX_BATCH_JOBS times that.
        """
        cap = self._max_input.megabytes
        whole = SizeLimit(
            f"{MAX_BATCH_JOBS} x {self._max_input.knob}",
            None if cap is None else cap * MAX_BATCH_JOBS,
        )
        what = "the batch of input sandboxes"
        if length is not None:
            whole.check(length, what)
        start = int(self._clock())
        tar = await receive_input(self._spool_root(), body, whole, what)
        try:
            batch = await asyncio.to_thread(read_batch, tar, self._max_input)
            try:
                return await self._stage_batch(identity, batch, start)
            finally:
                batch.tar.close()
        finally:
            tar.close()

    async def _stage_batch(
        self, identity: Identity, batch: BatchInput, start: int
    ) -> dict[JobId, HTGridError | None]:
        named = list(batch.members) + list(batch.problems)
        if len(named) > MAX_BATCH_JOBS:
            raise BadRequest(f"a batch upload names {len(named)} jobs, over {MAX_BATCH_JOBS}")
        result: dict[JobId, HTGridError | None] = {
            JobId.parse(job): problem for job, problem in batch.problems.items()
        }
        wanted = [JobId.parse(job) for job in batch.members]
        ads = await self._worker.read(lambda q: q.get_many(wanted), client=True)
        mine: dict[JobId, Account | None] = {}
        try:
            for job_id in wanted:
                problem = self._stage_problem(identity, job_id, ads.get(job_id))
                if problem is None:
                    try:
                        account = self._account(ads[job_id], job_id)
                    except NotAuthorized as exc:
                        problem = exc
                if problem is None:
                    self._staging.add(job_id)
                    mine[job_id] = account
                result[job_id] = problem

            def unpack() -> dict[JobId, HTGridError]:
                failed: dict[JobId, HTGridError] = {}
                sandboxes = {job_id: self._spool(*_ids(job_id)) for job_id in mine}
                made = True
                for owner in set(mine.values()):
                    paths = [sandboxes[job] for job, account in mine.items() if account == owner]
                    try:  # those the submit's task has not made yet, or a sweep took
                        make_dirs(paths, owner)
                    except OSError:
                        made = False  # each job on its own below, refused with its reason
                for job_id, sandbox in sandboxes.items():
                    members = batch.members[str(job_id)]
                    if made and not members:
                        continue  # an empty sandbox: nothing to write
                    try:
                        with as_owner(mine[job_id]):
                            unpack_members(batch.tar, members, sandbox, sync=self._fsync)
                    except HTGridError as exc:
                        failed[job_id] = exc
                    except OSError as exc:
                        failed[job_id] = HTGridError(
                            f"job {job_id}: cannot unpack its input: {exc}"
                        )
                return failed

            failed = await asyncio.to_thread(unpack)
            result.update(failed)
            staged = [job_id for job_id in mine if job_id not in failed]  # in upload order
            if staged:
                times = {"StageInStart": start, "StageInFinish": int(self._clock())}
                # After the files are written, as put_input does.
                await self._worker.write(
                    lambda q: q.input_staged(staged, identity, times, SPOOLED), client=True
                )
        finally:
            self._staging.difference_update(mine)
        return result

    def _stage_problem(
        self, identity: Identity, job_id: JobId, ad: ClassAd | None
    ) -> HTGridError | None:
        """Why the input of `job_id` (its ad `ad`) may not be uploaded now, if it may not."""
        if ad is None:
            return JobNotFound(f"job {job_id} is not in the queue")
        owner = ad.get("Owner")
        if not isinstance(owner, str) or not identity.may_act_on(owner):
            return NotAuthorized(
                f"job {job_id} is owned by {owner}; {identity.name} may not stage input for it"
            )
        status = JobStatus(ad.get("JobStatus", JobStatus.IDLE))
        if status not in _STAGEABLE:
            return InvalidTransition(
                f"job {job_id} is {status.label}: its input can no longer change"
            )
        if job_id in self._staging:
            return InvalidTransition(f"job {job_id}: another upload of its input is under way")
        return None

    async def put_proxy(self, identity: Identity, job_id: JobId, data: bytes) -> None:
        """The job's renewed X.509 proxy (CONDOR_JOB_REFRESH_PROXY's remote part) in the
        place of the one its input brought into its spool directory; its expiration (the
        first certificate's) as x509UserProxyExpiration."""
        ad = await self._owned(identity, job_id, "refresh the proxy of")
        proxy = ad.get("x509userproxy")
        name = PurePosixPath(proxy).name if isinstance(proxy, str) else ""
        if name in ("", ".", ".."):
            raise InvalidTransition(f"job {job_id} has no x509userproxy: no proxy to refresh")
        status = JobStatus(ad.get("JobStatus", JobStatus.IDLE))
        if status in (JobStatus.COMPLETED, JobStatus.REMOVED):
            raise InvalidTransition(f"job {job_id} is {status.label}: its proxy is not used")
        sandbox = self._spool(*_ids(job_id))
        if ad.get("Iwd") != str(sandbox):
            # Only a spooled job's own directory is the daemon's to write in.
            raise InvalidTransition(
                f"job {job_id}'s input was not spooled here: its proxy {proxy} is not in "
                "a spool directory"
            )
        account = self._account(ad, job_id)

        def replace() -> None:
            with as_owner(account):
                replace_proxy(sandbox, name, data, sync=self._fsync)

        await asyncio.to_thread(replace)
        if self._proxy_renewed is not None:  # a job running on an execute node gets it too
            self._proxy_renewed(job_id, sandbox / name)
        expiration = proxy_expiration(data)
        if expiration is not None:
            attrs = {"x509UserProxyExpiration": expiration}
            await self._worker.write(lambda q: q.update(job_id, attrs), client=True)

    async def get_output(self, identity: Identity, job_id: JobId) -> BinaryIO:
        ad = await self._owned(identity, job_id, "fetch the output of")
        account = self._account(ad, job_id)
        start = int(self._clock())
        sandbox, what = self._spool(*_ids(job_id)), f"the output of job {job_id}"
        tar = await asyncio.to_thread(
            pack_output, ad, sandbox, self._scratch, self._max_output, what, account
        )
        try:
            done = {"StageOutStart": start, "StageOutFinish": int(self._clock())}
            await self._worker.write(lambda q: q.update(job_id, done), client=True)
        except BaseException:
            tar.close()
            raise
        return tar

    async def get_outputs(
        self,
        identity: Identity,
        job_ids: Sequence[JobId],
        describe: Callable[[Mapping[JobId, ClassAd | HTGridError]], bytes],
    ) -> BinaryIO:
        """Several jobs' output sandboxes in one tar, each job answered on its own: its ad
        and files, or why not (not in the queue, not the caller's, over
        MAX_TRANSFER_OUTPUT_MB); `describe` makes the tar's first member of those."""
        ads = await self._worker.read(lambda q: q.get_many(job_ids), client=True)
        start = int(self._clock())

        def pack() -> tuple[BinaryIO, list[JobId]]:
            answers: dict[JobId, ClassAd | HTGridError] = {}
            outputs: dict[str, JobOutput] = {}
            for job_id in job_ids:
                ad = ads.get(job_id)
                owner = None if ad is None else ad.get("Owner")
                if ad is None:
                    answers[job_id] = JobNotFound(f"job {job_id} is not in the queue")
                elif not isinstance(owner, str) or not identity.may_act_on(owner):
                    answers[job_id] = NotAuthorized(
                        f"job {job_id} is owned by {owner}; {identity.name} may not "
                        "fetch the output of it"
                    )
                else:
                    sandbox, what = self._spool(*_ids(job_id)), f"the output of job {job_id}"
                    try:
                        account = self._account(ad, job_id)
                        with as_owner(account):
                            files = output_files(ad, sandbox, self._max_output, what)
                        outputs[str(job_id)] = JobOutput(files, sandbox, account)
                        answers[job_id] = ad
                    except (SandboxTooLarge, NotAuthorized) as exc:
                        answers[job_id] = exc
            tar = pack_outputs(describe(answers), outputs, self._scratch)
            return tar, [
                job_id for job_id, answer in answers.items() if isinstance(answer, ClassAd)
            ]

        tar, packed = await asyncio.to_thread(pack)
        try:
            if packed:
                done = {"StageOutStart": start, "StageOutFinish": int(self._clock())}
                await self._worker.write(
                    lambda q: _edit_each(q, identity, packed, done), client=True
                )
        except BaseException:
            tar.close()
            raise
        return tar

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

    async def _owned(self, identity: Identity, job_id: JobId, verb: str) -> ClassAd:
        ad = await self.get(identity, job_id)
        owner = ad.get("Owner")
        if not isinstance(owner, str) or not identity.may_act_on(owner):
            raise NotAuthorized(
                f"job {job_id} is owned by {owner}; {identity.name} may not {verb} it"
            )
        return ad

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


def _ids(job_id: JobId) -> tuple[int, int]:
    return job_id.cluster, job_id.proc


def _edit_each(q: JobQueue, identity: Identity, ids: list[JobId], attrs: Mapping[str, int]) -> None:
    """`attrs` set in the jobs of `ids` in one transaction (one by one if one of them
    left or changed meanwhile)."""
    try:
        q.edit(ids, attrs, identity)
    except HTGridError:
        for job_id in ids:
            with contextlib.suppress(HTGridError):
                q.edit([job_id], attrs, identity)


def _stage(prep: SubmitPrep, batch: Sequence[ClassAd]) -> None:
    for proc in batch:
        prep.add(proc)


def _remove_dirs(paths: Sequence[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):  # left when not empty
            path.rmdir()
