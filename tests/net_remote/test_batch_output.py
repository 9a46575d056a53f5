"""POST /v1/jobs/output: several jobs' output sandboxes in one tar, `jobs.json` first, each
job answered on its own: the owner's jobs with their ad and files, a job not in the
queue with 404, another user's with 403 (none of its files), one over
MAX_TRANSFER_OUTPUT_MB with 413."""

from __future__ import annotations

import io
import json
import ssl
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from htgrid.classad import ClassAd, ParserType, parseOne
from htgrid.net import ScheddClient
from htgrid.queue import JobId
from htgrid.testing import PersonalPool, wait_for

from ._support import LOCAL, SPOOLING, submit, tar_of
from .conftest import DOMAIN

MIB = 1 << 20


@pytest.fixture(scope="module")
def pool(
    shared_tmp_factory: Callable[[str], Path], test_users: tuple[str, ...]
) -> Iterator[PersonalPool]:
    config = {"TRUST_DOMAIN": DOMAIN, "MAX_TRANSFER_OUTPUT_MB": 1}
    home = shared_tmp_factory("batch-output") / "home"
    with PersonalPool(home, periodic_interval=0.5, fsync=False, config=config) as p:
        yield p


def client(pool: PersonalPool, user: str) -> ScheddClient:
    return pool.remote(pool.token(f"{user}@{DOMAIN}"))


def completed_job(schedd: ScheddClient, script: str, **attrs: Any) -> JobId:
    """A local-universe job that ran `script` in its spool directory and is kept completed."""
    job = submit(
        schedd,
        Cmd="job.sh",
        JobUniverse=LOCAL,
        LeaveJobInQueue=True,
        Out="job.out",
        **attrs,
        **SPOOLING,
    )
    schedd.put_input(job, tar_of({"job.sh": f"#!/bin/sh\n{script}".encode()}, mode=0o755))
    wait_for(lambda: schedd.get(job)["JobStatus"] == 4, what=f"job {job} to complete")
    return job


def post_outputs(pool: PersonalPool, user: str, body: object) -> httpx.Response:
    context = ssl.create_default_context(cafile=str(pool.home / "etc" / "ca" / "ca.crt"))
    headers = {"Authorization": f"Bearer {pool.token(f'{user}@{DOMAIN}')}"}
    with httpx.Client(base_url=pool.url, verify=context, headers=headers, timeout=30) as raw:
        return raw.post("/v1/jobs/output", json=body)


def read_batch(response: httpx.Response) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The index (first member, jobs.json) and the other files of a batch answer."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:") as tar:
        members = tar.getmembers()
        assert members[0].name == "jobs.json"
        files = {}
        for member in members:
            data = tar.extractfile(member)
            assert data is not None
            files[member.name] = data.read()
    return json.loads(files.pop("jobs.json")), files


def ad_of(answer: dict[str, Any]) -> ClassAd:
    ad = parseOne(json.dumps(answer["ad"]).replace('"/Expr(', '"\\/Expr('), ParserType.JSON)
    assert isinstance(ad, ClassAd)
    return ad


def test_every_job_gets_its_own_ad_and_files(pool: PersonalPool) -> None:
    with client(pool, "alice") as alice:
        jobs = [
            completed_job(alice, f"echo out of {n}\necho made {n} > made.txt\n", Tag=n)
            for n in range(3)
        ]
        index, files = read_batch(post_outputs(pool, "alice", {"jobs": [str(j) for j in jobs]}))

        assert sorted(index) == sorted(str(j) for j in jobs)
        for n, job in enumerate(jobs):
            ad = ad_of(index[str(job)])
            assert (ad["ClusterId"], ad["ProcId"], ad["Tag"]) == (job.cluster, job.proc, n)
            assert files[f"{job}/job.out"] == f"out of {n}\n".encode()
            assert files[f"{job}/made.txt"] == f"made {n}\n".encode()
            after = alice.get(job)
            assert after["StageOutFinish"] >= after["StageOutStart"] > 0
        assert len(files) == 6  # nothing else: the uploaded job.sh is not output


def test_a_missing_job_and_another_users_job_are_refused_alone(pool: PersonalPool) -> None:
    with client(pool, "alice") as alice, client(pool, "bob") as bob:
        mine = completed_job(bob, "echo from bob\n")
        theirs = completed_job(alice, "echo secret > secret.txt\n")
    index, files = read_batch(
        post_outputs(pool, "bob", {"jobs": [str(mine), "999999.0", str(theirs)]})
    )

    assert list(index) == [str(mine), "999999.0", str(theirs)]  # in the order asked
    assert files == {f"{mine}/job.out": b"from bob\n"}
    missing, forbidden = index["999999.0"], index[str(theirs)]
    assert (missing["status"], missing["error"]) == (404, "JobNotFound")
    assert "999999.0 is not in the queue" in missing["detail"]
    assert (forbidden["status"], forbidden["error"]) == (403, "NotAuthorized")
    assert forbidden["detail"] == (
        f"job {theirs} is owned by alice; bob may not fetch the output of it"
    )


def test_an_output_over_the_limit_is_refused_alone(pool: PersonalPool) -> None:
    with client(pool, "alice") as alice:
        big = completed_job(alice, "head -c 1500000 /dev/zero > big.dat\n")
        small = completed_job(alice, "echo small\n")
        index, files = read_batch(post_outputs(pool, "alice", {"jobs": [str(big), str(small)]}))
        assert index[str(big)]["status"] == 413
        assert index[str(big)]["detail"] == (
            f"the output of job {big} is 1500000 bytes, over the limit of "
            f"MAX_TRANSFER_OUTPUT_MB = 1 MiB ({MIB} bytes)"
        )
        assert "StageOutFinish" not in alice.get(big)
        assert files == {f"{small}/job.out": b"small\n"}


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"jobs": ["1.0", "abc"]}, "\"jobs\": not a job id (cluster.proc): 'abc'"),
        ({"jobs": ["1.0", 7]}, '"jobs": not a job id (cluster.proc): 7'),
        ({"jobs": []}, '"jobs" must be a non-empty list of job ids ("cluster.proc")'),
        ({"ids": ["1.0"]}, '"jobs" must be a non-empty list of job ids ("cluster.proc")'),
        (
            {"jobs": [f"1.{n}" for n in range(1001)]},
            '"jobs" names 1001 jobs, over the 1000 a request',
        ),
    ],
)
def test_a_bad_request_is_refused_whole(pool: PersonalPool, body: object, detail: str) -> None:
    response = post_outputs(pool, "alice", body)
    assert response.status_code == 400
    assert response.json()["error"] == "BadRequest"
    assert response.json()["detail"] == detail
