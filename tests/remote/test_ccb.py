"""An execute node behind NAT (HTCondor's CCB): the schedd cannot connect to it, and
everything it needs of it goes over connections the node makes, through the broker in
the pool's collector. The node runs in a network namespace of its own (root): what it
listens on nobody outside reaches, and it reaches only the pool's collector and the
schedd's return port."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.collector import CollectorClient, CollectorRefused, ccb_contact
from htgrid.net.security import SecurityConfig, ensure_pool_security, pinned_ssl_context
from htgrid.startd import TLS_CERTIFICATE, StartdClient, StartdUnavailable, host_port_of
from htgrid.testing import PersonalPool, run_cli, wait_for
from htgrid.testing.nat import Gateway, can_isolate
from htgrid.testing.node import ExecuteNode

from .test_remote_jobs import _history, _script, _submit

if not can_isolate():
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI runs as root: the NAT tests must run")
    pytest.skip("a node behind NAT needs a network namespace (root)", allow_module_level=True)


def _port(address: str) -> int:
    return int(address.strip("<>").rpartition(":")[2])


@pytest.fixture(scope="module")
def natted(pool: PersonalPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecuteNode]:
    with pool.client() as schedd:
        back = str(schedd.health()["ccb_return_address"])
    gateway = Gateway(tmp_path_factory.mktemp("nat"), [_port(pool.collector), _port(back)])
    # PRIVATE_NETWORK_NAME alone: the node registers with the pool's collector.
    node = ExecuteNode(
        pool,
        tmp_path_factory.mktemp("node5"),
        "node5",
        "127.0.0.5",
        config={"PRIVATE_NETWORK_NAME": "cloud"},
        behind=gateway,
    )
    try:
        with node:
            node.joined()
            yield node
    finally:
        gateway.close()


def _ad(node: ExecuteNode) -> ClassAd:
    return next(a for a in node.slots() if a["Name"] == "slot1@node5")


def test_the_schedd_cannot_connect_to_the_node_behind_nat(
    pool: PersonalPool, natted: ExecuteNode
) -> None:
    ad = _ad(natted)
    address = ad["MyAddress"]
    contact = ccb_contact(address)
    assert contact is not None and contact.ccbid == "node5", address
    assert contact.broker == pool.collector
    assert "PrivNet=cloud" in address
    where = host_port_of(address)
    assert where is not None and where[0] == "127.0.0.5"
    # The node listens there, in its own network: from here, nothing answers.
    with pytest.raises(OSError):
        socket.create_connection(where, timeout=5).close()
    security = ensure_pool_security(SecurityConfig.load(pool.home))
    tls = pinned_ssl_context(ad[TLS_CERTIFICATE], (security.server.cert, security.server.key))

    async def direct() -> None:
        async with StartdClient.over_tls(where, tls, timeout=5) as client:
            await client.health()

    with pytest.raises(StartdUnavailable):
        asyncio.run(direct())


def test_a_job_runs_on_a_node_behind_nat_and_its_output_comes_back(
    pool: PersonalPool, natted: ExecuteNode, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    _script(work / "where.sh", 'cat input.txt; echo "$1 behind NAT" > result.txt\n')
    (work / "input.txt").write_text("the input\n")
    cluster = _submit(
        pool,
        work,
        """executable = where.sh
arguments = hello
transfer_input_files = input.txt
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
output = job.out
error = job.err
requirements = Machine == "node5"
request_memory = 16
queue
""",
    )
    ad = wait_for(lambda: _history(pool, cluster), timeout=90, interval=0.2, what="the job")
    assert ad["JobStatus"] == 4 and ad["ExitCode"] == 0
    assert ad["RemoteHost"] == "slot1_1@node5"
    assert "CCBID=" in ad["StartdIpAddr"]
    assert (work / "job.out").read_text() == "the input\n"
    assert (work / "result.txt").read_text() == "hello behind NAT\n"
    # The claim was released, over the node's connection too: its slot is whole again.
    wait_for(
        lambda: [a for a in natted.slots() if a["Name"] == "slot1@node5" and a["Cpus"] == 2],
        what="the node's cpus back",
    )


def _running(pool: PersonalPool, work: Path, name: str) -> tuple[int, Path]:
    started = work / f"{name}.started"
    _script(work / f"{name}.sh", "echo started > started.txt; exec sleep 600\n")
    cluster = _submit(
        pool,
        work,
        f"""executable = {name}.sh
should_transfer_files = YES
when_to_transfer_output = ON_EXIT_OR_EVICT
transfer_output_files = started.txt
transfer_output_remaps = "started.txt={started.name}"
requirements = Machine == "node5"
request_memory = 16
queue
""",
    )

    def running() -> bool:
        with pool.client() as schedd:
            ads = schedd.query(f"ClusterId == {cluster}", ["JobStatus"])
        return bool(ads) and ads[0]["JobStatus"] == 2

    wait_for(running, timeout=90, interval=0.2, what="the job to run on node5")
    return cluster, started


def _node_jobs(node: ExecuteNode) -> list[ClassAd]:
    return [a for a in node.slots() if a["Name"] != "slot1@node5"]


def test_hold_and_rm_of_a_job_running_behind_nat_stop_it_there(
    pool: PersonalPool, natted: ExecuteNode, tmp_path: Path
) -> None:
    held, _ = _running(pool, tmp_path / "held", "held")
    status, _, err = run_cli(pool.home, "hold", str(held))
    assert status == 0, err

    def is_held() -> bool:
        with pool.client() as schedd:
            ads = schedd.query(f"ClusterId == {held}", ["JobStatus"])
        return ads[0]["JobStatus"] == 5

    wait_for(is_held, timeout=60, what="the job held")
    # The node was told (over its own connection): the job is gone, its slot freed.
    wait_for(lambda: not _node_jobs(natted), timeout=60, what="the held job's slot freed")
    removed, _ = _running(pool, tmp_path / "removed", "removed")
    _remove(pool, natted, removed)
    run_cli(pool.home, "rm", str(held))


def _remove(pool: PersonalPool, node: ExecuteNode, cluster: int) -> None:
    """`htgrid rm` the job: it leaves the queue, and its slot on `node` is freed."""
    status, _, err = run_cli(pool.home, "rm", str(cluster))
    assert status == 0, err

    def gone() -> bool:
        with pool.client() as schedd:
            return not schedd.query(f"ClusterId == {cluster}", ["JobStatus"])

    wait_for(gone, timeout=60, what="the removed job to leave the queue")
    wait_for(lambda: not _node_jobs(node), timeout=60, what="the removed job's slot freed")


def test_a_job_removed_as_the_nat_drops_the_nodes_connections_leaves_the_queue(
    pool: PersonalPool, natted: ExecuteNode, tmp_path: Path
) -> None:
    removed, _ = _running(pool, tmp_path / "cut", "cut")
    # The NAT loses its state as the removal comes: the node's registration with the
    # broker and its connections back to the schedd are reset. The request to stop the
    # job goes again, through the registration the node makes anew.
    assert natted.behind is not None and natted.behind.cut() > 0
    _remove(pool, natted, removed)


def _node_token(pool: PersonalPool, tmp_path: Path, name: str) -> str:
    domain = SecurityConfig.load(pool.home).trust_domain
    path = tmp_path / f"{name}.token"
    status, _, err = run_cli(
        pool.home,
        "token",
        "create",
        "-identity",
        f"{name}@{domain}",
        "-authz",
        "ADVERTISE_STARTD",
        "-token",
        str(path),
    )
    assert status == 0, err
    return path.read_text().strip()


def test_the_broker_gives_a_node_its_own_requests_only(pool: PersonalPool, tmp_path: Path) -> None:
    seven, eight = _node_token(pool, tmp_path, "node7"), _node_token(pool, tmp_path, "node8")
    connect_id = "c" * 32

    async def scenario() -> None:
        async with (
            CollectorClient(pool.collector, home=pool.home, token=seven) as as7,
            CollectorClient(pool.collector, home=pool.home, token=eight) as as8,
            CollectorClient(pool.collector, home=pool.home, daemon=True) as schedd,
        ):
            # node8's token cannot register as node7, nor advertise node7's CCBID.
            with pytest.raises(CollectorRefused, match="may register execute node 'node8'"):
                async for _ in as8.ccb_requests("node7", 5):
                    pass
            ad = ClassAd({"MyType": "Machine", "Name": "slot1@node8", "Machine": "node8"})
            ad["MyAddress"] = f"<127.0.0.8:1?CCBID={pool.collector}#node7>"
            with pytest.raises(CollectorRefused, match="its own broker registration"):
                await as8.advertise("UPDATE_STARTD_AD", [ad])
            # Each registered as itself: a request for node7 reaches node7 alone.
            stream7 = aiter(as7.ccb_requests("node7", 5))
            stream8 = aiter(as8.ccb_requests("node8", 5))
            await anext(stream7), await anext(stream8)  # both registered
            await schedd.ccb_request("node7", connect_id, "<127.0.0.1:9>")
            got = await asyncio.wait_for(anext(stream7), 10)
            assert (got.connect_id, got.return_address) == (connect_id, "<127.0.0.1:9>")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(stream8), 2)
            # A node's token may not send requests (the pool's schedds do).
            with pytest.raises(CollectorRefused):
                await as8.ccb_request("node7", connect_id, "<127.0.0.1:9>")

    asyncio.run(scenario())


def test_a_node_makes_a_bounded_number_of_connections_back_at_once(
    pool: PersonalPool, tmp_path: Path
) -> None:
    # A return address whose accept queue is full: the kernel drops further SYNs, so
    # each connection back hangs until its timeout, as towards a black-holed host.
    sink = socket.create_server(("127.0.0.1", 0), backlog=0)
    fillers = [socket.socket() for _ in range(3)]
    for each in fillers:
        each.setblocking(False)
        each.connect_ex(sink.getsockname()[:2])  # the first fills the queue, the rest hang
    back = f"<127.0.0.1:{sink.getsockname()[1]}>"
    node = ExecuteNode(
        pool, tmp_path / "node9", "node9", "127.0.0.9", config={"CCB_ADDRESS": pool.collector}
    )
    try:
        with node:
            node.joined()
            wait_for(
                lambda: "registered with the broker" in node.log(), timeout=30, what="registration"
            )

            async def flood() -> None:
                async with CollectorClient(pool.collector, home=pool.home, daemon=True) as schedd:
                    for n in range(40):
                        await schedd.ccb_request("node9", f"{n:032d}", back)

            asyncio.run(flood())
            wait_for(
                lambda: "32 connections back are being made already" in node.log(),
                timeout=30,
                what="the node refusing the requests past its limit",
            )
            assert node.slots(), "the node still answers"
    finally:
        for each in fillers:
            each.close()
        sink.close()
