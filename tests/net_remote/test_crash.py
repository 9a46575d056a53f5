"""A daemon killed (-9) in the middle of a stage-in loses nothing it had committed."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from htgrid.net.security import SecurityConfig, client_ssl_context
from htgrid.testing import PersonalPool

from ._support import SPOOLING, submit, tar_of
from .conftest import DOMAIN


def _start_upload(pool: PersonalPool, path: str, token: str, body: bytes) -> socket.socket:
    """A PUT whose headers and first half of the body are sent; the rest never is."""
    url = urlsplit(pool.url)
    context = client_ssl_context([SecurityConfig.load(pool.home).ca_dir / "ca.crt"])
    raw = socket.create_connection((url.hostname, url.port), timeout=10)
    conn = context.wrap_socket(raw, server_hostname=url.hostname)
    head = (
        f"PUT {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/x-tar\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    conn.sendall(head.encode() + body[: len(body) // 2])
    return conn


def test_a_kill_during_stage_in_leaves_the_job_held_for_a_new_upload(
    shared_tmp_factory: Callable[[str], Path], test_users: tuple[str, ...]
) -> None:
    home = shared_tmp_factory("crash") / "pool"  # alice's input is written as alice
    with PersonalPool(home, fsync=True, config={"TRUST_DOMAIN": DOMAIN}) as pool:
        token = pool.token(f"alice@{DOMAIN}")
        with pool.remote(token) as alice:
            job = submit(alice, **SPOOLING)
        archive = tar_of({"big.dat": b"x" * 4_000_000, "small.txt": b"small\n"})
        conn = _start_upload(pool, f"/v1/jobs/{job}/input", token, archive)
        pool.kill()
        conn.close()
        pool.start()
        with pool.remote(token) as alice:
            ad = alice.get(job)
            assert (ad["JobStatus"], ad["HoldReasonCode"]) == (5, 16)
            sandbox = Path(ad["Iwd"])
            assert list(sandbox.iterdir()) == []
            assert alice.put_input(job, archive) == [job]
            assert alice.get(job)["JobStatus"] == 1
        assert (sandbox / "small.txt").read_bytes() == b"small\n"
        assert (sandbox / "big.dat").stat().st_size == 4_000_000
