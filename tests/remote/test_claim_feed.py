"""The ends of the jobs a schedd runs on a node of another host come over one long poll
a node (`POST /v1/watch`), not a poll per claim: what the node's health shows."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from htgrid.net.security import SecurityConfig, ensure_pool_security, pinned_ssl_context
from htgrid.startd import TLS_CERTIFICATE, StartdClient, host_port_of
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.node import ExecuteNode

from .test_remote_jobs import _script, _submit

JOBS = 4


def _health(pool: PersonalPool, node: ExecuteNode) -> dict[str, Any]:
    """The node's health, asked as the pool's schedd asks it (its certificate)."""
    ad = next(a for a in node.slots() if a.get("PartitionableSlot"))
    where = host_port_of(ad["MyAddress"])
    assert where is not None
    security = ensure_pool_security(SecurityConfig.load(pool.home))
    tls = pinned_ssl_context(ad[TLS_CERTIFICATE], (security.server.cert, security.server.key))

    async def ask() -> dict[str, Any]:
        async with StartdClient.over_tls(where, tls, timeout=10) as client:
            return await client.health()

    return asyncio.run(ask())


def test_the_ends_of_jobs_running_at_once_on_a_node_come_over_one_poll(
    pool: PersonalPool, tmp_path: Path
) -> None:
    with ExecuteNode(
        pool, tmp_path / "node6", "node6", "127.0.0.6", config={"NUM_CPUS": JOBS}
    ) as node:
        node.joined()
        work = tmp_path / "work"
        go = work / "go"
        _script(work / "wait.sh", f"while [ ! -e {go} ]; do sleep 0.05; done\necho done $1\n")
        cluster = _submit(
            pool,
            work,
            "executable = wait.sh\narguments = $(Process)\nshould_transfer_files = YES\n"
            f"transfer_executable = true\noutput = out.$(Process)\nrequest_memory = 16\n"
            f"queue {JOBS}\n",
        )

        def running() -> bool:
            with pool.client() as schedd:
                ads = schedd.query(f"ClusterId == {cluster} && JobStatus == 2", ["ProcId"])
            return len(ads) == JOBS

        wait_for(running, timeout=90, what=f"{JOBS} jobs running on the node at once")
        wait_for(
            lambda: _health(pool, node)["polls"]["open"] == 1,
            timeout=30,
            what="the schedd's poll waiting on the node",
        )
        go.touch()
        for proc in range(JOBS):
            wait_for(
                lambda p=proc: _done(pool, cluster, p),
                timeout=90,
                what=f"job {cluster}.{proc} to end",
            )
            assert (work / f"out.{proc}").read_text() == f"done {proc}\n"
        polls = _health(pool, node)["polls"]
    # One poll of the schedd's waited on the node for all its jobs at once, and their
    # ends came over it: no claim was polled on its own.
    assert polls["peak"] == 1, polls
    assert polls["claim"] == 0, polls
    assert 1 <= polls["watch"] <= JOBS, polls


def _done(pool: PersonalPool, cluster: int, proc: int) -> bool:
    with pool.client() as schedd:
        return bool(schedd.history(f"ClusterId == {cluster} && ProcId == {proc}"))
