"""Concurrent submits and stage-ins for one schedd go to it together, each answered alone.

The GAHP runs in this process here, so that the HTTPS requests it sends to the remote
schedd can be counted (an httpx event hook on its one client for that schedd).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

import htgrid.classad as classad
from htgrid.backends.condor import _sandbox as sandbox
from htgrid.backends.condor._batch import cluster_body
from htgrid.backends.condor._errors import RemoteRefusal
from htgrid.backends.condor._http import Endpoint, FileBody, RemoteSettings
from htgrid.backends.condor.server import CondorGahp, CondorOptions
from htgrid.gahp import Call, Credentials

from ._wire import Wire
from .conftest import SCHEDD_NAME, RemotePool, remote_pool
from .test_condor_gahp import job_ad, status, wait_status

Handler = str  # the CondorGahp method a command runs


def _options(remote: RemotePool, **options: Any) -> CondorOptions:
    return CondorOptions(
        remote=RemoteSettings(ca_files=(str(remote.ca_file),)),
        token_dirs=(remote.tokens_dir,),
        **options,
    )


def run_together(
    remote: RemotePool,
    command: str,
    handler: Handler,
    requests: Sequence[tuple[str, ...]],
    priorities: list[str] | None = None,
    **options: Any,
) -> tuple[list[Sequence[str]], list[str]]:
    """Every request of `requests` (the arguments after the schedd) at once in a fresh
    GAHP made with `options`; their results in order, and the HTTP requests the GAHP sent
    (method and path; not those refused for want of a token, which go again with one).
    Their Priority headers go to `priorities`, when given."""
    sent: list[str] = []

    async def count(response: httpx.Response) -> None:
        if response.status_code != 401:
            sent.append(f"{response.request.method} {response.request.url.path}")
            if priorities is not None:
                priorities.append(response.request.headers.get("priority", ""))

    async def main() -> list[Sequence[str]]:
        gahp = CondorGahp(_options(remote, **options))
        try:
            endpoint = await gahp.remotes.schedd(remote.url)
            endpoint.client.event_hooks["response"].append(count)
            run = getattr(gahp, handler)
            calls = [
                run(Call(command, number, (remote.url, *args), Credentials()))
                for number, args in enumerate(requests, 1)
            ]
            return list(await asyncio.gather(*calls))
        finally:
            await gahp.aclose()

    return asyncio.run(main()), sent


def stage_ad(ad: str, job_id: str) -> str:
    cluster, proc = job_id.split(".")
    return ad[:-1] + f"; ClusterId = {cluster}; ProcId = {proc} ]"


def job_dirs(tmp_path: Path, count: int, script: str) -> list[Path]:
    dirs = []
    for number in range(count):
        iwd = tmp_path / f"job{number}"
        iwd.mkdir()
        (iwd / "job.sh").write_text("#!/bin/sh\n" + script)
        (iwd / "job.sh").chmod(0o755)
        (iwd / "data.txt").write_text(f"input of job {number}\n")
        dirs.append(iwd)
    return dirs


def submitted(results: Sequence[Sequence[str]]) -> list[str]:
    for result in results:
        assert result[0] == "S" and result[2] == "NULL", result
    return [result[1] for result in results]


@pytest.fixture
def gahp(remote: RemotePool) -> Iterator[Wire]:
    wire = Wire(*remote.gahp_options("-s", SCHEDD_NAME))
    yield wire
    wire.close()


def test_100_concurrent_submits_are_a_few_remote_requests_with_100_jobs(
    remote: RemotePool, gahp: Wire, tmp_path: Path
) -> None:
    ads = [
        job_ad(tmp_path, BatchTag=number, Owner="mallory", SubmitterGlobalJobId=f"a#{number}")
        for number in range(100)
    ]
    results, sent = run_together(remote, "CONDOR_JOB_SUBMIT", "submit", [(ad,) for ad in ads])

    ids = submitted(results)
    assert len(set(ids)) == 100
    # Each batch a new cluster and its procs in one request (no reserve before it).
    cluster_submits = [r for r in sent if r == "POST /v1/jobs"]
    assert 1 <= len(cluster_submits) <= 5, sent
    assert not any(r.startswith("POST /v1/clusters") for r in sent), sent
    # Each request's id is the job made from its own ad, owned by the token's user.
    remote_ads = {
        f"{ad['ClusterId']}.{ad['ProcId']}": ad
        for ad in status(gahp, "BatchTag =!= undefined && JobStatus == 5")
    }
    for number, job_id in enumerate(ids):
        ad = remote_ads[job_id]
        assert ad["BatchTag"] == number and ad["SubmitterGlobalJobId"] == f"a#{number}"
        assert ad["Owner"] == "alice"
        assert (ad["JobStatus"], ad["HoldReasonCode"]) == (5, 16)


def test_one_ad_the_schedd_refuses_fails_only_its_own_submit(
    remote: RemotePool, tmp_path: Path
) -> None:
    ads = [job_ad(tmp_path, BadBatchTag=number) for number in range(10)]
    ads[3] = job_ad(tmp_path, BadBatchTag=3, JobStatus=2)  # nobody submits a running job
    results, _ = run_together(remote, "CONDOR_JOB_SUBMIT", "submit", [(ad,) for ad in ads])

    bad = results[3]
    assert bad[0] == "F" and "submitted Idle (1) or Held (5)" in bad[2], bad
    good = submitted([r for number, r in enumerate(results) if number != 3])
    assert len(set(good)) == 9


def test_50_concurrent_stage_ins_release_every_job_with_its_own_files(
    remote: RemotePool, gahp: Wire, tmp_path: Path
) -> None:
    dirs = job_dirs(tmp_path, 50, "cat data.txt\n")
    ads = [job_ad(iwd, StageBatch=50) for iwd in dirs]
    ids = submitted(run_together(remote, "CONDOR_JOB_SUBMIT", "submit", [(a,) for a in ads])[0])

    requests = [(stage_ad(ad, job_id),) for ad, job_id in zip(ads, ids, strict=True)]
    results, sent = run_together(remote, "CONDOR_JOB_STAGE_IN", "stage_in", requests)

    assert results == [("S", "NULL")] * 50
    uploads = [r for r in sent if r.startswith("PUT ")]
    assert uploads and set(uploads) == {"PUT /v1/jobs/input"} and len(uploads) <= 5, sent
    assert status(gahp, "StageBatch == 50 && JobStatus == 5") == []  # all released
    for number in (0, 17, 49):  # each ran with its own input
        wait_status(gahp, ids[number], 4)
        assert gahp.call("CONDOR_JOB_STAGE_OUT", SCHEDD_NAME, ids[number]) == ["S", "NULL"]
        assert (dirs[number] / "out.txt").read_text() == f"input of job {number}\n"


@pytest.fixture(scope="module")
def limited(
    shared_tmp_factory: Callable[[str], Path], test_users: tuple[str, ...]
) -> Iterator[RemotePool]:
    """A remote pool that takes at most 1 MiB of input a job."""
    base = shared_tmp_factory("condor-gahp-batch-limited")
    with remote_pool(base, MAX_TRANSFER_INPUT_MB=1) as pool:
        yield pool


def test_a_refused_sandbox_in_a_batch_fails_only_its_own_stage_in(
    limited: RemotePool, tmp_path: Path
) -> None:
    dirs = job_dirs(tmp_path, 6, "cat data.txt\n")
    (dirs[2] / "data.txt").write_bytes(b"x" * (2 << 20))  # over MAX_TRANSFER_INPUT_MB
    ads = [job_ad(iwd) for iwd in dirs]
    ids = submitted(run_together(limited, "CONDOR_JOB_SUBMIT", "submit", [(a,) for a in ads])[0])
    requests = [(stage_ad(ad, job_id),) for ad, job_id in zip(ads, ids, strict=True)]
    # And one for a job that is not there at all.
    requests.append((stage_ad(ads[0], "999999.0"),))

    results, sent = run_together(limited, "CONDOR_JOB_STAGE_IN", "stage_in", requests)

    too_large, missing = results[2], results[6]
    assert too_large[0] == "F" and too_large[1].startswith("Transfer input too large: ")
    assert f"the input sandbox of job {ids[2]}" in too_large[1]
    assert missing[0] == "F" and "999999.0 is not in the queue" in missing[1], missing
    assert [r for n, r in enumerate(results) if n not in (2, 6)] == [("S", "NULL")] * 5
    assert "PUT /v1/jobs/input" in sent

    wire = Wire(*limited.gahp_options("-s", SCHEDD_NAME))
    try:
        by_id = {f"{a['ClusterId']}.{a['ProcId']}": a for a in status(wire, "true")}
    finally:
        wire.close()
    assert by_id[ids[2]]["JobStatus"] == 5  # still waiting for an input that fits
    assert all(by_id[i]["JobStatus"] != 5 for n, i in enumerate(ids) if n != 2)


def test_jobs_of_one_remote_cluster_keep_their_own_attributes(
    remote: RemotePool, gahp: Wire, tmp_path: Path
) -> None:
    # Two jobs in one remote cluster, each with attributes the other lacks or differs in.
    first = job_ad(tmp_path, Only1="one", Shared=1)
    second = job_ad(tmp_path, Only2=2.5, Shared=2, Cmd="other.sh")
    results, _ = run_together(remote, "CONDOR_JOB_SUBMIT", "submit", [(first,), (second,)])
    one_id, two_id = submitted(results)

    ads = {f"{a['ClusterId']}.{a['ProcId']}": a for a in status(gahp, "Shared =!= undefined")}
    assert ads[one_id]["Only1"] == "one" and "Only2" not in ads[one_id]
    assert ads[two_id]["Only2"] == 2.5 and "Only1" not in ads[two_id]
    assert (ads[one_id]["Shared"], ads[two_id]["Shared"]) == (1, 2)
    assert (ads[one_id]["Cmd"], ads[two_id]["Cmd"]) == ("job.sh", "other.sh")


def one_batch(count: int) -> dict[str, Any]:
    """Options under which `count` stage-ins go as one upload: the batch leaves when it
    is full, whenever the last request comes."""
    return {"stage_batch": count, "batch_window": 300.0}


# Sizes around the tar's 512-byte blocks and the GAHP's 1 MiB copy chunks.
SIZES = (0, 1, 511, 512, 513, 3 * 512 + 7, (1 << 20) + 3)


def sized_inputs(iwd: Path, number: int) -> None:
    """Input files of several sizes, and a directory with a file under a long name."""
    for size in SIZES:
        data = bytes((number + i) % 251 for i in range(size))
        (iwd / f"in-{size}.dat").write_bytes(data)
    deep = iwd / "tree" / "sub"
    deep.mkdir(parents=True)
    (deep / ("long-name-" * 12 + f"{number}.txt")).write_text(f"deep input of job {number}\n")


def local_inputs(iwd: Path) -> dict[str, tuple[bytes, int]]:
    """Each input file's contents and permission bits, by its name in the sandbox."""
    files = {"job.sh": iwd / "job.sh", **{p.name: p for p in iwd.glob("in-*.dat")}}
    files.update({str(p.relative_to(iwd)): p for p in (iwd / "tree").rglob("*") if p.is_file()})
    return {name: (path.read_bytes(), path.stat().st_mode & 0o777) for name, path in files.items()}


def spooled(remote: RemotePool, job_id: str, names: Sequence[str]) -> dict[str, tuple[bytes, int]]:
    cluster, proc = job_id.split(".")
    spool = remote.pool.home / "spool" / cluster / proc
    return {
        name: ((spool / name).read_bytes(), (spool / name).stat().st_mode & 0o777) for name in names
    }


def test_stage_ins_of_files_of_several_sizes_land_identical_in_one_upload(
    remote: RemotePool, tmp_path: Path
) -> None:
    dirs = job_dirs(tmp_path, 4, "true\n")
    for number, iwd in enumerate(dirs):
        sized_inputs(iwd, number)
    inputs = ",".join([*(f"in-{size}.dat" for size in SIZES), "tree"])
    ads = [job_ad(iwd, TransferInput=inputs, JobUniverse=5) for iwd in dirs]
    ids = submitted(run_together(remote, "CONDOR_JOB_SUBMIT", "submit", [(a,) for a in ads])[0])

    requests = [(stage_ad(ad, job_id),) for ad, job_id in zip(ads, ids, strict=True)]
    results, sent = run_together(
        remote, "CONDOR_JOB_STAGE_IN", "stage_in", requests, **one_batch(4)
    )

    assert results == [("S", "NULL")] * 4
    assert [r for r in sent if r.startswith("PUT ")] == ["PUT /v1/jobs/input"], sent
    for iwd, job_id in zip(dirs, ids, strict=True):
        wanted = local_inputs(iwd)
        assert len(wanted) == len(SIZES) + 2
        assert spooled(remote, job_id, list(wanted)) == wanted


def test_an_input_file_gone_after_the_stage_in_was_accepted_fails_only_its_job(
    remote: RemotePool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = job_dirs(tmp_path, 5, "true\n")
    ads = [job_ad(iwd, JobUniverse=5) for iwd in dirs]
    ids = submitted(run_together(remote, "CONDOR_JOB_SUBMIT", "submit", [(a,) for a in ads])[0])
    (dirs[3] / "data.txt").write_bytes(b"y" * 5000)
    # The stage-ins of jobs 1 and 3 are accepted (their files looked at), and then job 1's
    # input is removed and job 3's cut short before the batch's tar is written: job 3's
    # goes as it is then.
    look = sandbox.input_entries

    def then_change(ad: classad.ClassAd) -> tuple[sandbox.InputEntry, ...]:
        entries = look(ad)
        iwd = Path(ad.eval("SUBMIT_Iwd"))
        if iwd == dirs[1]:
            (iwd / "data.txt").unlink()
        elif iwd == dirs[3]:
            (iwd / "data.txt").write_bytes(b"y" * 10)
        return entries

    monkeypatch.setattr(sandbox, "input_entries", then_change)
    requests = [(stage_ad(ad, job_id),) for ad, job_id in zip(ads, ids, strict=True)]
    results, sent = run_together(
        remote, "CONDOR_JOB_STAGE_IN", "stage_in", requests, **one_batch(5)
    )

    gone = results[1]
    assert gone[0] == "F" and gone[1].startswith("Error sending files to "), gone
    assert f"{dirs[1] / 'data.txt'}' was removed before it could be sent" in gone[1]
    assert [r for n, r in enumerate(results) if n != 1] == [("S", "NULL")] * 4
    assert [r for r in sent if r.startswith("PUT ")] == ["PUT /v1/jobs/input"], sent
    for number in (0, 2, 3, 4):
        landed = spooled(remote, ids[number], ["data.txt"])["data.txt"][0]
        assert landed == (dirs[number] / "data.txt").read_bytes()
    assert spooled(remote, ids[3], ["data.txt"])["data.txt"][0] == b"y" * 10
    wire = Wire(*remote.gahp_options("-s", SCHEDD_NAME))
    try:
        by_id = {f"{a['ClusterId']}.{a['ProcId']}": a for a in status(wire, "true")}
    finally:
        wire.close()
    assert by_id[ids[1]]["JobStatus"] == 5  # still held, waiting for its input
    cluster, proc = ids[1].split(".")
    assert not (remote.pool.home / "spool" / cluster / proc / "job.sh").exists()


def test_a_daemon_without_the_batch_upload_gets_each_jobs_own_tar(
    remote: RemotePool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dirs = job_dirs(tmp_path, 3, "true\n")
    for number, iwd in enumerate(dirs):
        sized_inputs(iwd, number)
    inputs = ",".join([*(f"in-{size}.dat" for size in SIZES), "tree"])
    ads = [job_ad(iwd, TransferInput=inputs, JobUniverse=5) for iwd in dirs]
    ids = submitted(run_together(remote, "CONDOR_JOB_SUBMIT", "submit", [(a,) for a in ads])[0])
    upload = Endpoint.upload

    async def without_batch_route(
        self: Endpoint, path: str, body: FileBody, content_type: str
    ) -> httpx.Response:
        if path == "/v1/jobs/input":  # as a daemon older than the route answers
            raise RemoteRefusal(
                f"{self.what} answered HTTP 404: Not Found", status=404, error="", detail=""
            )
        return await upload(self, path, body, content_type)

    monkeypatch.setattr(Endpoint, "upload", without_batch_route)
    requests = [(stage_ad(ad, job_id),) for ad, job_id in zip(ads, ids, strict=True)]
    results, sent = run_together(
        remote, "CONDOR_JOB_STAGE_IN", "stage_in", requests, **one_batch(3)
    )

    assert results == [("S", "NULL")] * 3
    assert sorted(r for r in sent if r.startswith("PUT ")) == [
        f"PUT /v1/jobs/{job_id}/input" for job_id in sorted(ids)
    ]
    for iwd, job_id in zip(dirs, ids, strict=True):
        wanted = local_inputs(iwd)
        assert spooled(remote, job_id, list(wanted)) == wanted


def test_what_every_job_of_a_batch_shares_goes_once_in_the_cluster_ad() -> None:
    # As the SUBMIT lines bring them: parsed from new ClassAd syntax.
    procs = [
        classad.ClassAd(
            '[ Cmd = "job.sh"; Iwd = "/w"; JobStatus = 5; HoldReasonCode = 16; Args = "1"; '
            "Number = 1; Flag = true; List = { 1, 2 }; Keep = JobStatus == 4 ]"
        ),
        classad.ClassAd(
            '[ Cmd = "job.sh"; Iwd = "/w"; JobStatus = 5; HoldReasonCode = 16; Args = "2"; '
            "Number = 1.0; Flag = 1; List = { 1, 2 }; Keep = JobStatus == 4 ]"
        ),
    ]
    text = cluster_body(procs)
    body = json.loads(text)

    # Shared attributes once; the status and hold reason stay in each proc, as do the
    # values that differ, if only in type (1 and 1.0, true and 1).
    assert body["cluster_ad"] == {
        "Cmd": "job.sh",
        "Iwd": "/w",
        "List": [1, 2],
        "Keep": "/Expr(JobStatus == 4)/",
    }
    # ... and an expression stays one (HTCondor's JSON marks it with escaped slashes).
    assert text.count('"\\/Expr(JobStatus == 4)') == 1
    first, second = body["procs"]
    assert first == {"JobStatus": 5, "HoldReasonCode": 16, "Args": "1", "Number": 1, "Flag": True}
    assert second["Number"] == 1.0 and type(second["Number"]) is float
    assert second["Flag"] == 1 and type(second["Flag"]) is int


def test_jobs_sharing_most_of_their_ads_read_back_whole_and_typed(
    remote: RemotePool, gahp: Wire, tmp_path: Path
) -> None:
    ads = [job_ad(tmp_path, Typed=value, Mark=number) for number, value in enumerate((1, 1.5))]
    results, _ = run_together(remote, "CONDOR_JOB_SUBMIT", "submit", [(ad,) for ad in ads])
    one_id, two_id = submitted(results)

    found = {f"{a['ClusterId']}.{a['ProcId']}": a for a in status(gahp, "Mark =!= undefined")}
    assert found[one_id]["Typed"] == 1 and isinstance(found[one_id]["Typed"], int)
    assert found[two_id]["Typed"] == 1.5
    for job_id in (one_id, two_id):
        mine = classad.ClassAd(ads[found[job_id]["Mark"]])
        for name in ("Cmd", "JobUniverse", "TransferInput", "Out", "SUBMIT_Iwd"):
            if name in mine:
                assert found[job_id][name] == mine.eval(name), name
        assert (found[job_id]["JobStatus"], found[job_id]["HoldReasonCode"]) == (5, 16)
