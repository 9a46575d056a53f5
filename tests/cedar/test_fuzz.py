"""No input wedges or crashes a CEDAR server: random bytes, random packets and random
handshakes, at the codec and at a served connection; each bad one is logged with a
reason, and a daemon's port still answers both protocols after a barrage."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import random
import socket
import struct

import htcondor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from htgrid.net._errors import CedarError
from htgrid.net.cedar import (
    CedarCall,
    CedarSecurity,
    CedarService,
    Channel,
    Command,
    Level,
    Reader,
    parse_ad,
)
from htgrid.net.security import MalformedToken, Principal
from htgrid.testing import wait_for
from htgrid.testing.collector import user_token

from .conftest import Configure, Daemon
from .test_collector_cedar import _https_query

_HEADER = struct.Struct(">BI")


def _principal(user: str) -> Principal:
    return Principal(user, f"{user}@fuzz.test", "FS", None, frozenset({"READ"}), "", "")


async def _refuse(token: str) -> Principal:
    raise MalformedToken("fuzzing")


def _security() -> CedarSecurity:
    """A daemon's security that refuses every token and lets anyone read."""
    return CedarSecurity(
        trust_domain="fuzz.test",
        key_names=lambda: ["POOL"],
        jwt_key=lambda kid: b"k" * 32,
        verify=_refuse,
        admit=lambda principal, level, host: None,
        local_user=_principal,
        still_valid=lambda principal: None,
        anonymous=_principal("unauthenticated"),
        read_authentication=Level.OPTIONAL,
    )


def _service() -> CedarService:
    security = _security()

    async def query(call: CedarCall) -> None:
        r = await call.receive()
        parse_ad(r.lines(), "the query")
        await call.send(call.writer().int(0))

    return CedarService("fuzz", [Command(5, "QUERY", "READ", query)], security)


async def _serve_once(data: bytes, service: CedarService | None = None) -> bytes:
    """Feed `data` to a served connection (of `service`, a plain one's by default), close
    our side, and take what came back."""
    ours, theirs = socket.socketpair()
    service = service if service is not None else _service()
    reader, writer = await asyncio.open_connection(sock=theirs)
    serving = asyncio.create_task(service.serve(reader, writer))
    loop = asyncio.get_running_loop()
    ours.setblocking(False)
    with contextlib.suppress(ConnectionError):
        await loop.sock_sendall(ours, data)
    ours.shutdown(socket.SHUT_WR)
    got = bytearray()
    while True:
        try:
            chunk = await loop.sock_recv(ours, 1 << 16)
        except ConnectionError:
            break
        if not chunk:
            break
        got += chunk
    ours.close()
    # The client is gone: the server ends now, whatever it was waiting for.
    await asyncio.wait_for(serving, 10)
    return bytes(got)


def _packet(payload: bytes, end: int = 1) -> bytes:
    return _HEADER.pack(end, len(payload)) + payload


def _auth_ad(lines: list[str]) -> bytes:
    body = struct.pack(">q", 60010) + struct.pack(">q", len(lines))
    body += b"".join(line.encode() + b"\0" for line in lines) + b"\0\0"
    return _packet(body)


_POINT = base64.b64encode(bytes([4]) + bytes(64)).decode()
_ATTRS = st.sampled_from(
    [
        "Command = 5",
        "Command = 60010",
        "Command = 60040",
        "AuthCommand = 5",
        'AuthMethods = "TOKEN,FS"',
        'AuthMethods = "CLAIMTOBE"',
        'CryptoMethods = "AES"',
        'Encryption = "REQUIRED"',
        'Encryption = "NEVER"',
        'AuthenticationNew = "NEVER"',
        'UseSession = "YES"',
        'Sid = "x:1:2"',
        "ResumeResponse = true",
        'SessionDuration = "60"',
        f'ECDHPublicKey = "{_POINT}"',
        'ECDHPublicKey = "!!"',
        "X = [ a = { 1, 2 } ]",
        "Y = = =",
    ]
)


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="htgrid.net.cedar")


def _no_defect(caplog: pytest.LogCaptureFixture) -> None:
    defects = [r for r in caplog.records if r.exc_info]
    assert not defects, defects[0].getMessage()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=2000))
def test_random_bytes_end_the_connection_with_a_reason(
    data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.clear()
    asyncio.run(_serve_once(data))
    _no_defect(caplog)
    if data:
        assert any(r.name == "htgrid.net.cedar" for r in caplog.records)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    attrs=st.lists(_ATTRS, max_size=12),
    then=st.lists(st.binary(min_size=1, max_size=300), max_size=4),
)
def test_random_handshakes_end_the_connection_with_a_reason(
    attrs: list[str], then: list[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.clear()
    data = _auth_ad(attrs) + b"".join(_packet(p) for p in then)
    asyncio.run(_serve_once(data))
    _no_defect(caplog)
    assert any(r.levelno >= logging.INFO for r in caplog.records if r.name == "htgrid.net.cedar")


@given(st.binary(max_size=3000))
def test_the_codec_raises_only_its_own_error(data: bytes) -> None:
    channel = Channel()
    channel.receive_data(data)
    with contextlib.suppress(CedarError):
        while (message := channel.next_message()) is not None:
            for encrypted in (False, True):
                r = Reader(message, encrypted)
                with contextlib.suppress(CedarError):
                    r.int()
                    parse_ad(r.lines(limit=50), "fuzz")
                    r.string()


def test_the_daemons_port_survives_a_barrage(
    collector: Daemon, home: object, condor: Configure
) -> None:
    """Garbage, half handshakes and silent connections at the collector's port: it still
    answers HTCondor's client and its HTTPS API, and says why it dropped each."""
    host, port = collector.address.split(":")
    rng = random.Random(31)
    silent = [socket.create_connection((host, int(port))) for _ in range(20)]
    for n in range(60):
        with socket.create_connection((host, int(port))) as s:
            kind = n % 3
            if kind == 0:
                s.sendall(rng.randbytes(rng.randrange(1, 4000)))
            elif kind == 1:
                s.sendall(_auth_ad(["Command = 5", 'AuthMethods = "TOKEN"']))
            else:
                s.sendall(_packet(rng.randbytes(50)) + b"\x01\xff")
    condor(collector.address, token=user_token(home, "alice"))  # type: ignore[arg-type]
    ads = htcondor2.Collector(collector.address).query(htcondor2.AdTypes.Collector)
    assert [ad["Name"] for ad in ads] == ["htgrid pool"]
    assert [ad["Name"] for ad in _https_query(collector.address, home, "Collector")] == [  # type: ignore[arg-type]
        "htgrid pool"
    ]
    for s in silent:
        s.close()
    # Each dropped connection is logged as the daemon gets to it: not before the test's
    # queries are answered, necessarily.
    log = wait_for(
        lambda: ("protocol error" in (text := collector.logged()) or "refused" in text) and text,
        what="a dropped connection in the log",
    )
    assert "Traceback" not in log


def test_a_trickling_client_is_cut_off_like_a_silent_one(caplog: pytest.LogCaptureFixture) -> None:
    """One byte at a time, each within the timeout: the whole message's deadline ends the
    connection before its first message is even complete."""

    async def trickle() -> int:
        service = _service()
        service.handshake_timeout = 0.5
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=theirs)
        serving = asyncio.create_task(service.serve(reader, writer))
        ours.setblocking(False)
        loop = asyncio.get_running_loop()
        sent = 0
        for byte in _auth_ad(["Command = 5"]):
            if serving.done():
                break
            with contextlib.suppress(ConnectionError):
                await loop.sock_sendall(ours, bytes([byte]))
            sent += 1
            await asyncio.sleep(0.05)
        await asyncio.wait_for(serving, 10)
        ours.close()
        return sent

    sent = asyncio.run(trickle())
    assert sent < len(_auth_ad(["Command = 5"]))
    assert any("no whole message from the client" in r.getMessage() for r in caplog.records)
