"""What a daemon's CEDAR side holds: at most NETWORK_MAX_PENDING_CONNECTS connections
(past it newcomers are closed, the others served on), and sessions no longer than
SEC_DEFAULT_SESSION_DURATION, at most MAX_SESSIONS of them."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import htcondor2
import pytest

from htgrid.classad import ClassAd
from htgrid.net.cedar import Channel, Reader, Writer, parse_ad
from htgrid.net.cedar._policy import Sessions
from htgrid.net.security import Principal
from htgrid.testing import wait_for
from htgrid.testing.collector import pool_home

from .conftest import DOMAIN, Configure, Daemon, running_collector
from .test_fuzz import _auth_ad, _packet

CAP = 4


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("limits")
    conf = (
        "SEC_READ_AUTHENTICATION = OPTIONAL\n"
        f"NETWORK_MAX_PENDING_CONNECTS = {CAP}\n"
        "SEC_DEFAULT_SESSION_DURATION = 0\n"
    )
    home = pool_home(tmp / "pool", DOMAIN, conf)
    with running_collector(home, tmp / "CollectorLog") as daemon:
        yield daemon


class _RawClient:
    """A bare CEDAR client on a plaintext session, a step at a time."""

    def __init__(self, address: str) -> None:
        host, port = address.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        self.channel = Channel()

    def message(self) -> Reader:
        while (data := self.channel.next_message()) is None:
            chunk = self.sock.recv(1 << 16)
            assert chunk, "the daemon closed the connection"
            self.channel.receive_data(chunk)
        return Reader(data, False)

    def hello(self, command: int) -> None:
        """A new plaintext session for `command`, not authenticated."""
        self.sock.sendall(
            _auth_ad(
                [
                    f"Command = {command}",
                    'Enact = "NO"',
                    'AuthenticationNew = "OPTIONAL"',
                    'Encryption = "NEVER"',
                    'Integrity = "NEVER"',
                ]
            )
        )
        self.message()  # the policy
        assert parse_ad(self.message().lines(), "post-auth").get("ReturnCode") == "AUTHORIZED"

    def query(self, lines: list[str]) -> list[ClassAd]:
        """A query ad's answer: the ads (`int 1` + ad each, then `int 0`)."""
        self.sock.sendall(_packet(Writer(False).lines([x.encode() for x in lines]).getvalue()))
        r, ads = self.message(), []
        while r.int():
            ads.append(parse_ad(r.lines(), "an ad"))
        r.done("the answer")
        return ads


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.2)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_past_the_cap_newcomers_are_closed_and_the_others_served(
    collector: Daemon, condor: Configure
) -> None:
    host, port = collector.address.split(":")
    busy = _RawClient(collector.address)
    busy.hello(20)  # a client in the middle of its command
    silent = [socket.create_connection((host, int(port))) for _ in range(CAP - 1)]
    try:
        late = socket.create_connection((host, int(port)))
        assert wait_for(lambda: _closed_by_peer(late), timeout=10)
        late.close()
        wait_for(lambda: "NETWORK_MAX_PENDING_CONNECTS = 4" in collector.logged())
        # The one in the middle of its command is answered as if nothing happened...
        assert len(busy.query(['TargetType = "Collector"', "Requirements = true"])) == 1
        # ...and those waiting are still open.
        assert not any(_closed_by_peer(s) for s in silent)
    finally:
        busy.sock.close()
        for s in silent:
            s.close()
    # Room again: HTCondor's client is served.
    condor(collector.address, token=None)
    c = htcondor2.Collector(collector.address)
    ads = wait_for(lambda: _query_or_none(c))
    assert [ad["Name"] for ad in ads] == ["htgrid pool"]


def _query_or_none(c: htcondor2.Collector) -> list[htcondor2.ClassAd] | None:  # type: ignore[name-defined]
    try:
        return c.query(htcondor2.AdTypes.Collector)
    except htcondor2.HTCondorException:
        return None


def test_sessions_last_no_longer_than_the_daemon_grants(
    collector: Daemon, condor: Configure
) -> None:
    """SEC_DEFAULT_SESSION_DURATION = 0: the client may not resume, and negotiates a
    session for each command (its own SessionDuration would have let it resume)."""
    condor(collector.address, token=None)
    c = htcondor2.Collector(collector.address)
    before = collector.logged().count("for QUERY_MASTER_ADS")
    for _ in range(3):
        assert c.query(htcondor2.AdTypes.Master) == []
    wait_for(lambda: collector.logged().count("for QUERY_MASTER_ADS") == before + 3)


def _principal() -> Principal:
    return Principal("u", "u@x", "FS", None, frozenset({"READ"}), "", "")


def test_the_session_cache_drops_the_expired_and_stays_bounded() -> None:
    now = [1000.0]
    sessions = Sessions(lambda: now[0], "t", limit=10)
    old = [
        sessions.add(sessions.new_id(), None, _principal(), frozenset({5}), 60) for _ in range(5)
    ]
    assert all(sessions.get(s.sid) is s for s in old)
    now[0] += 100  # past 60 s and the 20 s slop
    assert sessions.get(old[0].sid) is None
    fresh = [
        sessions.add(sessions.new_id(), None, _principal(), frozenset({5}), 60) for _ in range(2)
    ]
    assert len(sessions) == 2  # the expired went as new ones came
    for _ in range(20):
        sessions.add(sessions.new_id(), None, _principal(), frozenset({5}), 60)
    assert len(sessions) == 10
    assert all(sessions.get(s.sid) is None for s in fresh)  # the oldest went first
