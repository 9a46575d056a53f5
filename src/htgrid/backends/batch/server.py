"""The batch GAHP server: the blahp's commands, answered by htgrid's batch back ends.

Its commands, their arguments and result lines are `htgrid.gahp.commands.blah`'s, which
the grid manager reads with the same values: the blahp's (`src/blahp/src/server.c`) and
htgrid's BLAH_JOB_STATUS_ALL (one status ad per id asked, in order; an unknown job has
JobStatus 0 and BlahError) and BLAH_JOB_FIND (the blah id of the latest job submitted with
a ClientJobId, whatever its state: lets a grid manager that crashed between submit and
recording the id find its job).

Status ads carry BatchJobId, JobStatus and, once known, ExitCode or ExitBySignal and
ExitSignal, ExitReason (e.g. "walltime exceeded") and RemoteWallClockTime. A job whose
outputs could not be copied back is HELD (5) with HoldReason and HoldReasonCode 12.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from htgrid import __version__
from htgrid.backends.batch._base import (
    BackendError,
    BackendUnavailable,
    BatchBackend,
    JobState,
    NativeStatus,
    PreparedSubmit,
)
from htgrid.backends.batch._jobad import (
    InvalidSubmitAd,
    SubmitRequest,
    client_tag,
    parse_submit_ad,
)
from htgrid.backends.batch._poller import StatusBatcher
from htgrid.backends.batch._registry import BackendOptions, UnknownBackend, create_backend
from htgrid.backends.batch._sandbox import HOLD_TRANSFER_OUTPUT, JobRecord, JobStore
from htgrid.gahp import Call, Clock, Command, GahpServer, GahpVersion, SystemClock
from htgrid.gahp.commands import Spec, blah

__all__ = ["VERSION", "BatchGahp", "BatchOptions"]

VERSION = GahpVersion(__version__, datetime.date(2026, 11, 21), "htgrid batch GAHP")
_FINALS_KEPT = 10_000

Handler = Callable[[Call], Coroutine[Any, Any, Sequence[str]]]


class _Result(Protocol):
    """A result class of `htgrid.gahp.commands.blah`, built from a code and an error."""

    def __call__(self, code: str, error: str, /) -> _Fields: ...


class _Fields(Protocol):
    def fields(self) -> tuple[str, ...]: ...


_ACTIVE = frozenset({JobState.IDLE, JobState.RUNNING, JobState.HELD, JobState.SUSPENDED})


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """How a batch GAHP server runs."""

    scratch: Path
    #: Seconds status questions are collected before one back-end query answers them all.
    status_window: float = 0.5
    #: Seconds a status answer is reused for BLAH_JOB_STATUS (one job a question).
    status_max_age: float = 20.0
    #: Seconds an answer is reused for BLAH_JOB_STATUS_ALL (at most `status_max_age`): a
    #: poll of all the jobs gets the batch system's state now, its chunks (sent one after
    #: the other) one query.
    status_all_max_age: float = 1.0
    #: Worker limits: submits and other job commands, status questions, pings.
    submit_workers: int = 50
    status_workers: int = 1000
    ping_workers: int = 10


class _BadJobId(ValueError):
    pass


class BatchGahp:
    """The batch GAHP's commands over a JobStore and lazily built back ends."""

    def __init__(self, options: BatchOptions, *, clock: Clock | None = None) -> None:
        self.options = options
        self.clock: Clock = clock or SystemClock()
        self.store = JobStore(options.scratch)
        self._backends: dict[str, BatchBackend] = {}
        self._batchers: dict[str, StatusBatcher] = {}
        # One submit per client job, one stage-out per job, at a time.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        # Final answers of finished jobs, most recently asked last: no file or LRM lookup.
        self._finals: OrderedDict[tuple[str, str], tuple[NativeStatus, JobRecord]] = OrderedDict()
        # Submits under way: finished and recorded before the server exits (see serve).
        self._submitting: set[asyncio.Task[Sequence[str]]] = set()

    async def serve(self) -> None:
        """Serve stdin/stdout; on EOF, QUIT or SIGTERM finish the submits under way first.

        A launch or sbatch already started carries on whatever happens to this process;
        cancelling its handler half-way would leave a job nobody can find by its tag, and
        the restarted grid manager would submit it again.
        """
        await self.server().serve_stdio()
        if self._submitting:
            await asyncio.gather(*self._submitting, return_exceptions=True)

    async def _submit_shielded(self, call: Call) -> Sequence[str]:
        task = asyncio.create_task(self.submit(call))
        self._submitting.add(task)
        task.add_done_callback(self._submitting.discard)
        return await asyncio.shield(task)

    def server(self) -> GahpServer:
        """A GahpServer serving this GAHP's commands."""
        opts = self.options

        def command(spec: Spec, handler: Handler, workers: int, result: _Result) -> Command:
            # The result line reported if a handler breaks: code 1 and the reason, the
            # command's other fields filled so the grid manager's field count holds.
            def broke(reason: str) -> Sequence[str]:
                return result("1", reason).fields()

            return spec.command(handler, workers, on_error=broke)

        jobs = opts.submit_workers
        return GahpServer(
            VERSION,
            [
                command(blah.SUBMIT, self._submit_shielded, jobs, blah.Submitted),
                command(blah.STATUS, self.status, opts.status_workers, blah.Status),
                command(blah.CANCEL, self.cancel, jobs, blah.Outcome),
                command(blah.HOLD, self.hold, jobs, blah.Outcome),
                command(blah.RESUME, self.resume, jobs, blah.Outcome),
                command(blah.REFRESH_PROXY, self.refresh_proxy, jobs, blah.Outcome),
                command(blah.PING, self.ping, opts.ping_workers, blah.Outcome),
                command(blah.FIND, self.find, jobs, blah.Found),
                command(blah.STATUS_ALL, self.status_all, jobs, blah.StatusAll),
            ],
        )

    # ---- back ends ------------------------------------------------------------------------------

    def backend(self, lrms: str) -> BatchBackend:
        """The back end for `lrms`, built on first use; raises UnknownBackend."""
        backend = self._backends.get(lrms)
        if backend is None:
            # A command back end's registry is the store's index: one link per job.
            options = BackendOptions(lrms, self.store.backend_dir(lrms), self.store.ids)
            backend = create_backend(lrms, options)
            self._backends[lrms] = backend
        return backend

    def batcher(self, lrms: str) -> StatusBatcher:
        """The status batcher for `lrms`."""
        batcher = self._batchers.get(lrms)
        if batcher is None:
            batcher = StatusBatcher(
                self.backend(lrms),
                self.clock,
                window=self.options.status_window,
                max_age=self.options.status_max_age,
            )
            self._batchers[lrms] = batcher
        return batcher

    # ---- BLAH_JOB_SUBMIT ----------------------------------------------------------------------

    async def submit(self, call: Call) -> Sequence[str]:
        """BLAH_JOB_SUBMIT <id> <ad>."""
        try:
            request = parse_submit_ad(
                call.args[0], default_iwd=os.getcwd(), new_tag=f"htgrid_{uuid.uuid4().hex[:16]}"
            )
            backend = self.backend(request.lrms)
        except InvalidSubmitAd as err:
            return blah.Submitted(str(err.code), str(err)).fields()
        except UnknownBackend as err:
            return blah.Submitted("3", f"Error executing the submission command: {err}").fields()
        lock = self._lock(f"submit {request.tag}")
        try:
            async with lock:
                # One hop to a worker thread: the look for an earlier submit of the same
                # client job, the job's directory, inputs, record and script.
                staged = await asyncio.to_thread(
                    self._stage, request, backend, look_back=request.tag_from_client
                )
                if isinstance(staged, JobRecord):
                    again = await self._already_submitted(staged, request.lrms, backend)
                    if again is not None:
                        return blah.Submitted("0", blah_id=again).fields()
                    staged = await asyncio.to_thread(self._prepare, request, backend)
                native_id = await backend.submit_prepared(staged)
                blah_id = f"{request.lrms}/{self._date()}/{native_id}"
                # Two links, metadata only, in directories this server made: cheaper
                # here than another hop to a thread and back.
                job_dir = staged.spec.job_dir
                if backend.links != self.store.index_dir(request.lrms):
                    self.store.index(request.lrms, native_id, job_dir)
                self.store.note_blah_id(job_dir, blah_id)
        except InvalidSubmitAd as err:
            return blah.Submitted(str(err.code), str(err)).fields()
        except BackendError as err:
            return blah.Submitted(str(err.code or 1), str(err)).fields()
        except (BackendUnavailable, OSError) as err:
            return blah.Submitted("3", f"Error executing the submission command: {err}").fields()
        self.batcher(request.lrms).forget([native_id])
        return blah.Submitted("0", blah_id=blah_id).fields()

    def _stage(
        self, request: SubmitRequest, backend: BatchBackend, *, look_back: bool = False
    ) -> JobRecord | PreparedSubmit:
        """(In a worker thread) the record of an earlier submit of the same client job if
        `look_back` finds one, else the new job staged in and its submit prepared."""
        if look_back:
            earlier = self.store.latest(request.job_dir_name)
            if earlier is not None:
                return earlier
        return self._prepare(request, backend)

    def _prepare(self, request: SubmitRequest, backend: BatchBackend) -> PreparedSubmit:
        """(In a worker thread) the new job staged in and its submit prepared."""
        spec, _ = self.store.stage_in(request)
        try:
            return backend.prepare(spec)
        except BaseException:
            self.store.discard(spec.job_dir)
            raise

    async def _already_submitted(
        self, record: JobRecord, lrms: str, backend: BatchBackend
    ) -> str | None:
        """The blah id of a live job submitted before for the same client job, if any.

        The grid manager may submit again after a crash; never run the same job twice.
        """
        if record.final is not None or record.lrms != lrms:
            return None
        native_id = record.native_id
        if native_id is None:
            # Submitted, then a crash before the id was written down: ask the batch system.
            native_id = await backend.find_by_tag(record.tag)
            if native_id is None:
                return None
        found = await backend.status([native_id])
        if found.get(native_id, NativeStatus(native_id, JobState.UNKNOWN)).state not in _ACTIVE:
            return None
        if record.blah_id is not None and record.native_id == native_id:
            return record.blah_id
        blah_id = f"{record.lrms}/{self._date()}/{native_id}"
        await asyncio.to_thread(self._write_ids, record, native_id, blah_id)
        return blah_id

    def _write_ids(self, record: JobRecord, native_id: str, blah_id: str) -> None:
        """(In a worker thread) the ids of a job found after a crash, written down."""
        self.store.write(_with_ids(record, native_id, blah_id))
        self.store.index(record.lrms, native_id, Path(record.job_dir))

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    async def find(self, call: Call) -> Sequence[str]:
        """BLAH_JOB_FIND <id> <lrms> <ClientJobId>: the blah id it was submitted under, or NULL."""
        find = blah.Find.of(call.args)
        lrms, tag = find.lrms.lower(), client_tag(find.tag)
        try:
            backend = self.backend(lrms)
            record = await asyncio.to_thread(self.store.latest, tag)
            if record is not None and record.lrms == lrms and record.blah_id is not None:
                return blah.Found("0", blah_id=record.blah_id).fields()
            native_id = await backend.find_by_tag(tag)
        except (UnknownBackend, BackendError, BackendUnavailable) as err:
            return blah.Found("1", str(err)).fields()
        if native_id is None:
            return blah.Found("0").fields()
        blah_id = f"{lrms}/{self._date()}/{native_id}"
        if record is not None and record.lrms == lrms:
            await asyncio.to_thread(self._write_ids, record, native_id, blah_id)
        return blah.Found("0", blah_id=blah_id).fields()

    def _date(self) -> str:
        return datetime.datetime.fromtimestamp(self.clock.time()).strftime("%Y%m%d")

    # ---- BLAH_JOB_STATUS and BLAH_JOB_STATUS_ALL ---------------------------------------------

    async def status(self, call: Call) -> Sequence[str]:
        """BLAH_JOB_STATUS <id> <blah id>."""
        try:
            status, record = await self._status(call.args[0])
        except (_BadJobId, UnknownBackend, BackendUnavailable, BackendError) as err:
            return blah.Status("1", str(err)).fields()
        if status.state is JobState.UNKNOWN:
            return blah.Status("1", f"Job {call.args[0]} not found").fields()
        job_status, ad = status_ad(status, record)
        return blah.Status("0", job_status=job_status, ad=ad).fields()

    async def status_all(self, call: Call) -> Sequence[str]:
        """BLAH_JOB_STATUS_ALL <id> <blah id>...: one ad per job, in the order asked."""
        fresh = min(self.options.status_all_max_age, self.options.status_max_age)
        answers = await asyncio.gather(
            *(self._status(blah_id, max_age=fresh) for blah_id in call.args),
            return_exceptions=True,
        )
        ads = []
        for blah_id, answer in zip(call.args, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(
                    answer, _BadJobId | UnknownBackend | BackendError | BackendUnavailable
                ):
                    raise answer
                ads.append(_error_ad(blah_id, str(answer)))
            elif answer[0].state is JobState.UNKNOWN:
                ads.append(_error_ad(blah_id, f"Job {blah_id} not found"))
            else:
                ads.append(status_ad(*answer, blah_id=blah_id)[1])
        return blah.StatusAll("0", ads=tuple(ads)).fields()

    async def _status(
        self, blah_id: str, *, max_age: float | None = None
    ) -> tuple[NativeStatus, JobRecord | None]:
        lrms, native_id = parse_blah_id(blah_id)
        key = (lrms, native_id)
        final = self._finals.get(key)
        if final is not None:
            self._finals.move_to_end(key)
            return final
        status = await self.batcher(lrms).status(native_id, max_age=max_age)
        if status.state not in (JobState.COMPLETED, JobState.UNKNOWN):
            return status, None
        # Finished (stage out once), or forgotten by the batch system (the record knows).
        record = await asyncio.to_thread(self.store.find, lrms, native_id)
        if record is not None and record.final is None and status.state is JobState.COMPLETED:
            record = await self._stage_out(lrms, native_id, status)
        if record is None or record.final is None:
            return status, None
        recorded = record.final_status()
        assert recorded is not None  # record.final is set
        self._finals[key] = (recorded, record)
        if len(self._finals) > _FINALS_KEPT:
            self._finals.popitem(last=False)
        return recorded, record

    async def _stage_out(self, lrms: str, native_id: str, status: NativeStatus) -> JobRecord | None:
        async with self._lock(f"stage {lrms}/{native_id}"):
            record = await asyncio.to_thread(self.store.find, lrms, native_id)
            if record is None or record.final is not None:
                return record
            return await asyncio.to_thread(self.store.stage_out, record, status)

    # ---- BLAH_JOB_CANCEL, _HOLD, _RESUME, _REFRESH_PROXY, BLAH_PING ----------------------------

    async def cancel(self, call: Call) -> Sequence[str]:
        """BLAH_JOB_CANCEL <id> <blah id>."""
        try:
            lrms, native_id = parse_blah_id(call.args[0])
            await self.backend(lrms).cancel(native_id)
        except _BadJobId:
            return blah.Outcome("2", f"Malformed jobId {call.args[0]}").fields()
        except BackendError as err:
            return blah.Outcome(str(err.code or 1), f"Cancellation command failed: {err}").fields()
        except (UnknownBackend, BackendUnavailable) as err:
            return blah.Outcome("3", f"Error executing the cancel command: {err}").fields()
        self.batcher(lrms).forget([native_id])
        return blah.Outcome("0").fields()

    async def hold(self, call: Call) -> Sequence[str]:
        """BLAH_JOB_HOLD <id> <blah id>: only idle or running jobs can be held."""
        return await self._hold_or_resume(call.args[0], hold=True)

    async def resume(self, call: Call) -> Sequence[str]:
        """BLAH_JOB_RESUME <id> <blah id>: only held jobs can be resumed."""
        return await self._hold_or_resume(call.args[0], hold=False)

    async def _hold_or_resume(self, blah_id: str, *, hold: bool) -> Sequence[str]:
        try:
            lrms, native_id = parse_blah_id(blah_id)
            backend = self.backend(lrms)
            found = await backend.status([native_id])
            state = found.get(native_id, NativeStatus(native_id, JobState.UNKNOWN)).state
            # The blahp's answers, by state (hold_resume in server.c).
            refusal = _HOLD_REFUSALS if hold else _RESUME_REFUSALS
            if state in refusal:
                code, text = refusal[state]
                return blah.Outcome(code, f"{text} jobId {blah_id}").fields()
            if hold:
                await backend.hold(native_id)
            else:
                await backend.resume(native_id)
        except _BadJobId:
            return blah.Outcome("2", f"Malformed jobId {blah_id}").fields()
        except BackendError as err:
            action = "hold" if hold else "resume"
            return blah.Outcome(
                str(err.code or 1), f"Job {blah_id}: {action} failed: {err}"
            ).fields()
        except (UnknownBackend, BackendUnavailable) as err:
            return blah.Outcome("1", str(err)).fields()
        self.batcher(lrms).forget([native_id])
        return blah.Outcome("0").fields()

    async def refresh_proxy(self, call: Call) -> Sequence[str]:
        """BLAH_JOB_REFRESH_PROXY <id> <blah id> <proxy>: replace the job's copy of its proxy."""
        try:
            lrms, native_id = parse_blah_id(call.args[0])
        except _BadJobId:
            return blah.Outcome("2", f"Malformed jobId {call.args[0]}").fields()
        record = await asyncio.to_thread(self.store.find, lrms, native_id)
        if record is None:
            missing = f"Cannot locate old proxy: job {call.args[0]} not found"
            return blah.Outcome("1", missing).fields()
        if record.final is not None:
            return blah.Outcome("0", "No proxy to renew - Job completed").fields()
        if record.proxy is None:
            none = f"Cannot locate old proxy: job {call.args[0]} was given none"
            return blah.Outcome("1", none).fields()
        try:
            await asyncio.to_thread(_replace_proxy, Path(record.proxy), call.args[1])
        except OSError as err:
            return blah.Outcome("1", f"renew failed: {err.strerror or err}").fields()
        return blah.Outcome("0", "Proxy renewed").fields()

    async def ping(self, call: Call) -> Sequence[str]:
        """BLAH_PING <id> <lrms>."""
        try:
            await self.backend(call.args[0].lower()).ping()
        except (UnknownBackend, BackendError, BackendUnavailable) as err:
            return blah.Outcome("1", str(err)).fields()
        return blah.Outcome("0").fields()


_HOLD_REFUSALS = {
    JobState.REMOVED: ("1", "Job Removed"),
    JobState.COMPLETED: ("1", "Job Completed"),
    JobState.HELD: ("0", "Job Held"),
    JobState.UNKNOWN: ("1", "Job not found"),
}
_RESUME_REFUSALS = {
    JobState.IDLE: ("1", "Job Idle"),
    JobState.RUNNING: ("1", "Job Running"),
    JobState.REMOVED: ("1", "Job Removed"),
    JobState.COMPLETED: ("1", "Job Completed"),
    JobState.UNKNOWN: ("1", "Job not found"),
}


def parse_blah_id(blah_id: str) -> tuple[str, str]:
    """(lrms, native id) from `<lrms>/<YYYYMMDD>/<native id>`; the last component is the id."""
    lrms, sep, rest = blah_id.partition("/")
    native_id = rest.rsplit("/", 1)[-1]
    if not (lrms and sep and native_id):
        raise _BadJobId(f"Malformed jobId {blah_id}")
    return lrms.lower(), native_id


def status_ad(
    status: NativeStatus, record: JobRecord | None, *, blah_id: str | None = None
) -> tuple[int, str]:
    """The JobStatus to report and the status ad, in new ClassAd syntax on one line."""
    wallclock = status.wallclock_seconds
    ad = blah.StatusAd(
        job_status=int(status.state),
        batch_id=status.native_id,
        blah_id=blah_id,
        exit_code=status.exit_code,
        exit_signal=status.exit_signal,
        exit_reason=status.reason or None,
        wallclock=None if wallclock is None else round(wallclock, 3),
    )
    if record is not None and record.stage_error is not None:
        ad = replace(
            ad,
            job_status=int(JobState.HELD),
            hold_reason=record.stage_error,
            hold_code=HOLD_TRANSFER_OUTPUT,
            hold_subcode=record.stage_errno,
        )
    return ad.job_status, ad.text()


def _error_ad(blah_id: str, reason: str) -> str:
    return blah.StatusAd(0, blah_id=blah_id, error=reason).text()


def _with_ids(record: JobRecord, native_id: str, blah_id: str) -> JobRecord:
    return replace(record, native_id=native_id, blah_id=blah_id)


def _replace_proxy(target: Path, proxy: str) -> None:
    """Put the new proxy where the job finds its old one, atomically."""
    tmp = target.with_name(target.name + ".new")
    tmp.write_bytes(Path(proxy).read_bytes())
    tmp.chmod(0o600)
    tmp.replace(target)
