"""PUT /v1/jobs/input: the input sandboxes of several jobs in one tar (`12.0/file`), each
job's outcome on its own: the owner's jobs are staged and released, other users' jobs
and jobs with a bad member are refused one by one, and nothing leaves a sandbox."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import httpx
import pytest

from htgrid.net import Jobs, ScheddClient
from htgrid.queue import JobAction
from htgrid.testing import PersonalPool

from ._support import SPOOLING, made_spool_dir, put_raw, spool_dir, submit, tar_of
from .conftest import DOMAIN


def put_inputs(pool: PersonalPool, user: str, body: bytes) -> httpx.Response:
    """PUT /v1/jobs/input over the daemon's TLS API as `user`."""
    token = pool.token(f"{user}@{DOMAIN}")
    return put_raw(pool, token, "/v1/jobs/input", body, "application/x-tar")


def outcome(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    jobs = response.json()["jobs"]
    assert isinstance(jobs, dict)
    return jobs


def test_every_job_of_a_batch_gets_its_own_files_and_is_released(
    pool: PersonalPool, alice: ScheddClient
) -> None:
    jobs = [submit(alice, **SPOOLING) for _ in range(5)]
    files = {f"{job}/in.txt": f"input of {job}".encode() for job in jobs}
    files[f"{jobs[0]}/data/deep.txt"] = b"deep"

    assert outcome(put_inputs(pool, "alice", tar_of(files))) == {str(j): "ok" for j in jobs}

    for job in jobs:
        assert (spool_dir(pool, job) / "in.txt").read_text() == f"input of {job}"
        ad = alice.get(job)
        assert ad["JobStatus"] == 1 and ad["ReleaseReason"] == "Data files spooled"
        assert ad["StageInFinish"] >= ad["StageInStart"] > 0
    assert (spool_dir(pool, jobs[0]) / "data" / "deep.txt").read_bytes() == b"deep"


def test_jobs_with_empty_and_with_full_sandboxes_in_one_batch_are_all_released(
    pool: PersonalPool, alice: ScheddClient
) -> None:
    full, empty, gone = (submit(alice, **SPOOLING) for _ in range(3))
    # A spool directory that went missing after the submit is made again by the stage-in.
    made_spool_dir(pool, gone).rmdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        data = tarfile.TarInfo(f"{full}/in.txt")
        data.size = 4
        tar.addfile(data, io.BytesIO(b"data"))
        for job in (empty, gone):  # an empty sandbox: its directory entry alone
            directory = tarfile.TarInfo(f"{job}/")
            directory.type, directory.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(directory)

    jobs = outcome(put_inputs(pool, "alice", buffer.getvalue()))

    assert jobs == {str(full): "ok", str(empty): "ok", str(gone): "ok"}
    assert (spool_dir(pool, full) / "in.txt").read_bytes() == b"data"
    for job in (empty, gone):
        assert list(spool_dir(pool, job).iterdir()) == []
    for job in (full, empty, gone):
        ad = alice.get(job)
        assert ad["JobStatus"] == 1 and ad["ReleaseReason"] == "Data files spooled"
        assert ad["Iwd"] == str(spool_dir(pool, job))


def test_a_job_whose_spool_directory_cannot_be_made_is_refused_alone(
    pool: PersonalPool, alice: ScheddClient
) -> None:
    jobs = [submit(alice, **SPOOLING) for _ in range(10)]
    blocked = jobs[3]
    made_spool_dir(pool, blocked).rmdir()
    spool_dir(pool, blocked).write_text("a file where the job's directory should be")

    answers = outcome(put_inputs(pool, "alice", tar_of({f"{j}/in.txt": b"x" for j in jobs})))

    assert str(spool_dir(pool, blocked)) in answers.pop(str(blocked))["detail"]
    assert answers == {str(j): "ok" for j in jobs if j != blocked}
    assert alice.get(blocked)["JobStatus"] == 5  # still held for its input


def test_a_user_cannot_upload_into_another_users_job(
    pool: PersonalPool, alice: ScheddClient, bob: ScheddClient
) -> None:
    mine = submit(bob, **SPOOLING)
    theirs = submit(alice, **SPOOLING)
    body = tar_of({f"{mine}/in.txt": b"bob's", f"{theirs}/in.txt": b"planted by bob"})

    jobs = outcome(put_inputs(pool, "bob", body))

    assert jobs[str(mine)] == "ok"
    refused = jobs[str(theirs)]
    assert refused["status"] == 403 and refused["error"] == "NotAuthorized"
    assert f"job {theirs} is owned by alice; bob may not stage input" in refused["detail"]
    assert list(spool_dir(pool, theirs).iterdir()) == []
    assert alice.get(theirs)["JobStatus"] == 5  # still waiting for alice's input
    assert bob.get(mine)["JobStatus"] == 1


@pytest.mark.parametrize(
    ("member", "why"),
    [("../escape.txt", "leaves the sandbox"), ("sub/../../escape.txt", "leaves the sandbox")],
)
def test_a_member_leaving_its_jobs_sandbox_fails_that_job_only(
    pool: PersonalPool, alice: ScheddClient, member: str, why: str
) -> None:
    good, bad = submit(alice, **SPOOLING), submit(alice, **SPOOLING)
    body = tar_of({f"{good}/in.txt": b"fine", f"{bad}/ok.txt": b"ok", f"{bad}/{member}": b"evil"})

    jobs = outcome(put_inputs(pool, "alice", body))

    assert jobs[str(good)] == "ok"
    assert jobs[str(bad)]["status"] == 400 and why in jobs[str(bad)]["detail"]
    assert list(spool_dir(pool, bad).iterdir()) == []  # not even its good member
    assert not (spool_dir(pool, bad).parent / "escape.txt").exists()
    assert (alice.get(good)["JobStatus"], alice.get(bad)["JobStatus"]) == (1, 5)


def test_a_member_outside_every_jobs_directory_refuses_the_whole_upload(
    pool: PersonalPool, alice: ScheddClient
) -> None:
    job = submit(alice, **SPOOLING)
    for member in ("../escape.txt", "/etc/escape.txt", "loose.txt"):
        response = put_inputs(pool, "alice", tar_of({f"{job}/in.txt": b"x", member: b"evil"}))
        assert response.status_code == 400, response.text
        assert repr(member) in response.json()["detail"]
    assert list(spool_dir(pool, job).iterdir()) == []
    assert alice.get(job)["JobStatus"] == 5


def test_unknown_and_removed_jobs_are_refused_on_their_own(
    pool: PersonalPool, alice: ScheddClient
) -> None:
    held = submit(alice, **SPOOLING)
    done = submit(alice, **SPOOLING)
    alice.act(JobAction.Remove, Jobs.of([done]))  # never ran: it leaves the queue
    body = tar_of({f"{held}/in.txt": b"x", f"{done}/in.txt": b"x", "999999.0/in.txt": b"x"})

    jobs = outcome(put_inputs(pool, "alice", body))

    assert jobs[str(held)] == "ok"
    assert jobs["999999.0"]["status"] == 404
    assert jobs[str(done)]["status"] == 404
