"""CONDOR_JOB_STAGE_OUT coalesced below the protocol: one HTTPS request for many jobs.

Fetched one by one, a job's output costs two requests to the remote schedd (its ad, to
know where the files go, then its tar), which compete with the jobs it is still running.
The stage-outs for one schedd that wait together (see _batch.Coalescer) go as one

    POST /v1/jobs/output {"jobs": ["12.0", "12.1"]}

whose answer is one tar: `jobs.json` first (`{"12.0": {"ad": <ad>}, "12.1": <problem
document>}`), then each answered job's files under its id (`12.0/out.txt`). Each job is
unpacked on its own, into the places its own ad names, with the checks and atomic
writes of a single stage-out, and each request gets the result line a single stage-out
would have had (`Job not found`, `Transfer output too large: ...`, `Error receiving
files from ...`). A daemon that does not know the route (remembered per schedd), or
that refuses a batch as a whole, gets each job's stage-out on its own, as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tarfile
from collections.abc import Sequence
from typing import IO, Any, Final

import htgrid.classad as classad
from htgrid.backends.condor import _sandbox as sandbox
from htgrid.backends.condor._batch import Coalescer
from htgrid.backends.condor._errors import (
    RemoteRefusal,
    SandboxError,
    refusal_message,
)
from htgrid.backends.condor._http import Endpoint
from htgrid.classad import adjson
from htgrid.gahp.commands import condor

__all__ = ["MOST", "StageOuts"]

log = logging.getLogger("htgrid.gahp.condor")

Fields = tuple[str, ...]
Outcome = Fields | BaseException

#: The most jobs fetched in one request (the daemon takes up to 1000).
MOST: Final = 200
INDEX: Final = "jobs.json"  # the batch tar's first member
ROUTE: Final = "/v1/jobs/output"


class StageOuts:
    """The GAHP's stage-outs: those to one schedd waiting together fetched in one request.

    `files` bounds the sandboxes being received and unpacked at once (shared with the
    stage-ins); a batch holds one place in it.
    """

    def __init__(self, files: asyncio.Semaphore, *, window: float, most: int = MOST) -> None:
        self._files = files
        self.batches: Coalescer[tuple[Endpoint, str], Fields] = Coalescer(
            self._send, window=window, most=most
        )
        self._without_route: set[str] = set()  # schedds (URLs) answering 404/405 to it

    async def fetch(self, schedd: Endpoint, job_id: str) -> Fields:
        """Job `job_id`'s output written into its local places; its result line."""
        return await self.batches.add(schedd.url, (schedd, job_id))

    async def _send(self, _: str, items: list[tuple[Endpoint, str]]) -> list[Outcome]:
        schedd = items[0][0]
        job_ids = [job_id for _, job_id in items]
        if schedd.url not in self._without_route:
            try:
                return await self._fetch_batch(schedd, job_ids)
            except RemoteRefusal as err:
                if err.status in (401, 403) or err.status >= 500:
                    # What each job's own request would have heard.
                    return [
                        condor.Done(f"Error receiving files from {schedd.what}: {err}").fields()
                    ] * len(job_ids)
                if err.status in (404, 405) and not err.error:  # no problem document: no route
                    log.info("%s has no %s: fetching outputs one by one", schedd.what, ROUTE)
                    self._without_route.add(schedd.url)
                else:
                    log.info("%s refused a batch of %d outputs: %s", schedd.what, len(items), err)
            except SandboxError as err:  # the answer as a whole is unusable
                log.warning("batch of %d outputs from %s: %s", len(items), schedd.what, err)
        # Each on its own, so that each hears its own answer.
        singles = [self._fetch_one(schedd, job_id) for job_id in job_ids]
        return list(await asyncio.gather(*singles, return_exceptions=True))

    async def _fetch_batch(self, schedd: Endpoint, job_ids: list[str]) -> list[Outcome]:
        async with self._files:
            tar = await asyncio.to_thread(sandbox.scratch_file)
            try:
                named = list(dict.fromkeys(job_ids))  # a job asked for twice is sent once
                await schedd.download(ROUTE, tar, json_body={"jobs": named})
                results = await asyncio.to_thread(unpack_outputs, tar, job_ids, schedd.what)
            finally:
                await sandbox.close_scratch(tar)
        for job_id, result in zip(job_ids, results, strict=True):
            if result == condor.Done().fields():
                log.info("job %s: output files written", job_id)
        return list(results)

    async def _fetch_one(self, schedd: Endpoint, job_id: str) -> Fields:
        """One job's stage-out on its own: its ad, then its tar (GET /v1/jobs/{c.p}/output)."""
        async with self._files:
            tar: IO[bytes] | None = None
            try:
                response = await schedd.request("GET", f"/v1/jobs/{job_id}")
                ad = await asyncio.to_thread(_job_ad, response.content, job_id)
                if ad is None:
                    return condor.Done(condor.JOB_NOT_FOUND).fields()
                tar = await asyncio.to_thread(sandbox.scratch_file)
                await schedd.download(f"/v1/jobs/{job_id}/output", tar)
                written = await asyncio.to_thread(sandbox.unpack_output, tar, ad)
            except RemoteRefusal as err:
                return _refused(schedd.what, err.status, err.error, err.detail, str(err))
            except SandboxError as err:
                return condor.Done(f"Error receiving files from {schedd.what}: {err}").fields()
            finally:
                if tar is not None:
                    await sandbox.close_scratch(tar)
        log.info("job %s: %d output files written", job_id, len(written))
        return condor.Done().fields()


def _refused(what: str, status: int, error: str, detail: str, message: str) -> Fields:
    """The result line of a stage-out the remote daemon refused (`message`: its words)."""
    if status == 404 and error == "JobNotFound":
        return condor.Done(condor.JOB_NOT_FOUND).fields()
    if status == 413:
        return condor.Done(f"{condor.OUTPUT_TOO_LARGE}{detail} (refused by {what})").fields()
    return condor.Done(f"Error receiving files from {what}: {message}").fields()


def _problem_line(what: str, job_id: str, problem: dict[str, Any]) -> Fields:
    """The result line of one job of a batch the daemon refused, from its problem document
    (the words `refusal_of` gives the same refusal of the job's own request)."""
    status = problem.get("status")
    status = status if isinstance(status, int) else 0
    detail = str(problem.get("detail") or problem.get("title") or "refused")
    message = refusal_message(what, status, detail)
    return _refused(what, status, str(problem.get("error") or ""), detail, message)


def unpack_outputs(tar_file: IO[bytes], job_ids: Sequence[str], what: str) -> list[Fields]:
    """The result line of each of `job_ids` (in order) from the batch tar in `tar_file`,
    each answered job's files written where its own ad says. Blocking: run it in a thread.

    SandboxError when the tar as a whole is unusable (not a tar, no index first, a member
    outside every answered job's directory): then nothing has been written.
    """
    try:
        tar_file.seek(0)
        with tarfile.open(fileobj=tar_file, mode="r:") as tar:
            index, members = _read_index(tar)
            results: dict[str, Fields] = {}
            for job_id in job_ids:
                if job_id not in results:
                    answer = index.get(job_id)
                    results[job_id] = _unpack_one(tar, job_id, answer, members, what)
            return [results[job_id] for job_id in job_ids]
    except tarfile.TarError as exc:
        raise SandboxError(f"the batch of outputs is not a tar stream: {exc}") from None
    except OSError as exc:
        raise SandboxError(f"cannot read the batch of outputs received: {exc}") from None


Members = dict[str, list[tuple[str, tarfile.TarInfo]]]  # job id -> (name in its sandbox, member)


def _read_index(tar: tarfile.TarFile) -> tuple[dict[str, Any], Members]:
    """`jobs.json` of a batch tar, and the other members by job."""
    listed = tar.getmembers()
    first = tar.extractfile(listed[0]) if listed and listed[0].name == INDEX else None
    if first is None:
        raise SandboxError(f"the batch of outputs does not start with {INDEX}")
    try:
        index = adjson.loads(first.read())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SandboxError(f"{INDEX} of the batch of outputs is not JSON: {exc}") from None
    if not isinstance(index, dict):
        raise SandboxError(f"{INDEX} of the batch of outputs is not a JSON object")
    members: Members = {}
    for member in listed[1:]:
        job_id, _, rest = member.name.partition("/")
        answer = index.get(job_id)
        if not isinstance(answer, dict) or "ad" not in answer:
            raise SandboxError(
                f"the batch of outputs holds {member.name!r}, outside every answered job's "
                "directory"
            )
        if rest.strip("/"):
            members.setdefault(job_id, []).append((rest, member))
    return index, members


def _unpack_one(
    tar: tarfile.TarFile, job_id: str, answer: object, members: Members, what: str
) -> Fields:
    if not isinstance(answer, dict):
        return condor.Done(
            f"Error receiving files from {what}: it did not answer for job {job_id}"
        ).fields()
    if "ad" not in answer:
        return _problem_line(what, job_id, answer)
    try:
        ad = _ad_of(answer["ad"], job_id)
        if ad is None:
            return condor.Done(condor.JOB_NOT_FOUND).fields()
        sandbox.write_output(tar, members.get(job_id, []), ad)
    except SandboxError as err:
        return condor.Done(f"Error receiving files from {what}: {err}").fields()
    return condor.Done().fields()


def _ad_of(obj: object, job_id: str) -> classad.ClassAd | None:
    """The job ad of the index (None when it is empty: no such job), as far as writing
    its output reads it."""
    if not isinstance(obj, dict):
        raise SandboxError(f"the ad of job {job_id} in {INDEX} is not a JSON object")
    if not obj:
        return None
    plain = _plain_output_attrs(obj)
    if plain is not None:
        return plain
    text = adjson.dumps(obj)
    try:
        return classad.parseOne(text, classad.ParserType.JSON)
    except classad.ClassAdException as exc:
        raise SandboxError(f"the ad of job {job_id} does not parse: {exc}") from None


_OUTPUT_NAMES: Final = frozenset(name.lower() for name in sandbox.OUTPUT_ATTRS)


def _plain_output_attrs(obj: dict[str, Any]) -> classad.ClassAd | None:
    """The attributes `sandbox.write_output` reads of a job ad decoded by `adjson.loads`,
    when each is a plain value; None when one is an expression (it may refer to any other
    attribute, so the whole ad is parsed). A status ad has a hundred attributes and the
    output needs seven: parsing all of them was most of a batch stage-out's cost."""
    ad = classad.ClassAd()
    for name, value in obj.items():
        if name.lower() not in _OUTPUT_NAMES:
            continue
        kind = type(value)
        if (kind is str and not value.startswith(adjson.EXPR_MARK)) or kind in (int, float, bool):
            ad[name] = value
        else:
            return None
    return ad


def _job_ad(body: bytes, job_id: str) -> classad.ClassAd | None:
    """The ad of GET /v1/jobs/{c.p}'s answer, `{"jobs": [<ad>]}` (None: no such job)."""
    try:
        answer = adjson.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SandboxError(f"the ad of job {job_id} received is not JSON: {exc}") from None
    ads = answer.get("jobs") if isinstance(answer, dict) else None
    if not isinstance(ads, list):
        raise SandboxError(f"the answer for job {job_id} holds no list of jobs")
    return _ad_of(ads[0], job_id) if ads else None
