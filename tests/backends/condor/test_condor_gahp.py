"""The condor GAHP through its protocol against a real remote queue over TLS with tokens."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid.classad as classad

from ._wire import Wire
from .conftest import SCHEDD_NAME, RemotePool


@pytest.fixture
def gahp(remote: RemotePool) -> Iterator[Wire]:
    wire = Wire(*remote.gahp_options("-s", SCHEDD_NAME))
    yield wire
    wire.close()


def job_ad(iwd: Path, **attrs: object) -> str:
    """A submit ad as the grid manager builds it: held for spooling, local paths kept."""
    body: dict[str, object] = {
        "JobUniverse": 12,  # local universe on the remote side: runs without a startd
        "Cmd": "job.sh",
        "Out": "out.txt",
        "Err": "err.txt",
        "TransferInput": "data.txt",
        "Iwd": str(iwd),
        "SUBMIT_Iwd": str(iwd),
        "JobStatus": 5,
        "HoldReasonCode": 16,
        "HoldReason": "Spooling input data files",
        "SubmitterGlobalJobId": f"local#{iwd.name}#1",
    }
    body.update(attrs)
    parts = [f"{k} = {classad.quote(v) if isinstance(v, str) else v}" for k, v in body.items()]
    return "[ " + "; ".join(parts) + "; LeaveJobInQueue = JobStatus == 4 ]"


def sandbox(tmp_path: Path) -> Path:
    iwd = tmp_path / "job"
    iwd.mkdir()
    script = iwd / "job.sh"
    script.write_text("#!/bin/sh\necho out: $(cat data.txt)\necho err >&2\n")
    script.chmod(0o755)
    (iwd / "data.txt").write_text("hello from the submit side\n")
    return iwd


def submit(gahp: Wire, ad: str) -> str:
    result = gahp.call("CONDOR_JOB_SUBMIT", SCHEDD_NAME, ad)
    assert result[0] == "S" and result[2] == "NULL", result
    return result[1]


def status(gahp: Wire, constraint: str) -> list[classad.ClassAd]:
    result = gahp.call("CONDOR_JOB_STATUS_CONSTRAINED", SCHEDD_NAME, constraint)
    assert result[:2] == ["S", "NULL"], result
    assert len(result) == 3 + int(result[2])
    return [classad.ClassAd(text) for text in result[3:]]


def one(gahp: Wire, job_id: str) -> classad.ClassAd | None:
    cluster, proc = job_id.split(".")
    ads = status(gahp, f"ClusterId == {cluster} && ProcId == {proc}")
    return ads[0] if ads else None


def wait_status(gahp: Wire, job_id: str, wanted: int, timeout: float = 60) -> classad.ClassAd:
    deadline = time.monotonic() + timeout
    while True:
        ad = one(gahp, job_id)
        assert ad is not None, f"job {job_id} left the queue"
        if ad["JobStatus"] == wanted:
            return ad
        assert time.monotonic() < deadline, f"job {job_id} stayed in status {ad['JobStatus']}"
        time.sleep(0.2)


def test_banner_and_commands_are_the_c_gahps(gahp: Wire) -> None:
    assert gahp.banner == ["$GahpVersion", "2.0.1", "Jun", "27", "2005", "Condor GAHP", "$"]
    assert gahp.ask("VERSION") == ["S", *gahp.banner]
    listed = set(gahp.ask("COMMANDS")[1:])
    assert {
        "CONDOR_JOB_SUBMIT",
        "CONDOR_JOB_STATUS_CONSTRAINED",
        "CONDOR_JOB_REMOVE",
        "CONDOR_JOB_HOLD",
        "CONDOR_JOB_RELEASE",
        "CONDOR_JOB_UPDATE",
        "CONDOR_JOB_UPDATE_CONSTRAINED",
        "CONDOR_JOB_STAGE_IN",
        "CONDOR_JOB_STAGE_OUT",
        "CONDOR_JOB_UPDATE_LEASE",
        "CONDOR_JOB_REFRESH_PROXY",
        "UPDATE_TOKEN",
    } <= listed


def test_a_job_goes_round_trip(gahp: Wire, tmp_path: Path) -> None:
    iwd = sandbox(tmp_path)
    ad = job_ad(iwd)
    job_id = submit(gahp, ad)

    held = one(gahp, job_id)
    assert held is not None
    assert held["JobStatus"] == 5 and held["HoldReasonCode"] == 16
    assert held["SubmitterGlobalJobId"] == f"local#{iwd.name}#1"
    assert isinstance(held["ServerTime"], int) and held["ServerTime"] > 0

    cluster, proc = job_id.split(".")
    stage_ad = ad[:-1] + f"; ClusterId = {cluster}; ProcId = {proc} ]"
    assert gahp.call("CONDOR_JOB_STAGE_IN", SCHEDD_NAME, stage_ad) == ["S", "NULL"]
    done = wait_status(gahp, job_id, 4)
    assert done.get("StageInFinish")

    assert gahp.call("CONDOR_JOB_STAGE_OUT", SCHEDD_NAME, job_id) == ["S", "NULL"]
    assert (iwd / "out.txt").read_text() == "out: hello from the submit side\n"
    assert (iwd / "err.txt").read_text() == "err\n"
    assert not [p.name for p in iwd.iterdir() if p.name.startswith(".")]  # no temp files left

    update = gahp.call("CONDOR_JOB_UPDATE", SCHEDD_NAME, job_id, "[ LeaveJobInQueue = false ]")
    assert update == ["S", "NULL"]
    deadline = time.monotonic() + 30
    while one(gahp, job_id) is not None:
        assert time.monotonic() < deadline, "the remote job stayed after LeaveJobInQueue = false"
        time.sleep(0.2)


def test_stage_out_honours_submit_out_and_remaps(gahp: Wire, tmp_path: Path) -> None:
    iwd = sandbox(tmp_path)
    elsewhere = tmp_path / "logs" / "job.out"
    ad = job_ad(iwd, SUBMIT_Out=str(elsewhere), TransferOutputRemaps="err.txt = sub/e.txt")
    job_id = submit(gahp, ad)
    cluster, proc = job_id.split(".")
    stage_ad = ad[:-1] + f"; ClusterId = {cluster}; ProcId = {proc} ]"
    assert gahp.call("CONDOR_JOB_STAGE_IN", SCHEDD_NAME, stage_ad) == ["S", "NULL"]
    wait_status(gahp, job_id, 4)
    assert gahp.call("CONDOR_JOB_STAGE_OUT", SCHEDD_NAME, job_id) == ["S", "NULL"]
    assert elsewhere.read_text() == "out: hello from the submit side\n"
    assert (iwd / "sub" / "e.txt").read_text() == "err\n"
    assert not (iwd / "out.txt").exists()


def test_stage_in_of_a_missing_file_fails_naming_it(gahp: Wire, tmp_path: Path) -> None:
    iwd = sandbox(tmp_path)
    ad = job_ad(iwd, TransferInput="data.txt, missing.dat")
    job_id = submit(gahp, ad)
    cluster, proc = job_id.split(".")
    result = gahp.call(
        "CONDOR_JOB_STAGE_IN", SCHEDD_NAME, ad[:-1] + f"; ClusterId = {cluster}; ProcId = {proc} ]"
    )
    assert result[0] == "F" and len(result) == 2
    assert "missing.dat" in result[1] and "does not exist" in result[1]
    held = one(gahp, job_id)
    assert held is not None and held["JobStatus"] == 5  # still waiting for its input


def test_hold_release_remove(gahp: Wire, tmp_path: Path) -> None:
    # A vanilla job: with no execute node in the remote pool it stays idle once released.
    job_id = submit(gahp, job_ad(sandbox(tmp_path), JobUniverse=5))
    assert gahp.call("CONDOR_JOB_RELEASE", SCHEDD_NAME, job_id, "spooled") == ["S", "NULL"]
    assert wait_status(gahp, job_id, 1)["JobStatus"] == 1
    assert gahp.call("CONDOR_JOB_RELEASE", SCHEDD_NAME, job_id, "again") == ["F", "Bad job status"]

    assert gahp.call("CONDOR_JOB_HOLD", SCHEDD_NAME, job_id, "by gridmanager") == ["S", "NULL"]
    held = wait_status(gahp, job_id, 5)
    assert held["HoldReason"] == "by gridmanager"

    assert gahp.call("CONDOR_JOB_REMOVE", SCHEDD_NAME, job_id, "by gridmanager") == ["S", "NULL"]
    again = gahp.call("CONDOR_JOB_REMOVE", SCHEDD_NAME, job_id, "by gridmanager")
    assert again in (["F", "Job not found"], ["F", "Already done"])
    assert gahp.call("CONDOR_JOB_HOLD", SCHEDD_NAME, "99999.0", "x") == ["F", "Job not found"]


def test_update_lease_reports_the_jobs_updated(gahp: Wire, tmp_path: Path) -> None:
    job_id = submit(gahp, job_ad(sandbox(tmp_path), JobUniverse=5))
    expiry = str(int(time.time()) + 3600)
    result = gahp.call(
        "CONDOR_JOB_UPDATE_LEASE", SCHEDD_NAME, "2", job_id, expiry, "99999.0", expiry
    )
    assert result == ["S", "NULL", job_id]
    ad = one(gahp, job_id)
    assert ad is not None and ad["JobLeaseExpiration"] == int(expiry)
    none = gahp.call("CONDOR_JOB_UPDATE_LEASE", SCHEDD_NAME, "1", "99999.0", expiry)
    assert none == ["S", "NULL", "NULL"]


def test_update_constrained_edits_matching_jobs(gahp: Wire, tmp_path: Path) -> None:
    job_id = submit(gahp, job_ad(sandbox(tmp_path), JobUniverse=5))
    cluster = job_id.split(".")[0]
    result = gahp.call(
        "CONDOR_JOB_UPDATE_CONSTRAINED", SCHEDD_NAME, f"ClusterId == {cluster}", '[ Note = "hi" ]'
    )
    assert result == ["S", "NULL"]
    ad = one(gahp, job_id)
    assert ad is not None and ad["Note"] == "hi"


def test_a_forged_token_fails_with_the_servers_reason(remote: RemotePool, tmp_path: Path) -> None:
    # The token of alice with its subject changed to the pool's administrator.
    head, claims, signature = remote.token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    decoded["sub"] = "condor@pool-b"
    altered = base64.urlsafe_b64encode(json.dumps(decoded).encode()).rstrip(b"=").decode()
    forged = tmp_path / "forged"
    forged.write_text(f"{head}.{altered}.{signature}\n")
    wire = Wire(*remote.gahp_options("--token-file", str(forged)))
    try:
        by_name = wire.call("CONDOR_JOB_STATUS_CONSTRAINED", SCHEDD_NAME, "true")
        by_url = wire.call("CONDOR_JOB_STATUS_CONSTRAINED", remote.url, "true")
    finally:
        wire.close()
    # By name, the collector refuses the lookup first; by URL, the schedd itself.
    assert by_name[0] == "F" and by_name[2] == "0", by_name
    assert by_name[1].startswith(f"Error locating schedd {SCHEDD_NAME}: Authentication failed")
    assert by_url[0] == "F" and by_url[2] == "0", by_url
    assert by_url[1].startswith(f"Authentication failed at schedd at {remote.url}: ")
    for result in (by_name, by_url):
        assert "signature does not match" in result[1]


def test_unreachable_and_unknown_schedds_fail_clearly(remote: RemotePool, tmp_path: Path) -> None:
    wire = Wire(*remote.gahp_options())
    try:
        closed = wire.call("CONDOR_JOB_STATUS_CONSTRAINED", "https://127.0.0.1:9", "true")
        unknown = wire.call("CONDOR_JOB_SUBMIT", "nope", '[ Cmd = "x" ]')
        no_pool = Wire()
        try:
            lost = no_pool.call("CONDOR_JOB_REMOVE", SCHEDD_NAME, "1.0", "x")
        finally:
            no_pool.close()
        assert wire.ask("VERSION")[0] == "S"  # still serving
    finally:
        wire.close()
    assert closed[0] == "F" and closed[2] == "0"
    assert closed[1].startswith("Failed to connect to schedd at https://127.0.0.1:9")
    assert unknown[:2] == ["F", "NULL"]
    assert unknown[2].startswith("Error locating schedd nope")
    assert f"it has: {SCHEDD_NAME}" in unknown[2]
    assert lost[0] == "F" and "--pool" in lost[1]


@pytest.mark.parametrize(
    "request_fields",
    [
        ["CONDOR_JOB_REMOVE", "1", SCHEDD_NAME, "12", "why"],
        ["CONDOR_JOB_REMOVE", "1", SCHEDD_NAME, "1.0"],
        ["CONDOR_JOB_SUBMIT", "1", SCHEDD_NAME, "[ A = ]"],
        ["CONDOR_JOB_STATUS_CONSTRAINED", "1", "", "true"],
        ["CONDOR_JOB_STATUS_CONSTRAINED", "x", SCHEDD_NAME, "true"],
        ["CONDOR_JOB_UPDATE_LEASE", "1", SCHEDD_NAME, "2", "1.0", "100"],
        ["CONDOR_JOB_UPDATE_LEASE", "1", SCHEDD_NAME, "1", "1.0", "soon"],
        ["CONDOR_JOB_UPDATE", "1", SCHEDD_NAME, "1.0", "not an ad"],
        ["CONDOR_JOB_REFRESH_PROXY", "1", SCHEDD_NAME, "1.0", "/p", "12", "extra"],
        ["CONDOR_JOB_FROB", "1"],
    ],
)
def test_malformed_requests_are_answered_e(gahp: Wire, request_fields: list[str]) -> None:
    reply = gahp.ask(*request_fields)
    assert reply[0] == "E", reply
    assert gahp.ask("RESULTS") == ["S", "0"]  # and nothing was started


@pytest.mark.parametrize("command", ["CONDOR_JOB_SUBMIT", "CONDOR_JOB_STAGE_IN"])
def test_an_ad_that_does_not_parse_is_answered_e_with_the_parsers_reason(
    gahp: Wire, tmp_path: Path, command: str
) -> None:
    with pytest.raises(classad.ClassAdException) as parsed:
        classad.ClassAd("[ A = ; B = 1 ]")
    reason = "not a ClassAd: " + str(parsed.value).splitlines()[0]

    bad = gahp.ask(command, "7", SCHEDD_NAME, "[ A = ; B = 1 ]")
    good = gahp.call("CONDOR_JOB_SUBMIT", SCHEDD_NAME, job_ad(sandbox(tmp_path)))

    assert bad == ["E", reason]
    assert good[0] == "S"  # the GAHP goes on serving; the good ad's own parse reached it


def test_update_token_names_the_token_to_present(remote: RemotePool, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"# from the grid manager\n{remote.token}\n")
    wire = Wire("--pool", remote.collector, "--ca-file", str(remote.ca_file))
    try:
        before = wire.call("CONDOR_JOB_STATUS_CONSTRAINED", remote.url, "true")
        assert wire.ask("UPDATE_TOKEN", str(token_file)) == ["S"]
        after = wire.call("CONDOR_JOB_STATUS_CONSTRAINED", remote.url, "true")
    finally:
        wire.close()
    assert before[0] == "F" and before[1].startswith("Authentication failed at schedd")
    assert after[:2] == ["S", "NULL"]
