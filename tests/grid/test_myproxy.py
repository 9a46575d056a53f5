"""A grid job's X.509 proxy renewed from a real MyProxy server (`.ci/myproxy-up.sh`) before
it expires: the job keeps running past the first proxy's expiry, the renewed proxy
reaches the batch job's copy (BLAH_JOB_REFRESH_PROXY); a wrong password holds the job
saying why. The password is in none of the queue, the event log or the grid manager's
log. Skipped without the server, except in CI."""

from __future__ import annotations

import asyncio
import logging
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.client.x509 import make_proxy, read_proxy
from htgrid.pool import myproxy_password_file, store_myproxy_password
from htgrid.queue import JobId, JobStatus
from htgrid.testing.myproxy import (
    MYPROXY_PORT,
    PKI,
    destroy_credential,
    new_credential,
    require_myproxy,
)

from ._harness import Grid, running, unset, wait_for

require_myproxy(module=True)

PASSPHRASE = "grid-" + secrets.token_hex(6)
#: The job says it runs ($2), waits (at most 60 s) until its copy of the proxy outlives
#: $1, keeps that copy ($3), then waits (at most 60 s) for the word to end ($4).
JOB = """#!/bin/sh
touch "$2"
n=0
while [ $n -lt 600 ]; do
  end=$(openssl x509 -noout -enddate -in "$X509_USER_PROXY" | cut -d= -f2)
  [ "$(date -d "$end" +%s)" -gt "$1" ] && break
  sleep 0.1; n=$((n + 1))
done
cp "$X509_USER_PROXY" "$3"
n=0
while [ ! -e "$4" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
"""


@pytest.fixture(scope="module")
def credential() -> Iterator[str]:
    name = new_credential("root", PASSPHRASE)
    yield name
    destroy_credential("root", name)


def _proxy(where: Path, lifetime: float) -> Path:
    path = where / "x509up"
    cert, key = (PKI / "user.pem").read_bytes(), (PKI / "user.key").read_bytes()
    path.write_bytes(make_proxy(cert, key, lifetime=lifetime))
    path.chmod(0o600)
    return path


def _submit(grid: Grid, proxy: Path, credential: str, password: str, extra: str = "") -> JobId:
    (job,) = grid.submit(
        f"x509userproxy = {proxy}\n"
        f"MyProxyHost = localhost:{MYPROXY_PORT}\n"
        f"MyProxyCredentialName = {credential}\n"
        "MyProxyNewProxyLifetime = 30\n"
        f"log = job.log\n{extra}"
    )
    # What the schedd does with the password submitted with the job.
    store_myproxy_password(grid.home / "spool", job.cluster, job.proc, password)
    return job


def _nowhere(grid: Grid, secret: str, caplog: pytest.LogCaptureFixture) -> None:
    """The password is in none of the queue's files, the event log, the job's ad, the log."""
    for path in (grid.home / "spool").rglob("*"):
        if path.is_file() and "myproxy" not in path.parts:
            assert secret.encode() not in path.read_bytes(), path
    assert secret not in grid.log()
    assert secret not in caplog.text


def test_a_proxy_near_expiry_is_renewed_from_myproxy_and_the_job_runs_on(
    grid: Grid, credential: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    proxy = _proxy(grid.work, lifetime=900)  # not due yet: renewed with 600 s left
    script = grid.work / "job.sh"
    script.write_text(JOB)
    script.chmod(0o755)
    ready, copy, go = grid.work / "ready", grid.work / "copy.pem", grid.work / "go"
    job = _submit(
        grid,
        proxy,
        credential,
        PASSPHRASE,
        f"MyProxyRefreshThreshold = 600\nexecutable = {script}\n"
        f"arguments = {int(time.time()) + 1200} {ready} {copy} {go}\n",
    )

    async def main() -> None:
        async with running(grid):
            await wait_for("the job to run", ready.exists)
            # The user's proxy now has seconds left: MyProxy renews it, the batch job's
            # copy follows, and the job runs on past the short proxy's expiry.
            short = _proxy(grid.work, lifetime=4)
            expires = read_proxy(short).expiration
            await wait_for("the renewed proxy at the batch job", copy.exists)
            await wait_for("the short proxy's expiry", lambda: time.time() > expires + 1)
            assert grid.ad(job)["JobStatus"] == JobStatus.RUNNING
            go.touch()
            await wait_for("the job to end", lambda: not grid.in_queue(job))

    asyncio.run(main())
    ad = grid.ad(job)
    assert ad["JobStatus"] == JobStatus.COMPLETED, ad.get("HoldReason")
    assert ad["ExitCode"] == 0
    renewed = read_proxy(proxy)
    assert renewed.identity == "/DC=org/DC=realgridtest/CN=Test User"
    assert renewed.expiration > time.time() + 25 * 60  # MyProxyNewProxyLifetime = 30
    assert stat.S_IMODE(proxy.stat().st_mode) == 0o600
    assert read_proxy(copy).expiration == renewed.expiration
    assert ad["x509UserProxyExpiration"] == renewed.expiration
    assert ad["DelegatedProxyExpiration"] == renewed.expiration  # BLAH_JOB_REFRESH_PROXY
    _nowhere(grid, PASSPHRASE, caplog)


def test_a_wrong_password_holds_the_job_saying_why(
    grid: Grid, credential: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-" + secrets.token_hex(6)
    proxy = _proxy(grid.work, lifetime=3600)
    # Due at once (an hour left, renewed with 2 hours left): held before it is submitted.
    job = _submit(
        grid, proxy, credential, wrong, "MyProxyRefreshThreshold = 7200\nexecutable = /bin/true\n"
    )
    before = proxy.read_bytes()

    async def main() -> None:
        async with running(grid):
            await wait_for("the hold", lambda: grid.ad(job)["JobStatus"] == JobStatus.HELD)

    asyncio.run(main())
    ad = grid.ad(job)
    assert ad["HoldReasonCode"] == 4
    reason = ad["HoldReason"]
    assert reason.startswith("Cannot renew the job's X.509 proxy: MyProxy server localhost:")
    assert "refused: wrong passphrase for the credential" in reason
    assert unset(ad, "GridJobSubmitTime")  # held before anything was sent
    assert proxy.read_bytes() == before  # the proxy is left as it was
    assert myproxy_password_file(grid.home / "spool", job.cluster, job.proc).exists()
    _nowhere(grid, wrong, caplog)
