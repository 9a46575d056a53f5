"""Which requests a batch of CONDOR_JOB_SUBMITs becomes, against a daemon with the one-request
route (POST /v1/jobs) and against an older one without it."""

from __future__ import annotations

import asyncio
import json

import httpx

from htgrid.backends.condor._batch import send_submits
from htgrid.backends.condor._http import Endpoint
from htgrid.classad import ClassAd


def _daemon(older: bool, seen: list[str]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.url.path == "/v1/clusters":
            return httpx.Response(201, json={"cluster": 7})
        if request.url.path == "/v1/jobs" and older:  # GET only: POST is not allowed
            return httpx.Response(405, json={"title": "Method Not Allowed"})
        procs = json.loads(request.content)["procs"]
        return httpx.Response(
            201, json={"cluster": 7, "jobs": [f"7.{p}" for p in range(len(procs))]}
        )

    return httpx.MockTransport(answer)


def _send(older: bool, batches: list[list[ClassAd]]) -> tuple[list[object], list[str]]:
    seen: list[str] = []

    async def main() -> list[object]:
        transport = _daemon(older, seen)
        async with httpx.AsyncClient(transport=transport, base_url="https://b.test") as client:
            schedd = Endpoint("https://b.test", "the schedd at b.test", client)
            return [await send_submits(schedd, batch) for batch in batches]

    return asyncio.run(main()), seen


def test_each_batch_is_one_request() -> None:
    ads = [ClassAd({"Cmd": "a", "N": n}) for n in range(3)]
    results, seen = _send(False, [ads[:2], ads[2:]])
    assert results == [[("S", "7.0", "NULL"), ("S", "7.1", "NULL")], [("S", "7.0", "NULL")]]
    assert seen == ["POST /v1/jobs", "POST /v1/jobs"]


def test_an_older_daemon_is_sent_a_reserve_then_a_submit_from_then_on() -> None:
    ads = [ClassAd({"Cmd": "a", "N": n}) for n in range(3)]
    results, seen = _send(True, [ads[:2], ads[2:]])
    assert results == [[("S", "7.0", "NULL"), ("S", "7.1", "NULL")], [("S", "7.0", "NULL")]]
    assert seen == [
        "POST /v1/jobs",  # 405: asked once
        "POST /v1/clusters",
        "POST /v1/clusters/7/jobs",
        "POST /v1/clusters",
        "POST /v1/clusters/7/jobs",
    ]
