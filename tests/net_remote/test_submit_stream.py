"""A streamed submit (NDJSON: the cluster ad, then batches of procs, then the count):
it queues what the same procs in one JSON body queue, and a stream that breaks off or
does not end as it must queues nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.testing import PersonalPool

from ._support import VANILLA

COUNT = 2500  # more than one batch of the client's (1000 procs)


def _cluster_ad() -> ClassAd:
    return ClassAd({"Cmd": "/bin/echo", "JobUniverse": VANILLA, "Iwd": "/submit/dir"})


def _proc(number: int) -> ClassAd:
    """Every third proc has arguments of its own, the others nothing."""
    return ClassAd({"Args": f"item {number}"} if number % 3 == 0 else {})


def _ads(schedd: ScheddClient, cluster: int) -> list[dict[str, Any]]:
    """The cluster's queued ads, less what differs from one cluster to the next."""
    ads = schedd.query(f"ClusterId == {cluster}")
    skip = {"ClusterId", "QDate", "EnteredCurrentStatus", "GlobalJobId"}
    return [{k: v for k, v in ad.items() if k not in skip} for ad in ads]


def _clusters(schedd: ScheddClient, cluster: int) -> list[ClassAd]:
    return schedd.query(f"ClusterId == {cluster}", ["ProcId"])


def test_a_streamed_submit_queues_what_one_body_does(alice: ScheddClient) -> None:
    whole = alice.reserve_cluster()
    alice.submit(whole, _cluster_ad(), [_proc(n) for n in range(COUNT)])
    streamed = alice.reserve_cluster()
    sent: list[int] = []
    count = alice.submit_stream(
        streamed, _cluster_ad(), (_proc(n) for n in range(COUNT)), sent=sent.append
    )
    assert count == COUNT
    assert sent == [1000, 2000, COUNT]
    ads = _ads(alice, streamed)
    assert ads == _ads(alice, whole)
    assert [ad["ProcId"] for ad in ads] == list(range(COUNT))
    assert ads[3]["Args"] == "item 3" and "Args" not in ads[4]
    assert ads[0]["TotalSubmitProcs"] == COUNT


def test_a_stream_whose_procs_fail_midway_queues_nothing(alice: ScheddClient) -> None:
    class Broken(Exception):
        pass

    def procs() -> Iterator[ClassAd]:
        for number in range(COUNT):
            if number == 1500:  # after a batch has gone
                raise Broken("proc 1500 could not be built")
            yield _proc(number)

    cluster = alice.reserve_cluster()
    with pytest.raises(Broken):
        alice.submit_stream(cluster, _cluster_ad(), procs())
    assert _clusters(alice, cluster) == []
    assert alice.health()["status"] == "ok"  # and the daemon serves on


def _post(pool: PersonalPool, cluster: int, lines: list[object]) -> httpx.Response:
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    transport = httpx.HTTPTransport(uds=str(pool.config.socket))
    with httpx.Client(transport=transport, base_url="http://htgrid", timeout=60) as http:
        return http.post(
            f"/v1/clusters/{cluster}/jobs",
            content=iter([body]),  # chunked, as a stream comes
            headers={"content-type": "application/x-ndjson"},
        )


AD = {"Cmd": "/bin/true", "JobUniverse": VANILLA, "Iwd": "/tmp"}


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (
            [{"cluster_ad": AD}, {"procs": [{}, {}]}],
            'stopped before its {"end": N} line: nothing was queued',
        ),
        ([{"cluster_ad": AD}, {"procs": [{}, {}]}, {"end": 3}], "says it sent 3 procs; 2 came"),
        ([{"procs": [{}]}, {"end": 1}], 'first line of a streamed submit must be {"cluster_ad"'),
        ([{"cluster_ad": AD}, {"proc": {}}, {"end": 1}], 'lines are {"procs": [...]}'),
        ([{"cluster_ad": AD}, {"end": 0}, {"procs": [{}]}], 'ends with its {"end": N} line'),
        (
            [{"cluster_ad": AD}, {"procs": [{}, {"ProcId": 7}]}, {"end": 2}],
            "ProcId",
        ),  # checked as it comes: 422
        ([], "the streamed submit is empty"),
    ],
)
def test_a_stream_not_as_it_must_be_is_refused_and_queues_nothing(
    pool: PersonalPool, lines: list[object], said: str
) -> None:
    with pool.client() as schedd:
        cluster = schedd.reserve_cluster()
    answer = _post(pool, cluster, lines)
    assert answer.status_code == (422 if said == "ProcId" else 400), answer.text
    assert said in answer.json()["detail"]
    with pool.client() as schedd:
        assert _clusters(schedd, cluster) == []


def test_a_streamed_submit_to_a_new_cluster(pool: PersonalPool) -> None:
    transport = httpx.HTTPTransport(uds=str(pool.config.socket))
    lines = [{"cluster_ad": AD}, {"procs": [{}, {"Args": "x"}]}, {"end": 2}]
    body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    with httpx.Client(transport=transport, base_url="http://htgrid", timeout=60) as http:
        answer = http.post(
            "/v1/jobs", content=body, headers={"content-type": "application/x-ndjson"}
        )
    assert answer.status_code == 201, answer.text
    cluster = answer.json()["cluster"]
    assert answer.json()["procs"] == 2
    with pool.client() as schedd:
        ads = schedd.query(f"ClusterId == {cluster}", ["ProcId", "Args"])
    assert [(ad["ProcId"], ad.get("Args")) for ad in ads] == [(0, None), (1, "x")]
