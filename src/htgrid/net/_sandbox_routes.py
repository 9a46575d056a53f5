"""The routes that move sandboxes and leases (HTCondor-C's remote side).

    PUT  /v1/jobs/{c.p}/input    a plain tar, unpacked into the job's spool directory
    PUT  /v1/jobs/input          one tar for several jobs (`12.0/file`, `12.1/file`):
                                 {"jobs": {"12.0": "ok", "12.1": <problem document>}}
    GET  /v1/jobs/{c.p}/output   the job's output sandbox as a plain tar
    POST /v1/jobs/output         {"jobs": ["12.0", "12.1"]}: their outputs in one tar,
                                 `jobs.json` first ({"12.0": {"ad": <ad>}, "12.1":
                                 <problem document>}), then `12.0/out.txt`...
    POST /v1/jobs/lease          {"leases": {"c.p": <epoch seconds>, ...}}

Sandboxes stream: the upload is handed to the backend as it arrives (the backend writes
it to disk and refuses it, 413, past MAX_TRANSFER_INPUT_MB), and the output tar is sent
from the backend's file a MiB at a time, its reads off the event loop. In a batch each
job is answered on its own (its ad and files, or a 404, 403 or 413 problem document),
so one job refused does not fail the others.

Handlers only: `app.ROUTES` lists them with the others.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, BinaryIO, Final

from starlette.responses import JSONResponse, Response, StreamingResponse

from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.net._errors import BadRequest
from htgrid.net._problems import to_problem
from htgrid.queue import ID_MAX, JobId

if TYPE_CHECKING:
    from htgrid.net.app import _Call

__all__ = [
    "MAX_OUTPUT_JOBS",
    "TAR",
    "get_output",
    "get_outputs",
    "job_id_of",
    "put_input",
    "put_inputs",
    "put_proxy",
    "update_leases",
]

TAR: Final = "application/x-tar"
_TAR_TYPES: Final = frozenset({TAR, "application/octet-stream"})
_CHUNK: Final = 1 << 20
#: The most jobs one POST /v1/jobs/output may name.
MAX_OUTPUT_JOBS: Final = 1000


def job_id_of(call: _Call) -> JobId:
    """The job id of the request's path (BadRequest when it is not `cluster.proc`)."""
    try:
        return JobId.parse(call.request.path_params["job_id"])
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _tar_length(call: _Call) -> int | None:
    """The declared length of a tar body (BadRequest when it is not sent as a tar)."""
    media = call.request.headers.get("content-type", TAR).split(";", 1)[0].strip().lower()
    if media not in _TAR_TYPES:
        raise BadRequest(f"the input sandbox must be sent as {TAR}, not {media}")
    declared = call.request.headers.get("content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


async def put_input(call: _Call) -> Response:
    job_id = job_id_of(call)
    length = _tar_length(call)
    ids = await call.backend.put_input(call.identity, job_id, call.request.stream(), length)
    return JSONResponse({"jobs": [str(i) for i in ids]})


#: The largest proxy file taken (a proxy and its chain are a few KiB).
MAX_PROXY_BYTES: Final = 1 << 20


async def put_proxy(call: _Call) -> Response:
    """A spooled job's renewed X.509 proxy (the body: the PEM file)."""
    job_id = job_id_of(call)
    data = bytearray()
    async for chunk in call.request.stream():
        data += chunk
        if len(data) > MAX_PROXY_BYTES:
            raise BadRequest(f"a proxy file is at most {MAX_PROXY_BYTES} bytes")
    if not data:
        raise BadRequest("the body is empty: it must be the job's X.509 proxy file")
    await call.backend.put_proxy(call.identity, job_id, bytes(data))
    return JSONResponse({"jobs": [str(job_id)]})


async def put_inputs(call: _Call) -> Response:
    """Several jobs' inputs in one tar; each job's outcome on its own ("ok" or a problem
    document), so one refused job does not fail the others."""
    length = _tar_length(call)
    outcome = await call.backend.put_inputs(call.identity, call.request.stream(), length)
    jobs = {
        str(job_id): "ok" if error is None else to_problem(error)
        for job_id, error in sorted(outcome.items())
    }
    return JSONResponse({"jobs": jobs})


async def _chunks(tar: BinaryIO) -> AsyncIterator[bytes]:
    try:
        while chunk := await asyncio.to_thread(tar.read, _CHUNK):
            yield chunk
    finally:
        tar.close()


async def get_output(call: _Call) -> Response:
    tar = await call.backend.get_output(call.identity, job_id_of(call))
    size = os.fstat(tar.fileno()).st_size
    headers = {"Content-Length": str(size)}
    return StreamingResponse(_chunks(tar), media_type=TAR, headers=headers)


async def get_outputs(call: _Call) -> Response:
    """Several jobs' outputs in one tar; each job's ad or refusal in `jobs.json`."""
    body = await call.json()
    named = body.get("jobs")
    if not isinstance(named, list) or not named:
        raise BadRequest('"jobs" must be a non-empty list of job ids ("cluster.proc")')
    if len(named) > MAX_OUTPUT_JOBS:
        raise BadRequest(f'"jobs" names {len(named)} jobs, over the {MAX_OUTPUT_JOBS} a request')
    job_ids: dict[JobId, None] = {}  # in order, each once
    for text in named:
        try:
            if not isinstance(text, str):
                raise ValueError(f"not a job id (cluster.proc): {json.dumps(text)}")
            job_ids[JobId.parse(text)] = None
        except ValueError as exc:
            raise BadRequest(f'"jobs": {exc}') from None
    tar = await call.backend.get_outputs(call.identity, list(job_ids), _describe)
    size = os.fstat(tar.fileno()).st_size
    headers = {"Content-Length": str(size)}
    return StreamingResponse(_chunks(tar), media_type=TAR, headers=headers)


def _describe(answers: Mapping[JobId, ClassAd | HTGridError]) -> bytes:
    """`jobs.json` of a batch of outputs: per job `{"ad": <its ad>}` or its problem."""
    parts = []
    for job_id, answer in answers.items():
        if isinstance(answer, ClassAd):
            value = '{"ad": ' + answer.printJson() + "}"  # the ad's JSON text as is
        else:
            value = json.dumps(to_problem(answer))
        parts.append(f"{json.dumps(str(job_id))}: {value}")
    return ("{" + ",\n".join(parts) + "}").encode("utf-8")


async def update_leases(call: _Call) -> Response:
    body = await call.json()
    leases = body.get("leases")
    if not isinstance(leases, dict):
        raise BadRequest('"leases" must map job ids ("cluster.proc") to epoch seconds')
    parsed: dict[JobId, int] = {}
    for text, expiration in leases.items():
        try:
            job_id = JobId.parse(text)
        except ValueError as exc:
            raise BadRequest(f'"leases": {exc}') from None
        if type(expiration) is not int or not 0 <= expiration <= ID_MAX:
            raise BadRequest(f'"leases": the expiration of {text} must be epoch seconds')
        parsed[job_id] = expiration
    ids = await call.backend.update_leases(call.identity, parsed)
    return JSONResponse({"jobs": [str(i) for i in ids]})
