"""Jobs' sandboxes through the spool: input uploads (one job's, or a batch's in one tar),
a renewed X.509 proxy, and output downloads (one job's, or several in one tar), for
`QueueService`, which mixes `SandboxTransfers` in."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final

from htgrid._privsep import Account, as_owner
from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.net import BadRequest, SandboxTooLarge
from htgrid.net.server import SizeLimit
from htgrid.queue import (
    Identity,
    InvalidTransition,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
    NotAuthorized,
)
from htgrid.schedd._spool import (
    BatchInput,
    make_dirs,
    proxy_expiration,
    read_batch,
    receive_input,
    replace_proxy,
    unpack_input,
    unpack_members,
)
from htgrid.schedd._spool_output import JobOutput, output_files, pack_output, pack_outputs
from htgrid.schedd._worker import QueueWorker

__all__ = ["MAX_BATCH_JOBS", "SPOOLED", "SandboxTransfers"]

SPOOLED: Final = "Data files spooled"  # the ReleaseReason HTCondor's schedd writes
_STAGEABLE: Final = frozenset({JobStatus.HELD, JobStatus.IDLE})  # not yet started
#: The most jobs one batch upload may carry; its body may be this many times the per-job
#: MAX_TRANSFER_INPUT_MB.
MAX_BATCH_JOBS: Final = 1000


class SandboxTransfers:
    """The sandbox operations of `htgrid.net.QueueBackend`; the queue service that mixes
    them in sets these attributes and gives the methods below that stand in for its own."""

    _worker: QueueWorker
    _spool: Callable[[int, int], Path]
    _clock: Callable[[], float]
    _fsync: bool
    _max_input: SizeLimit
    _max_output: SizeLimit
    _scratch: Path | None
    _proxy_renewed: Callable[[JobId, Path], None] | None
    _staging: set[JobId]  # jobs whose input is being uploaded

    async def get(self, identity: Identity, job_id: JobId) -> ClassAd:
        raise NotImplementedError

    def _account(self, ad: ClassAd, job_id: JobId) -> Account | None:
        raise NotImplementedError

    def _spool_root(self) -> Path:
        raise NotImplementedError

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

    async def _owned(self, identity: Identity, job_id: JobId, verb: str) -> ClassAd:
        ad = await self.get(identity, job_id)
        owner = ad.get("Owner")
        if not isinstance(owner, str) or not identity.may_act_on(owner):
            raise NotAuthorized(
                f"job {job_id} is owned by {owner}; {identity.name} may not {verb} it"
            )
        return ad


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
