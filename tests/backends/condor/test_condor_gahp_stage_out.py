"""Concurrent stage-outs from one schedd are fetched together (POST /v1/jobs/output), each
job's files written into its own local places and each request answered on its own; a
daemon without that route gets each job's stage-out on its own, as before."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid.classad as classad
from htgrid.backends.condor import _stageout
from htgrid.testing import wait_for

from .conftest import RemotePool
from .test_condor_gahp import job_ad
from .test_condor_gahp_batch import run_together


def completed_jobs(remote: RemotePool, tmp_path: Path, count: int) -> tuple[list[str], list[Path]]:
    """`count` jobs run on the remote side, kept there completed; their ids and local dirs.

    They are submitted and staged in through the remote API itself (what the GAHP's
    submit and stage-in do, tested elsewhere), so that only stage-outs go through it here.
    """
    script = b"#!/bin/sh\necho out: $(cat data.txt)\necho err >&2\n"
    dirs = []
    with remote.pool.remote(remote.token) as schedd:
        cluster = schedd.reserve_cluster()
        procs = []
        for number in range(count):
            iwd = tmp_path / f"job{number}"
            iwd.mkdir()
            dirs.append(iwd)
            procs.append(classad.ClassAd(job_ad(iwd)))
        ids = [str(job) for job in schedd.submit(cluster, classad.ClassAd(), procs)]
        for number, job_id in enumerate(ids):
            files = {
                "job.sh": (script, 0o755),
                "data.txt": (f"input of job {number}\n".encode(), 0o644),
            }
            schedd.put_input(job_id, _tar(files))
        unfinished = " || ".join(
            f"(ClusterId == {c} && ProcId == {p} && JobStatus != 4)"
            for c, p in (job_id.split(".") for job_id in ids)
        )
        wait_for(lambda: not schedd.query(unfinished), timeout=60, what="the jobs to complete")
    return ids, dirs


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def without_the_route(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A path the daemon serves only as GET /v1/jobs/{job_id}: it answers POST with a bare
    # 405, as a daemon from before POST /v1/jobs/output does for that route.
    monkeypatch.setattr(_stageout, "ROUTE", "/v1/jobs/output-of-a-later-version")
    yield


def test_30_concurrent_stage_outs_are_one_request_each_job_its_own_files(
    remote: RemotePool, tmp_path: Path
) -> None:
    ids, dirs = completed_jobs(remote, tmp_path, 30)
    requests = [(job_id,) for job_id in ids] + [("999999.0",)]  # and a job that is not there

    results, sent = run_together(remote, "CONDOR_JOB_STAGE_OUT", "stage_out", requests)

    assert results[:30] == [("S", "NULL")] * 30
    assert results[30] == ("F", "Job not found")  # fails alone
    assert sent and set(sent) == {"POST /v1/jobs/output"} and len(sent) <= 3, sent
    for number, iwd in enumerate(dirs):
        assert (iwd / "out.txt").read_text() == f"out: input of job {number}\n"
        assert (iwd / "err.txt").read_text() == "err\n"
        assert not list(iwd.glob(".*.part"))  # every file renamed into place


def test_a_daemon_without_the_route_gets_each_stage_out_on_its_own(
    remote: RemotePool, tmp_path: Path, without_the_route: None
) -> None:
    ids, dirs = completed_jobs(remote, tmp_path, 4)
    requests = [(job_id,) for job_id in ids] + [("999999.0",)]

    results, sent = run_together(remote, "CONDOR_JOB_STAGE_OUT", "stage_out", requests)

    assert results == [("S", "NULL")] * 4 + [("F", "Job not found")]
    # The batch route is tried (by the batches out before its 405 came back, at most two),
    # then each single stage-out sends its two requests.
    assert 1 <= sent.count("POST /v1/jobs/output-of-a-later-version") <= 2, sent
    for job_id in ids:
        assert f"GET /v1/jobs/{job_id}" in sent and f"GET /v1/jobs/{job_id}/output" in sent
    for number, iwd in enumerate(dirs):
        assert (iwd / "out.txt").read_text() == f"out: input of job {number}\n"


def _destinations(index_json: str) -> tuple[Path, dict[str, Path]]:
    """Where the GAHP writes a job's output, from its ad as jobs.json carries it."""
    ad = _stageout._ad_of(_stageout.adjson.loads(index_json), "1.0")
    assert ad is not None
    return _stageout.sandbox.output_destinations(ad)


def test_the_output_goes_where_the_ad_says_whether_its_values_are_plain_or_expressions() -> None:
    plain = (
        '{"ClusterId": 1, "Cmd": "\\/Expr(strcat(\\"a\\", \\"b\\"))\\/", "Iwd": "/spool/1/0",'
        ' "SUBMIT_Iwd": "/home/u/run", "Out": "_condor_stdout", "SUBMIT_Out": "out.txt",'
        ' "Err": "_condor_stderr", "SUBMIT_Err": "/tmp/err.txt",'
        ' "TransferOutputRemaps": "a.dat = results/a.dat"}'
    )
    iwd, special = _destinations(plain)
    assert iwd == Path("/home/u/run")
    assert special == {
        "_condor_stdout": Path("/home/u/run/out.txt"),
        "_condor_stderr": Path("/tmp/err.txt"),
        "a.dat": Path("/home/u/run/results/a.dat"),
    }
    # An expression among them may refer to any attribute: the whole ad is read.
    computed = (
        '{"Run": "/home/u/run", "SUBMIT_Iwd": "\\/Expr(strcat(Run, \\"/x\\"))\\/",'
        ' "Out": "_condor_stdout", "SUBMIT_Out": "\\/Expr(strcat(\\"o\\", \\".txt\\"))\\/"}'
    )
    iwd, special = _destinations(computed)
    assert iwd == Path("/home/u/run/x")
    assert special == {"_condor_stdout": Path("/home/u/run/x/o.txt")}
