"""A grid job whose X.509 proxy expired is held before anything is sent (every grid type
checks it the same way), with HoldReasonCode 4 and a reason that says when."""

from __future__ import annotations

import asyncio
import datetime
import logging
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from htgrid.client.x509 import make_proxy
from htgrid.pool import store_myproxy_password
from htgrid.queue import JobStatus

from ._harness import Grid, running, unset, wait_for


def _credential(days_left: float) -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Proxy Tester")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=10))
        .not_valid_after(now + datetime.timedelta(days=days_left))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem


def _proxy(where: Path, *, expired: bool) -> Path:
    """A proxy valid for an hour from now, or one made two hours ago for an hour."""
    now = datetime.datetime.now(datetime.UTC)
    made = now - datetime.timedelta(hours=2) if expired else now
    path = where / "x509up"
    path.write_bytes(make_proxy(*_credential(5), lifetime=3600, now=made))
    return path


def test_an_expired_proxy_holds_the_job_before_it_is_submitted(grid: Grid) -> None:
    expired = _proxy(grid.work, expired=True)
    (held,) = grid.submit(f"x509userproxy = {expired}\nexecutable = /bin/true")
    (fine,) = grid.submit(
        f"x509userproxy = {_proxy(grid.work / '..', expired=False)}\nexecutable = /bin/true"
    )
    (missing,) = grid.submit("x509userproxy = /nonexistent/x509up\nexecutable = /bin/true")

    async def main() -> None:
        async with running(grid):
            await wait_for("the hold", lambda: grid.ad(held)["JobStatus"] == JobStatus.HELD)
            await wait_for(
                "the other hold", lambda: grid.ad(missing)["JobStatus"] == JobStatus.HELD
            )
            await wait_for("the good job to finish", lambda: not grid.in_queue(fine), 60)

    asyncio.run(main())
    ad = grid.ad(held)
    assert ad["HoldReasonCode"] == 4
    assert ad["HoldReason"].startswith("The job's X.509 proxy expired at ")
    assert unset(ad, "GridJobId")  # nothing was sent anywhere
    other = grid.ad(missing)
    assert other["HoldReasonCode"] == 4
    assert other["HoldReason"] == (
        "Cannot read the job's X.509 proxy /nonexistent/x509up: No such file or directory"
    )
    assert grid.ad(fine)["JobStatus"] == JobStatus.COMPLETED


def test_a_myproxy_server_out_of_reach_leaves_the_expiry_to_hold_the_job(
    grid: Grid, caplog: pytest.LogCaptureFixture
) -> None:
    # One job's MyProxy server does not answer (tried again every 30 s), the other was
    # submitted without a password (said once): both are held when the proxy expires.
    caplog.set_level(logging.INFO, logger="htgrid.grid")
    proxy = grid.work / "x509up"
    proxy.write_bytes(make_proxy(*_credential(5), lifetime=3))
    myproxy = "MyProxyHost = 127.0.0.1:1\nMyProxyRefreshThreshold = 3600\n"
    body = f"x509userproxy = {proxy}\n{myproxy}executable = /bin/sleep\narguments = 60"
    (down,) = grid.submit(body)
    (unset_password,) = grid.submit(body)
    store_myproxy_password(grid.home / "spool", down.cluster, down.proc, "not-used-here")

    async def main() -> None:
        async with running(grid):
            for job in (down, unset_password):
                await wait_for(f"{job} held", lambda j=job: grid.ad(j)["JobStatus"] == 5)

    asyncio.run(main())
    for job in (down, unset_password):
        ad = grid.ad(job)
        assert ad["HoldReasonCode"] == 4
        assert ad["HoldReason"].startswith("The job's X.509 proxy expired at ")
    assert "cannot reach MyProxy server 127.0.0.1:1" in caplog.text
    assert caplog.text.count("without its password") == 1
