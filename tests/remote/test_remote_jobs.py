"""The schedd claims, activates, follows and releases claims on execute nodes of other
hosts, over TLS: a vanilla job runs on a node on 127.0.0.2 and its output comes back;
its claim id travels only between the schedd and the node; the node takes claims from
the schedds of its pool only."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from htgrid.classad import ClassAd
from htgrid.collector import CollectorClient
from htgrid.net.security import SecurityConfig, ensure_pool_security, pinned_ssl_context
from htgrid.pool import MARKER
from htgrid.startd import (
    TLS_CERTIFICATE,
    CallerRefused,
    StartdClient,
    StartdUnavailable,
    host_port_of,
)
from htgrid.testing import QUEUE_ONLY, PersonalPool, run_cli, wait_for
from htgrid.testing.node import ExecuteNode


@pytest.fixture(scope="module")
def node(pool: PersonalPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecuteNode]:
    with ExecuteNode(pool, tmp_path_factory.mktemp("node2"), "node2", "127.0.0.2") as running:
        running.joined()
        yield running


def _submit(pool: PersonalPool, work: Path, text: str) -> int:
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.sub").write_text(text)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        status, out, err = run_cli(pool.home, "submit", "job.sub")
    finally:
        os.chdir(cwd)
    assert status == 0, err
    return int(out.strip().rsplit(" ", 1)[-1].rstrip("."))


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _history(pool: PersonalPool, cluster: int) -> ClassAd | None:
    with pool.client() as schedd:
        ads = schedd.history(f"ClusterId == {cluster}")
    return ads[0] if ads else None


def test_a_job_runs_on_a_node_of_another_host_and_its_output_comes_back(
    pool: PersonalPool, node: ExecuteNode, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    _script(work / "where.sh", 'cat input.txt; pwd; echo "$1 from $(hostname)" > result.txt\n')
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
log = job.log
request_memory = 16
queue
""",
    )
    ad = wait_for(lambda: _history(pool, cluster), timeout=90, interval=0.2, what="the job")
    assert ad["JobStatus"] == 4 and ad["ExitCode"] == 0
    assert ad["RemoteHost"] == ad["LastRemoteHost"] == "slot1_1@node2"
    assert ad["StartdIpAddr"].startswith("<127.0.0.2:")
    lines = (work / "job.out").read_text().splitlines()
    assert lines[0] == "the input"
    # It ran in a sandbox of the node's own execute directory, not in the submit dir.
    assert Path(lines[1]).is_relative_to(node.config.execute_dir), lines
    assert (work / "result.txt").read_text().startswith("hello from ")
    assert (work / "job.err").read_text() == ""
    # The claim was released: the node's slot is whole again, its dynamic slot removed
    # (the collector took the node's every update and removal).
    wait_for(
        lambda: [(a["Name"], a["Cpus"]) for a in node.slots()] == [("slot1@node2", 2)],
        what="the node's cpus back and its dynamic slot gone",
    )
    assert "refuse" not in node.log(), node.log()


def test_the_claim_id_is_in_no_ad(pool: PersonalPool, node: ExecuteNode, tmp_path: Path) -> None:
    work = tmp_path / "claim"
    # The job writes its whole environment down and waits to be let go.
    _script(
        work / "wait.sh",
        "env > env.tmp && mv env.tmp env.txt\nwhile [ ! -e go ]; do sleep 0.1; done\n",
    )
    cluster = _submit(
        pool,
        work,
        "executable = wait.sh\nshould_transfer_files = YES\noutput = job.out\n"
        "request_memory = 16\nqueue\n",
    )
    env = wait_for(
        lambda: next(node.config.execute_dir.glob("dir_*/env.txt"), None),
        timeout=90,
        what="the job running on the node",
    )
    try:
        _claim_id_stays_secret(pool, cluster, env)
    finally:
        (env.parent / "go").touch()  # the module's later tests need the node's memory
    wait_for(lambda: _history(pool, cluster), timeout=60, what="the job to end")


def _claim_id_stays_secret(pool: PersonalPool, cluster: int, env: Path) -> None:
    environment = env.read_text()
    # The claim id is the schedd's secret and the node's: the schedd's record of it, 0600.
    wait_for(lambda: list((pool.config.spool / "claims").glob("*.claim")))
    (record,) = (pool.config.spool / "claims").glob("*.claim")
    assert record.stat().st_mode & 0o777 == 0o600
    claim_id = json.loads(record.read_text())["claim_id"]
    assert len(claim_id) >= 16
    # The job does not see it: not in its environment (its marker names the slot).
    assert claim_id not in environment
    (marker,) = [line for line in environment.splitlines() if line.startswith(f"{MARKER}=")]
    assert marker.endswith("@node2"), marker
    assert claim_id not in (env.parent / ".job.ad").read_text()
    # Nor do the job's ad in the queue (which names the claim by a digest of it)...
    status, out, err = run_cli(pool.home, "q", "-long", f"{cluster}.0")
    assert status == 0 and "PublicClaimId = " in out and claim_id not in out, err

    async def every_ad() -> list[ClassAd]:
        async with CollectorClient(pool.collector, home=pool.home, daemon=True) as collector:
            return await collector.query()

    def claimed_ads() -> list[ClassAd] | None:
        ads = asyncio.run(every_ad())
        dynamic = [ad for ad in ads if ad.get("ParentSlotName") == "slot1@node2"]
        return ads if dynamic and dynamic[0].get("JobId") == f"{cluster}.0" else None

    # ...nor any ad of the collector's. The node advertises its claimed dynamic slot
    # soon after the claim, not in the claim's answer: a loaded machine may be slower
    # at that than the job at starting.
    ads = wait_for(claimed_ads, timeout=60, what="the claimed dynamic slot in the collector")
    assert {ad.get("MyType") for ad in ads} >= {"Machine", "Scheduler", "Negotiator"}
    (dynamic,) = [ad for ad in ads if ad.get("ParentSlotName") == "slot1@node2"]
    assert dynamic["State"] == "Claimed"
    for ad in ads:
        assert claim_id not in str(ad), ad.get("Name")
    status, out, _ = run_cli(pool.home, "status", "-pool", pool.collector, "-long")
    assert status == 0 and dynamic["Name"] in out and claim_id not in out


def _claim(ad: ClassAd, identity: tuple[Path, Path] | None) -> StartdClient:
    where = host_port_of(ad["MyAddress"])
    assert where is not None
    return StartdClient.over_tls(where, pinned_ssl_context(ad[TLS_CERTIFICATE], identity))


_JOB = ClassAd(
    {
        "ClusterId": 999,
        "ProcId": 0,
        "JobUniverse": 5,
        "Owner": "root",
        "RequestCpus": 1,
        "RequestMemory": 16,
        "RequestDisk": 100,
        "Requirements": True,
    }
)


def test_the_node_takes_claims_from_the_schedds_of_its_pool_only(
    pool: PersonalPool, node: ExecuteNode, tmp_path: Path
) -> None:
    (slot,) = [ad for ad in node.joined() if ad["Name"] == "slot1@node2"]
    ours = ensure_pool_security(SecurityConfig.load(pool.home)).server
    other = PersonalPool(tmp_path / "other", daemons=QUEUE_ONLY)
    theirs = ensure_pool_security(SecurityConfig.load(other.home)).server
    user_token = pool.token(f"alice@{SecurityConfig.load(pool.home).trust_domain}")

    async def scenario() -> None:
        # A user of the pool, with a valid token of it but no certificate of its CA.
        async with _claim(slot, None) as user:
            with pytest.raises(CallerRefused, match="only a schedd of this node's pool"):
                await user.request_claim("u" * 32, _JOB, "alice", 60)
        where = host_port_of(slot["MyAddress"])
        assert where is not None
        async with httpx.AsyncClient(verify=pinned_ssl_context(slot[TLS_CERTIFICATE])) as http:
            answer = await http.post(
                f"https://{where[0]}:{where[1]}/v1/claims",
                headers={"Authorization": f"Bearer {user_token}"},
                json={"claim_id": "u" * 32, "lease": 60, "job_ad": {}},
            )
        assert answer.status_code == 403, answer.text
        assert "a token does not do" in answer.json()["detail"]
        # Another pool's schedd: its certificate is of a CA the node does not trust.
        async with _claim(slot, (theirs.cert, theirs.key)) as stranger:
            with pytest.raises(StartdUnavailable):
                await stranger.request_claim("s" * 32, _JOB, "htgrid@other", 60)
        # The pool's own schedd (its certificate): the claim is granted, then released.
        async with _claim(slot, (ours.cert, ours.key)) as schedd:
            grant = await schedd.request_claim("c" * 32, _JOB, "htgrid@pool", 60)
            assert grant.slot.endswith("@node2")
            await schedd.release("c" * 32)

    asyncio.run(scenario())


def test_status_q_run_and_analysis_show_the_remote_nodes(
    pool: PersonalPool, node: ExecuteNode, tmp_path: Path
) -> None:
    work = tmp_path / "views"
    _script(work / "wait.sh", "while [ ! -e go ]; do sleep 0.1; done\n")
    running = _submit(
        pool,
        work,
        "executable = wait.sh\nshould_transfer_files = YES\nrequest_memory = 16\nqueue\n",
    )
    too_big = _submit(
        pool,
        work,
        "executable = wait.sh\nshould_transfer_files = YES\nrequest_memory = 100000\nqueue\n",
    )
    go = (
        wait_for(
            lambda: next(node.config.execute_dir.glob("dir_*/wait.sh"), None),
            timeout=90,
            what="the job running on the node",
        ).parent
        / "go"
    )
    try:
        # condor_q -run: where each running job runs, the node's dynamic slot (once the
        # schedd has the node's answer: the job may run a moment before its start is
        # recorded).
        def run_table() -> tuple[str, list[str], list[list[str]]] | None:
            status, out, err = run_cli(pool.home, "q", "-run")
            assert status == 0, err
            lines = out.splitlines()
            rows = [line.split() for line in lines if line.startswith(f"{running}.0 ")]
            return (out, lines, rows) if rows else None

        out, lines, rows = wait_for(run_table, timeout=30, what="the job's start recorded")
        head = next(line for line in lines if "HOST(S)" in line)
        assert head.split() == ["ID", "OWNER", "SUBMITTED", "RUN_TIME", "HOST(S)"]
        (row,) = rows
        assert row[-1].startswith("slot1_") and row[-1].endswith("@node2"), out
        assert not [line for line in lines if line.startswith(f"{too_big}.0 ")]

        # condor_status: the node's partitionable slot and its claimed dynamic slot (the
        # node publishes the dynamic slot on its next update after the claim, and its
        # job's start a second after that at the latest).
        def status_table() -> dict[str, list[str]] | None:
            status, out, err = run_cli(pool.home, "status", "-pool", pool.collector)
            assert status == 0, err
            lines = [line.split() for line in out.splitlines() if "@node2" in line]
            table = {line[0]: line for line in lines}
            busy = row[-1] in table and table[row[-1]][4] == "Busy"
            return table if busy else None

        table = wait_for(status_table, timeout=60, what="the dynamic slot in the collector")
        assert table["slot1@node2"][1:5] == ["LINUX", "X86_64", "Unclaimed", "Idle"]
        assert table[row[-1]][3:5] == ["Claimed", "Busy"]
        # A job no node can take: the analysis names the clause, against the node's slots.
        status, out, err = run_cli(pool.home, "q", "-better-analyze", f"{too_big}.0")
        assert status == 0, err
        assert f"Job {too_big}.0 (owner" in out and "is idle" in out
        assert "0  TARGET.Memory >= RequestMemory" in out
        assert "No machines matched the job's constraints" in out
        assert "Relax [5] TARGET.Memory >= RequestMemory: with modify to 2032" in out
    finally:
        go.touch()
        run_cli(pool.home, "rm", str(too_big))
    wait_for(lambda: _history(pool, running), timeout=60, what="the job to end")
