"""Coalescing below the protocol: concurrent per-job requests to one schedd, one HTTPS call.

HTCondor's C-GAHP submits and stages in one job per request, and stays so on the GAHP
line; a grid manager with 1,000 jobs sends 1,000 of each. Sent one by one, each is its
own HTTPS round trip and its own transaction on the remote queue. Here the requests for
the same schedd that are waiting together are sent as one:

    CONDOR_JOB_SUBMIT x n    -> POST /v1/jobs (a new cluster of n procs)
    CONDOR_JOB_STAGE_IN x n  -> PUT /v1/jobs/input (one tar, a directory per job)

A batch is whatever is waiting when one of the (two) batches out for that schedd has been
answered, plus what comes within `window` (2 ms), up to `most` requests or `heaviest`
bytes; no request waits longer than that for company. Each request still gets its own
answer: a batch the daemon refuses as a whole (one ad it will not queue) is sent again one
request at a time, so only the bad one fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final, Generic, TypeVar

import htgrid.classad as classad
from htgrid.backends.condor._errors import (
    RemoteRefusal,
    SandboxError,
    refusal_message,
)
from htgrid.backends.condor._http import Endpoint, FileBody
from htgrid.backends.condor._sandbox import InputEntry, InputTar, scratch_file
from htgrid.gahp.commands import condor

__all__ = ["Coalescer", "StageIn", "send_stage_ins", "send_submits"]

T = TypeVar("T")
R = TypeVar("R")
Fields = tuple[str, ...]
Outcome = Fields | BaseException  # one request's result, or what it raises


class Coalescer(Generic[T, R]):
    """Gathers the items added at once under one key and sends them in one `send`.

    `send(key, items)` returns one result per item (an exception instance: that item's
    caller raises it); if `send` raises, every caller of the batch does. At most
    `in_flight` batches of one key are out at once; the next one gathers meanwhile.
    """

    def __init__(
        self,
        send: Callable[[str, list[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        window: float = 0.002,
        most: int = 500,
        weight: Callable[[T], int] = lambda item: 0,
        heaviest: int = 0,
        in_flight: int = 2,
    ) -> None:
        self._send = send
        self.window, self.most, self.in_flight = window, most, in_flight
        self._weight, self._heaviest = weight, heaviest
        self._waiting: dict[str, list[tuple[T, asyncio.Future[R]]]] = {}
        self._full: dict[str, asyncio.Event] = {}
        self._runners: dict[str, asyncio.Task[None]] = {}
        self._slots: dict[str, asyncio.Semaphore] = {}  # batches out at once, per key
        self._delivering: set[asyncio.Task[None]] = set()
        #: Sizes of the batches sent, in order (for tests and benchmarks).
        self.sent: list[int] = []

    async def add(self, key: str, item: T) -> R:
        """`item`'s result, once the batch it went in is answered."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(key, [])
        waiting.append((item, future))
        full = self._full.setdefault(key, asyncio.Event())
        if len(waiting) >= self.most:
            full.set()
        if key not in self._runners:
            self._runners[key] = asyncio.create_task(self._run(key))
        return await future

    async def _run(self, key: str) -> None:
        slots = self._slots.setdefault(key, asyncio.Semaphore(self.in_flight))
        try:
            while self._waiting.get(key):
                await slots.acquire()  # the next batch gathers while the others are out
                full = self._full[key]
                if len(self._waiting[key]) < self.most:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(full.wait(), self.window)
                batch = self._take(key)
                full.clear()
                if len(self._waiting[key]) >= self.most:
                    full.set()
                if not batch:
                    slots.release()
                    continue
                task = asyncio.create_task(self._deliver(key, batch))
                self._delivering.add(task)
                task.add_done_callback(self._delivering.discard)
                task.add_done_callback(lambda _: slots.release())
        finally:
            del self._runners[key]
            if not self._waiting.get(key):
                self._waiting.pop(key, None)
                self._full.pop(key, None)

    def _take(self, key: str) -> list[tuple[T, asyncio.Future[R]]]:
        waiting = self._waiting[key]
        count, load = 0, 0
        for item, _future in waiting[: self.most]:
            load += self._weight(item)
            if count and self._heaviest and load > self._heaviest:
                break
            count += 1
        batch, self._waiting[key] = waiting[:count], waiting[count:]
        # Requests cancelled while waiting (their callers gave up) are not sent.
        return [(item, future) for item, future in batch if not future.done()]

    async def _deliver(self, key: str, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        if not batch:
            return
        self.sent.append(len(batch))
        try:
            results = await self._send(key, [item for item, _ in batch])
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except BaseException as exc:  # everyone in the batch hears it
            results = [exc] * len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)


# ---- submits -----------------------------------------------------------------------------


async def send_submits(schedd: Endpoint, procs: list[classad.ClassAd]) -> list[Outcome]:
    """Queue the job ads `procs` (one per request) as one remote cluster; each request's
    result line. A refused batch is sent again one ad at a time."""
    try:
        return await _submit_cluster(schedd, procs)
    except RemoteRefusal as err:
        if len(procs) == 1 or err.status in (401, 403) or err.status >= 500:
            raise
        # The daemon queues a cluster whole or not at all: one bad ad refused them all.
        # Each on its own (its own cluster), so each request hears its own answer.
        singles = await asyncio.gather(
            *(_submit_cluster(schedd, [proc]) for proc in procs), return_exceptions=True
        )
        return [_one_answer(result) for result in singles]


def _one_answer(result: list[Outcome] | BaseException) -> Outcome:
    """A single submit's result line (its refusal as the F line a lone submit gets)."""
    if isinstance(result, RemoteRefusal):
        return condor.Submitted("-1.-1", str(result)).fields()
    return result[0] if isinstance(result, list) else result


async def _submit_cluster(schedd: Endpoint, procs: list[classad.ClassAd]) -> list[Outcome]:
    # The daemon sets Owner from the token whatever the ads say.
    body = cluster_body(procs).encode("utf-8")
    headers = {"content-type": "application/json"}
    if schedd.submits_new:  # a new cluster and its procs in one request
        try:
            answer = await schedd.json("POST", "/v1/jobs", content=body, headers=headers)
        except RemoteRefusal as err:
            if err.status not in (404, 405):
                raise
            schedd.submits_new = False  # an older htgrid, from now on
        else:
            return _queued(schedd, answer, len(procs))
    reserved = await schedd.json("POST", "/v1/clusters", json_body={})
    path = f"/v1/clusters/{reserved.get('cluster')}/jobs"
    return _queued(
        schedd, await schedd.json("POST", path, content=body, headers=headers), len(procs)
    )


def _queued(schedd: Endpoint, answer: dict[str, Any], count: int) -> list[Outcome]:
    """Each submit's result line from the daemon's answer to a cluster of `count` procs."""
    jobs = answer.get("jobs")
    if not isinstance(jobs, list) or len(jobs) != count:
        problem = f"{schedd.what} did not say which jobs it queued"
        return [condor.Submitted(f"{answer.get('cluster')}.-1", problem).fields()] * count
    return [condor.Submitted(str(job)).fields() for job in jobs]


#: Attributes each proc keeps in its own ad even when every job of the batch has the same
#: value: the queue reads a proc's status (and its hold reason) from the proc itself.
_PER_PROC: Final = frozenset({"jobstatus", "holdreason", "holdreasoncode", "holdreasonsubcode"})


def cluster_body(procs: Sequence[classad.ClassAd]) -> str:
    """The body of `POST /v1/jobs` (and `/v1/clusters/{c}/jobs`) for these job ads, in
    HTCondor's JSON.

    The attributes every ad has the same go once, in the cluster ad, and each proc keeps
    only its own: the remote queue then stores (and reads back at every edit, poll and
    periodic pass) a shared cluster ad and small procs, as for a direct submit of one
    cluster, instead of a thousand whole ads. Each job's ad, the cluster's overlaid by
    its proc's, is unchanged.
    """
    if len(procs) < 2:
        common, own = classad.ClassAd(), list(procs)
    else:
        common, own = classad.common_attrs(procs, _PER_PROC)
    return (
        '{"cluster_ad": '
        + common.printJson()
        + ', "procs": ['
        + ", ".join(proc.printJson() for proc in own)
        + "]}"
    )


# ---- stage-ins ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageIn:
    """One job's input: its remote id, its files as stat saw them, and about their tar's
    bytes (the batch's weight)."""

    job_id: str
    entries: tuple[InputEntry, ...]
    size: int


def batch_tar(
    items: Sequence[StageIn], out: IO[bytes] | None = None
) -> tuple[IO[bytes], int, dict[str, SandboxError]]:
    """One tar of the jobs' input files, each job's members under its id (`12.0/`,
    `12.0/in`), written straight from the files into `out` (a new temporary file by
    default): the file, its size, and the jobs left out because a file of theirs could
    not be read. Blocking when files are read: run it in a thread then."""
    out = scratch_file() if out is None else out
    try:
        tar = InputTar(out)
        left_out: dict[str, SandboxError] = {}
        for item in items:
            try:
                tar.add(item.entries, top=item.job_id)
            except SandboxError as err:
                left_out[item.job_id] = err
        return out, tar.finish(), left_out
    except OSError as exc:
        out.close()
        raise SandboxError(f"cannot write the input tar of {len(items)} jobs: {exc}") from None
    except BaseException:
        out.close()
        raise


async def send_stage_ins(
    schedd: Endpoint, items: list[StageIn], one: Callable[[StageIn], Awaitable[Fields]]
) -> list[Outcome]:
    """Upload the inputs of `items` in one PUT /v1/jobs/input (a lone job's too: its tar
    is written the same way); each job's result line.

    A job whose files cannot be read fails alone. A refusal of the whole upload (a daemon
    without the route, a body over its limit...) sends each job's input on its own with
    `one`.
    """
    # Jobs with no files (a directory entry each, 512 bytes) are written here, in memory:
    # in a thread, each write to a temporary file would wait for the GIL (see stage_in).
    try:
        if all(not item.entries for item in items):
            tar, size, left_out = batch_tar(items, io.BytesIO())
        else:
            tar, size, left_out = await asyncio.to_thread(batch_tar, items)
    except SandboxError:
        return list(await asyncio.gather(*(one(item) for item in items), return_exceptions=True))
    try:
        sent = [item for item in items if item.job_id not in left_out]
        answers: dict[str, Any] = {}
        if sent:
            body = tar.getvalue() if isinstance(tar, io.BytesIO) else FileBody(tar, size)
            try:
                response = await schedd.upload("/v1/jobs/input", body, "application/x-tar")
            except (RemoteRefusal, SandboxError) as err:
                if isinstance(err, RemoteRefusal) and (
                    err.status in (401, 403) or err.status >= 500
                ):
                    raise
                # Each on its own, so that each hears its own answer (or the local problem).
                singles = await asyncio.gather(
                    *(one(item) for item in sent), return_exceptions=True
                )
                answers = {item.job_id: result for item, result in zip(sent, singles, strict=True)}
            else:
                answers = {
                    job_id: _staged(schedd, job_id, answer)
                    for job_id, answer in _answers(response.content).items()
                }
    finally:
        if isinstance(tar, io.BytesIO):
            tar.close()
        else:
            await asyncio.shield(asyncio.to_thread(tar.close))
    return [
        _unsent(schedd, left_out[item.job_id])
        if item.job_id in left_out
        else answers.get(item.job_id) or _staged(schedd, item.job_id, None)
        for item in items
    ]


def _answers(body: bytes) -> dict[str, Any]:
    """The per-job part of a batch upload's answer, `{"jobs": {"12.0": "ok", ...}}`."""
    try:
        answers = json.loads(body).get("jobs")
    except (ValueError, AttributeError):
        answers = None
    return answers if isinstance(answers, dict) else {}


def _unsent(schedd: Endpoint, err: SandboxError) -> Fields:
    return condor.Done(f"Error sending files to {schedd.what}: {err}").fields()


def _staged(schedd: Endpoint, job_id: str, answer: Any) -> Fields:
    """The result line of one job of a batch upload, from its part of the answer."""
    if answer == "ok":
        return condor.Done().fields()
    if not isinstance(answer, dict):
        return condor.Done(
            f"Error sending files to {schedd.what}: it did not answer for job {job_id}"
        ).fields()
    # The words a refusal of the job's own upload has (refusal_of), for the same reasons.
    detail = str(answer.get("detail") or answer.get("title") or "refused")
    status = answer.get("status")
    if status == 413:
        return condor.Done(f"{condor.INPUT_TOO_LARGE}{detail} (refused by {schedd.what})").fields()
    refusal = refusal_message(schedd.what, status if isinstance(status, int) else 0, detail)
    return condor.Done(f"Error sending files to {schedd.what}: {refusal}").fields()
