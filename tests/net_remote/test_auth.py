"""Who may do what over TLS: the token's user, other users, administrators, and callers
whose tokens (or certificates) are refused."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import httpx
import pytest

from htgrid.net import Jobs, ScheddClient
from htgrid.net.security import (
    CertificateError,
    ExpiredToken,
    ForgedToken,
    PoolCA,
    RevocationList,
    RevokedToken,
    SecurityConfig,
    TokenIssuer,
    client_ssl_context,
)
from htgrid.queue import JobAction, JobNotFound, NotAuthorized
from htgrid.testing import PersonalPool

from ._support import submit, tar_of
from .conftest import DOMAIN


def test_a_user_submits_queries_and_acts_on_own_jobs(pool: PersonalPool) -> None:
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as alice:
        assert alice.health()["you"] == {"user": "alice", "admin": False}
        job = submit(alice, Owner="mallory")  # the ad's Owner is not believed
        ad = alice.get(job)
        assert ad["Owner"] == "alice" and ad["JobStatus"] == 1
        assert [a["ClusterId"] for a in alice.query(f"ClusterId == {job.cluster}")] == [job.cluster]
        assert alice.act(JobAction.Hold, Jobs.of([job]), "wait") == [job]
        assert alice.get(job)["HoldReason"] == "wait"
        assert alice.act(JobAction.Release, Jobs.of([job])) == [job]
        assert alice.edit(Jobs.of([job]), {"Color": '"blue"'}) == [job]
        assert alice.get(job)["Color"] == "blue"
        assert alice.act(JobAction.Remove, Jobs.of([job])) == [job]


def test_another_user_reads_but_cannot_touch(pool: PersonalPool) -> None:
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as alice:
        job = submit(alice)
    with pool.remote(pool.token(f"bob@{DOMAIN}")) as bob:
        assert bob.get(job)["Owner"] == "alice"  # as condor_q shows everyone's jobs
        for attempt in (
            lambda: bob.act(JobAction.Hold, Jobs.of([job])),
            lambda: bob.edit(Jobs.of([job]), {"Color": '"red"'}),
            lambda: bob.put_input(job, tar_of({"x": b"x"})),
            lambda: bob.get_output(job),
        ):
            with pytest.raises(NotAuthorized, match=f"job {job} is owned by alice; bob may not"):
                attempt()
        assert bob.update_leases({job: 2_000_000_000}) == []  # skipped, not an error
        # A constraint acts only on the caller's own jobs, as condor_rm -constraint does.
        assert bob.act(JobAction.Hold, Jobs.matching(f"ClusterId == {job.cluster}")) == []
        with pytest.raises(JobNotFound):
            bob.get("9999.0")
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as alice:
        ad = alice.get(job)
        assert ad["JobStatus"] == 1 and "Color" not in ad and "JobLeaseExpiration" not in ad


def test_an_administrator_acts_on_anyones_jobs(pool: PersonalPool) -> None:
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as alice:
        job = submit(alice)
    with pool.remote(pool.token(f"condor@{DOMAIN}")) as admin:
        assert admin.health()["you"] == {"user": "condor", "admin": True}
        assert admin.act(JobAction.Hold, Jobs.of([job]), "by the admin") == [job]
        assert admin.update_leases({job: 2_000_000_000}) == [job]
        ad = admin.get(job)
        assert (ad["JobStatus"], ad["JobLeaseExpiration"]) == (5, 2_000_000_000)
        # An administrator may submit for another owner (QUEUE_SUPER_USERS).
        assert admin.get(submit(admin, Owner="carol"))["Owner"] == "carol"


def test_a_read_only_token_cannot_write(pool: PersonalPool) -> None:
    with pool.remote(pool.token(f"alice@{DOMAIN}", authz=["READ"])) as reader:
        assert reader.query(limit=1) is not None
        with pytest.raises(Exception) as caught:
            reader.reserve_cluster()
    assert type(caught.value).__name__ == "InsufficientScope"
    assert "does not grant WRITE" in str(caught.value)


def _claims(token: str) -> dict[str, object]:
    body = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))


def _log(pool: PersonalPool) -> str:
    return pool.config.log_file.read_text()


def test_refused_tokens_are_401_with_a_reason_and_logged(
    pool: PersonalPool, tmp_path: Path
) -> None:
    config = SecurityConfig.load(pool.home)
    impostor = TokenIssuer(SecurityConfig(tmp_path / "impostor", DOMAIN)).create("condor")
    expired = TokenIssuer(config, clock=lambda: 1_000_000_000.0).create("bob", lifetime=60)
    revoked = pool.token(f"bob@{DOMAIN}")
    with pool.remote(revoked) as bob:
        assert bob.health()["you"]["user"] == "bob"
    RevocationList(config.revocation_file).add(_claims(revoked)["jti"], "test")
    for token, error, message in (
        (impostor, ForgedToken, "signature does not match"),
        (expired, ExpiredToken, "expired at 2001-09-09 01:47:40 UTC"),
        (revoked, RevokedToken, "has been revoked"),
    ):
        with pool.remote(token) as client, pytest.raises(error, match=message):
            client.query()
        logged = [line for line in _log(pool).splitlines() if error.__name__ in line]
        assert logged and re.search(r"refused GET /v1/jobs from 127\.0\.0\.1:\d+", logged[-1])
        assert token.rsplit(".", 1)[1] not in _log(pool)  # never the token itself


def test_no_token_is_told_which_pool_to_ask(pool: PersonalPool) -> None:
    context = client_ssl_context([SecurityConfig.load(pool.home).ca_dir / "ca.crt"])
    with httpx.Client(base_url=pool.url, verify=context) as raw:
        response = raw.get("/v1/jobs")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == f'Bearer realm="{DOMAIN}"'
    assert response.json()["error"] == "MissingToken"
    assert "MissingToken" in _log(pool)


def test_a_client_that_does_not_trust_the_pool_ca_stops_at_the_handshake(
    pool: PersonalPool, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger"  # a pool with a CA of its own, trusting no other
    PoolCA(SecurityConfig(stranger, "other.test").ca_dir).ensure()
    token = pool.token(f"alice@{DOMAIN}")
    with (
        ScheddClient.remote(pool.url, home=stranger, token=token) as client,
        pytest.raises(CertificateError, match="a certificate this pool does not trust") as caught,
    ):
        client.query()
    assert "etc/ca/trusted.d/" in str(caught.value)


def test_the_openapi_document_lists_the_remote_routes(pool: PersonalPool) -> None:
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as alice:
        paths = alice.openapi()["paths"]
    assert set(paths["/v1/jobs/{job_id}/input"]) == {"put"}
    assert "application/x-tar" in paths["/v1/jobs/{job_id}/input"]["put"]["requestBody"]["content"]
    assert (
        "application/x-tar"
        in paths["/v1/jobs/{job_id}/output"]["get"]["responses"]["200"]["content"]
    )
    assert paths["/v1/jobs/lease"]["post"]["operationId"] == "lease"


def test_the_daemon_publishes_its_url(pool: PersonalPool) -> None:
    assert re.fullmatch(r"https://127\.0\.0\.1:\d+", pool.url)
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as alice:
        assert alice.health()["pid"] == pool.pid
