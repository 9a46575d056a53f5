"""PUT /v1/jobs/{c.p}/proxy: a spooled job's renewed X.509 proxy (CONDOR_JOB_REFRESH_PROXY's
remote part) takes the place of the one its input brought, for its owner only, and only
inside the job's own spool directory."""

from __future__ import annotations

from pathlib import Path

import httpx

from htgrid.net import ScheddClient
from htgrid.queue import JobId
from htgrid.schedd._spool_output import output_files
from htgrid.testing import PersonalPool, proxy_pem

from ._support import SPOOLING, put_raw, spool_dir, submit, tar_of
from .conftest import DOMAIN

PROXY = "x509up_u1000"


def put_proxy(pool: PersonalPool, user: str, job: JobId, body: bytes) -> httpx.Response:
    token = pool.token(f"{user}@{DOMAIN}")
    return put_raw(pool, token, f"/v1/jobs/{job}/proxy", body, "application/x-pem-file")


def _staged_with_proxy(alice: ScheddClient, first: bytes) -> JobId:
    job = submit(alice, x509userproxy=PROXY, **SPOOLING)
    alice.put_input(job, tar_of({PROXY: first, "in.txt": b"input"}, mode=0o600))
    return job


def test_a_renewed_proxy_replaces_the_one_the_input_brought(
    pool: PersonalPool, alice: ScheddClient
) -> None:
    job = _staged_with_proxy(alice, proxy_pem(2_000_000_000))
    renewed = proxy_pem(2_100_000_000)

    answer = put_proxy(pool, "alice", job, renewed)

    assert answer.status_code == 200, answer.text
    path = spool_dir(pool, job) / PROXY
    assert path.read_bytes() == renewed
    assert path.stat().st_mode & 0o777 == 0o600
    assert alice.get(job)["x509UserProxyExpiration"] == 2_100_000_000
    # Not output: only what the job makes goes back to the submitter.
    ad = alice.get(job)
    assert PROXY not in output_files(ad, spool_dir(pool, job))


def test_a_file_that_is_no_certificate_replaces_it_all_the_same(
    pool: PersonalPool, alice: ScheddClient
) -> None:
    job = _staged_with_proxy(alice, b"old proxy")

    assert put_proxy(pool, "alice", job, b"new proxy").status_code == 200

    assert (spool_dir(pool, job) / PROXY).read_bytes() == b"new proxy"
    assert "x509UserProxyExpiration" not in alice.get(job)


def test_only_the_owner_may_refresh_it(pool: PersonalPool, alice: ScheddClient) -> None:
    job = _staged_with_proxy(alice, b"alice's")

    answer = put_proxy(pool, "bob", job, b"bob's")

    assert answer.status_code == 403, answer.text
    assert "bob" in answer.json()["detail"]
    assert (spool_dir(pool, job) / PROXY).read_bytes() == b"alice's"


def test_a_job_without_a_proxy_or_not_spooled_is_refused(
    pool: PersonalPool, alice: ScheddClient, tmp_path: Path
) -> None:
    plain = submit(alice, **SPOOLING)
    alice.put_input(plain, tar_of({"in.txt": b"input"}))
    # A job whose files are its submitter's: its proxy path is not the daemon's to write.
    target = tmp_path / "not-the-daemons.pem"
    target.write_bytes(b"keep me")
    elsewhere = submit(alice, x509userproxy=str(target))

    no_proxy = put_proxy(pool, "alice", plain, b"new")
    not_spooled = put_proxy(pool, "alice", elsewhere, b"new")

    assert no_proxy.status_code == 409 and "no x509userproxy" in no_proxy.json()["detail"]
    assert not_spooled.status_code == 409
    assert "not spooled" in not_spooled.json()["detail"]
    assert target.read_bytes() == b"keep me"


def test_an_empty_or_oversized_body_is_refused(pool: PersonalPool, alice: ScheddClient) -> None:
    job = _staged_with_proxy(alice, b"old")

    empty = put_proxy(pool, "alice", job, b"")
    huge = put_proxy(pool, "alice", job, b"x" * (2 << 20))

    assert empty.status_code == 400 and huge.status_code == 400
    assert (spool_dir(pool, job) / PROXY).read_bytes() == b"old"
