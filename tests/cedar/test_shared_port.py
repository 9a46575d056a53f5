"""HTCondor's shared port: with USE_SHARED_PORT the schedd advertises the collector's
port (`<host:port?noUDP&sock=schedd>`), and the official client reaches it there: the
collector reads the client's SHARED_PORT_CONNECT and hands the connection to the schedd."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import htcondor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from htgrid.net._errors import CedarError
from htgrid.net._shared_port import shared_port_request
from htgrid.net.security import SecurityConfig
from htgrid.testing import PersonalPool, wait_for

from .conftest import Configure
from .test_fuzz import _packet


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("shared") / "pool"
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    daemons = ("MASTER", "SCHEDD", "COLLECTOR")
    config = {"USE_SHARED_PORT": "true", "SCHEDD_INTERVAL": 1}
    with PersonalPool(home, kill_grace=2, fsync=False, daemons=daemons, config=config) as pool:
        yield pool


def _located(pool: PersonalPool, condor: Configure, methods: str = "TOKEN") -> htcondor2.ClassAd:  # type: ignore[name-defined]
    token = pool.token(f"root@{SecurityConfig.load(pool.home).trust_domain}")
    condor(pool.collector, token=token, methods=methods)
    collector = htcondor2.Collector(pool.collector)
    return wait_for(lambda: collector.locate(htcondor2.DaemonTypes.Schedd))


def test_the_schedd_is_reached_through_the_collectors_port(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    ad = _located(pool, condor)
    port = pool.collector.rpartition(":")[2]
    assert ad["MyAddress"] == f"<127.0.0.1:{port}?noUDP&sock=schedd>"
    schedd = htcondor2.Schedd(ad)
    submit = htcondor2.Submit(
        {"executable": "/bin/true", "requirements": "false", "log": str(tmp_path / "log")}
    )
    cluster = schedd.submit(submit, count=2).cluster()
    ads = schedd.query(f"ClusterId == {cluster}", ["ProcId", "Owner"])
    assert sorted(a["ProcId"] for a in ads) == [0, 1]
    assert schedd.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")["TotalSuccess"] == 2
    # The collector itself still answers on its port, to any ID but another daemon's.
    assert htcondor2.Collector(pool.collector).query(htcondor2.AdTypes.Collector)


def test_an_unknown_id_is_refused_and_the_port_goes_on(pool: PersonalPool) -> None:
    host, port = pool.collector.split(":")
    body = struct.pack(">q", 75) + b"nobody\0client\0" + struct.pack(">qq", 20, 0)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(_packet(body))
        assert s.recv(1) == b""  # closed
    log = Path(pool.home / "log" / "CollectorLog")
    wait_for(lambda: "for 'nobody': no such daemon" in log.read_text(errors="replace"))


@settings(max_examples=150, deadline=None)
@given(
    header=st.tuples(st.integers(0, 255), st.integers(0, 1 << 32 - 1)),
    body=st.binary(max_size=300),
    command=st.sampled_from([75, 60010, -1]),
)
def test_any_first_message_is_routed_or_refused(
    header: tuple[int, int], body: bytes, command: int
) -> None:
    """Whatever follows the first bytes: an ID, None (not a shared port request), or
    CedarError; never another error, never a wait past the deadline."""

    async def run() -> None:
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        payload = struct.pack(">q", command) + body
        data = struct.pack(">BI", header[0] % 2, len(payload)) + payload
        if header[0] > 1:  # a header that lies about its length or end flag
            data = struct.pack(">BI", header[0], header[1]) + payload
        ours.sendall(data)
        ours.shutdown(socket.SHUT_WR)
        try:
            got = await asyncio.wait_for(shared_port_request(theirs, 0.5), 5)
            assert got is None or isinstance(got, str)
        except CedarError:
            pass
        finally:
            ours.close()
            theirs.close()

    asyncio.run(run())


def test_fs_binds_its_proof_to_the_shared_port(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    """FS through the shared port: the client names `ip:port?sock=schedd` in its
    directory, and the schedd takes it. (A process of its own: this one's client keeps
    the sessions the other tests made with the schedd.)"""
    config = condor(pool.collector, methods="FS")
    script = (
        "import sys, htcondor2\n"
        "c = htcondor2.Collector(sys.argv[1])\n"
        "s = htcondor2.Schedd(c.locate(htcondor2.DaemonTypes.Schedd))\n"
        "print(len(s.query('false')))\n"
    )
    env = dict(os.environ, CONDOR_CONFIG=str(config), HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script, pool.collector],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
    log = (pool.home / "log" / "SchedLog").read_text(errors="replace")
    assert "(FS) for QUERY_JOB_ADS" in log
