"""An execute node in the test's event loop, driven through its API as the schedd does."""

from __future__ import annotations

import asyncio
import io
import os
import re
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.adjson import ads_to_json
from htgrid.collector import CollectorClient
from htgrid.queue import HoldReasonCode
from htgrid.startd import (
    ClaimNotFound,
    ClaimRefused,
    ClaimState,
    ClaimStateError,
    OutcomeKind,
    StartdClient,
    StartdProtocolError,
    StartdUnavailable,
)
from htgrid.startd._daemon import ExitReason, Startd
from htgrid.startd._transfer import input_entries, pack, unpack_output
from htgrid.startd._wire import AdChanges, ClaimStatus

from .conftest import OWNER, claim_id, job_ad, run_job, run_startd, script, until


async def _machines(pool: str) -> dict[str, ClassAd]:
    async with CollectorClient(pool) as client:
        return {str(ad["Name"]): ad for ad in await client.query("Machine")}


async def _eventually(probe, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s")
        await asyncio.sleep(0.05)


def test_a_job_runs_in_a_sandbox_with_its_files_and_is_advertised(
    tmp_path: Path, collector: str
) -> None:
    iwd = tmp_path / "iwd"
    script(
        iwd,
        'cat in.txt > out.txt; echo "args $1 $2"; echo "$GREETING $_CONDOR_SLOT" >&2\n'
        'echo "$OMP_NUM_THREADS $CUDA_VISIBLE_DEVICES" > env.txt; pwd > where.txt\n'
        # Until the test has seen the slot Busy at the collector (a claim's activity goes
        # a second after the last update at most; a loaded host takes longer).
        f"sleep 0.5; while [ ! -e {iwd / 'go'} ]; do sleep 0.05; done; exit 3\n",
    )
    (iwd / "in.txt").write_text("input\n")
    job = job_ad(
        iwd,
        Arguments="one 'two words'",
        Environment="GREETING=hi",
        TransferInput="in.txt",
        RequestCpus=2,
        RequestGPUs=1,
    )

    async def scenario(client: StartdClient, startd: Startd) -> None:
        cid = claim_id()
        grant = await client.request_claim(cid, job, "schedd@test", 60)
        assert grant.slot == "slot1_1@node.test"
        ads = await _eventually(lambda: _machines_with(collector, grant.slot))
        assert ads[grant.slot]["State"] == "Claimed" and ads[grant.slot]["Activity"] == "Idle"
        assert ads[grant.slot]["RemoteOwner"] == OWNER
        assert ads["slot1@node.test"]["Cpus"] == 2
        assert ads["slot1@node.test"]["PartitionableSlot"] is True
        status = await client.activate(cid, job)
        assert status.state is ClaimState.STARTING and status.transfer_input
        tar = tmp_path / "in.tar"
        pack(input_entries(job), tar, dereference=True)
        status = await client.send_input(cid, tar)
        status = await until(client, cid, ClaimState.RUNNING, status)
        busy = await _eventually(lambda: _activity(collector, grant.slot, "Busy"))
        assert busy["AssignedGPUs"] == "GPU-aaaa1111"
        (iwd / "go").touch()
        status = await until(client, cid, ClaimState.ENDED, status)
        outcome = status.outcome
        assert outcome is not None and outcome.kind is OutcomeKind.EXITED
        assert (outcome.exit_code, outcome.signal, outcome.output) == (3, None, True)
        assert outcome.wall >= 0.5
        with pytest.raises(ClaimStateError):
            await client.activate(cid, job)  # once only
        out = tmp_path / "out.tar"
        await client.fetch_output(cid, out)
        unpack_output(out, job)
        await client.release(cid)
        with pytest.raises(ClaimNotFound):
            await client.status(cid)
        gone = await _eventually(lambda: _without(collector, grant.slot))
        assert gone["slot1@node.test"]["Cpus"] == 4

    run_startd(tmp_path / "home", scenario, pool=collector)
    assert (iwd / "out.txt").read_text() == "input\n"
    assert (iwd / "job.out").read_text() == "args one two words\n"
    assert (iwd / "job.err").read_text() == "hi slot1_1\n"
    assert (iwd / "env.txt").read_text() == "2 GPU-aaaa1111\n"
    sandbox = Path((iwd / "where.txt").read_text().strip())
    assert sandbox.parent == tmp_path / "home" / "execute"
    assert not sandbox.exists()  # removed with the claim
    assert os.listdir(tmp_path / "home" / "execute") == []


async def _machines_with(pool: str, name: str) -> dict[str, ClassAd] | None:
    ads = await _machines(pool)
    return ads if name in ads else None


async def _without(pool: str, name: str) -> dict[str, ClassAd] | None:
    ads = await _machines(pool)
    return ads if name not in ads and ads["slot1@node.test"]["Cpus"] == 4 else None


async def _activity(pool: str, name: str, activity: str) -> ClassAd | None:
    ad = (await _machines(pool)).get(name)
    return ad if ad is not None and ad.get("Activity") == activity else None


def test_claims_the_node_cannot_or_will_not_give_are_refused(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, "exit 0\n")

    async def scenario(client: StartdClient, startd: Startd) -> None:
        with pytest.raises(ClaimRefused, match="4 cpus"):
            await client.request_claim(claim_id(), job_ad(iwd, RequestCpus=5), "s", 60)
        with pytest.raises(ClaimRefused, match="START is not true"):
            await client.request_claim(claim_id(), job_ad(iwd, Owner="bob"), "s", 60)
        with pytest.raises(ClaimRefused, match="vanilla jobs only, not universe 9"):
            await client.request_claim(claim_id(), job_ad(iwd, JobUniverse=9), "s", 60)
        with pytest.raises(ClaimRefused, match="Requirements do not match"):
            picky = job_ad(iwd, Requirements=ExprTree("TARGET.HasDocker =?= true"))
            await client.request_claim(claim_id(), picky, "s", 60)
        with pytest.raises(StartdProtocolError, match="16 characters"):
            await client.request_claim("short", job_ad(iwd), "s", 60)
        with pytest.raises(ClaimNotFound):
            await client.activate(claim_id(), job_ad(iwd))
        cid = claim_id()
        await client.request_claim(cid, job_ad(iwd), "s", 60)
        with pytest.raises(ClaimStateError, match=r"made for job 1\.0"):
            await client.activate(cid, job_ad(iwd, ProcId=7))
        with pytest.raises(ClaimStateError, match="no output"):
            await client.fetch_output(cid, tmp_path / "x.tar")
        health = await client.health()
        assert (health["claims"], health["state"]) == (1, "Unclaimed")

    run_startd(tmp_path / "home", scenario, conf=f'START = TARGET.Owner == "{OWNER}"\n')


def test_a_job_that_cannot_start_ends_failed_with_a_hold_code(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    iwd.mkdir()

    async def scenario(client: StartdClient, startd: Startd) -> None:
        job = job_ad(iwd, cmd="/no/such/program", TransferExecutable=False)
        _, status = await run_job(client, job)
        assert status.outcome is not None and status.outcome.kind is OutcomeKind.FAILED
        assert status.outcome.hold_code == HoldReasonCode.FailedToCreateProcess
        assert "/no/such/program" in status.outcome.reason

    run_startd(tmp_path / "home", scenario)


def test_without_transfer_the_job_runs_in_its_iwd(tmp_path: Path) -> None:
    iwd = tmp_path / "shared"
    script(iwd, 'pwd; echo "scratch $_CONDOR_SCRATCH_DIR" >&2\n')

    async def scenario(client: StartdClient, startd: Startd) -> None:
        for should, extra in (("NO", {}), ("IF_NEEDED", {"FileSystemDomain": "localhost"})):
            job = job_ad(
                iwd, ShouldTransferFiles=should, Out=f"{should}.out", Err=f"{should}.err", **extra
            )
            cid, status = await run_job(client, job)
            assert not (status.outcome and status.outcome.output)
            await client.release(cid)

    run_startd(tmp_path / "home", scenario)
    for should in ("NO", "IF_NEEDED"):
        assert (iwd / f"{should}.out").read_text() == f"{iwd}\n"
        assert (
            "scratch " + str(tmp_path / "home" / "execute") in (iwd / f"{should}.err").read_text()
        )


def test_vacating_stops_the_job_and_keeps_its_output_if_asked(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    script(
        iwd,
        'trap "echo caught; echo partial > state.txt; exit 0" USR1\n'
        "echo started; while :; do sleep 0.05; done\n",
    )
    job = job_ad(iwd, WhenToTransferOutput="ON_EXIT_OR_EVICT", HoldKillSig="SIGUSR1")

    async def scenario(client: StartdClient, startd: Startd) -> None:
        cid = claim_id()
        await client.request_claim(cid, job, "s", 60)
        status = await client.activate(cid, job)
        pack(input_entries(job), tmp_path / "in.tar", dereference=True)
        status = await client.send_input(cid, tmp_path / "in.tar")
        status = await until(client, cid, ClaimState.RUNNING, status)
        await asyncio.sleep(0.3)
        status = await client.vacate(cid, "hold")
        status = await until(client, cid, ClaimState.ENDED, status)
        assert status.outcome is not None and status.outcome.kind is OutcomeKind.EVICTED
        assert status.outcome.output
        await client.fetch_output(cid, tmp_path / "out.tar")
        unpack_output(tmp_path / "out.tar", job)
        await client.release(cid)

    run_startd(tmp_path / "home", scenario)
    assert (iwd / "job.out").read_text() == "started\ncaught\n"
    assert (iwd / "state.txt").read_text() == "partial\n"


def test_a_node_shutting_down_evicts_its_jobs_and_says_why(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, "while :; do sleep 0.05; done\n")
    job = job_ad(iwd)

    async def scenario(client: StartdClient, startd: Startd) -> None:
        cid = claim_id()
        await client.request_claim(cid, job, "s", 60)
        status = await client.activate(cid, job)
        pack(input_entries(job), tmp_path / "in.tar", dereference=True)
        status = await client.send_input(cid, tmp_path / "in.tar")
        status = await until(client, cid, ClaimState.RUNNING, status)
        startd.request_stop()
        status = await until(client, cid, ClaimState.ENDED, status)
        outcome = status.outcome
        assert outcome is not None and outcome.kind is OutcomeKind.EVICTED
        # The schedd's VacateReason and VacateReasonCode (StartdShutdown) for the job.
        assert (outcome.reason, outcome.hold_code) == ("The execute node is shutting down", 1013)
        await client.release(cid)

    run_startd(tmp_path / "home", scenario)


def test_a_claim_whose_schedd_falls_silent_is_given_up(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, "exec sleep 60\n")

    async def scenario(client: StartdClient, startd: Startd) -> None:
        idle = claim_id()
        await client.request_claim(idle, job_ad(iwd), "s", 0.5)
        running = claim_id()
        job = job_ad(iwd, ProcId=1, ShouldTransferFiles="NO")
        await client.request_claim(running, job, "s", 1.5)
        status = await client.activate(running, job)
        await until(client, running, ClaimState.RUNNING, status)
        started = time.monotonic()
        # Silence: no request names either claim until both are gone.
        await _eventually(lambda: _no_claims(startd), timeout=10)
        assert time.monotonic() - started >= 1.5
        with pytest.raises(ClaimNotFound):
            await client.status(running)

    run_startd(tmp_path / "home", scenario)


async def _no_claims(startd: Startd) -> bool:
    return not startd.slots.claims


def test_an_unclaimed_node_shuts_down_after_noclaim_shutdown(tmp_path: Path) -> None:
    async def scenario(client: StartdClient, startd: Startd) -> None:
        await asyncio.wait_for(startd._stop.wait(), 10)

    started = time.monotonic()
    reason = run_startd(tmp_path / "home", scenario, conf="STARTD_NOCLAIM_SHUTDOWN = 1\n")
    assert reason is ExitReason.IDLE
    assert 1.0 <= time.monotonic() - started < 8


def test_only_the_nodes_user_may_call_it(tmp_path: Path) -> None:
    from starlette.requests import Request

    from htgrid.net._peer import PEER_KEY, PeerCredentials
    from htgrid.startd import CallerRefused
    from htgrid.startd._api import _local_caller

    def request(uid: int) -> Request:
        return Request({"type": "http", "state": {PEER_KEY: PeerCredentials(1, uid, uid)}})

    _local_caller(request(os.getuid()))
    with pytest.raises(CallerRefused):
        _local_caller(request(os.getuid() + 4242))
    with pytest.raises(CallerRefused):
        _local_caller(Request({"type": "http", "state": {}}))

    async def scenario(client: StartdClient, startd: Startd) -> None:
        sock = startd.config.socket
        assert sock.stat().st_mode & 0o777 == 0o600
        if os.getuid() == 0:  # a socket someone else made is not trusted with job ads
            os.chown(sock, 4242, 4242)
            with pytest.raises(Exception, match="belongs to uid 4242"):
                await client.health()
            os.chown(sock, 0, 0)

    run_startd(tmp_path / "home", scenario)


def test_a_claim_is_reused_for_another_job_that_fits_it(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, 'echo "run $1"\n')

    async def scenario(client: StartdClient, startd: Startd) -> None:
        first = job_ad(iwd, Arguments="first", RequestCpus=2, Out="first.out")
        cid = claim_id()
        grant = await client.request_claim(cid, first, "s", 60)
        assert (grant.resources.cpus, grant.resources.memory) == (2, 100)
        with pytest.raises(ClaimStateError, match="its job is not over"):
            await client.reuse(cid)
        status = await client.activate(cid, first)
        pack(input_entries(first), tmp_path / "in.tar", dereference=True)
        status = await client.send_input(cid, tmp_path / "in.tar")
        await until(client, cid, ClaimState.ENDED, status)
        status = await client.reuse(cid)
        assert status.state is ClaimState.CLAIMED and status.outcome is None
        with pytest.raises(ClaimRefused, match="does not fit"):
            await client.activate(cid, job_ad(iwd, ProcId=1, RequestCpus=3))
        second = job_ad(iwd, ProcId=2, Arguments="second", Out="second.out")
        status = await client.activate(cid, second)  # another job, on the same claim
        pack(input_entries(second), tmp_path / "in.tar", dereference=True)
        status = await until(
            client, cid, ClaimState.ENDED, await client.send_input(cid, tmp_path / "in.tar")
        )
        assert status.outcome is not None and status.outcome.exit_code == 0
        await client.fetch_output(cid, tmp_path / "out.tar")
        unpack_output(tmp_path / "out.tar", second)
        assert len(startd.slots.claims) == 1

    run_startd(tmp_path / "home", scenario)
    assert (iwd / "second.out").read_text() == "run second\n"


def test_an_activation_after_the_last_job_reuses_its_ended_claim_in_one_request(
    tmp_path: Path,
) -> None:
    """The schedd's next job on a claim goes with the reuse (`after`, the job whose end
    it recorded); the status names the job the claim ran, so that a schedd restarted
    between the two never takes the last job's end for the next one's."""
    iwd = tmp_path / "iwd"
    script(iwd, 'echo "run $1"\n')

    async def scenario(client: StartdClient, startd: Startd) -> None:
        first = job_ad(iwd, Arguments="first", Out="first.out")
        cid = claim_id()
        await client.request_claim(cid, first, "s", 60)
        status = await client.activate(cid, first)
        assert status.job == "1.0"
        pack(input_entries(first), tmp_path / "in.tar", dereference=True)
        status = await until(
            client, cid, ClaimState.ENDED, await client.send_input(cid, tmp_path / "in.tar")
        )
        assert status.job == "1.0" and status.outcome is not None
        second = job_ad(iwd, ProcId=2, Arguments="second", Out="second.out")
        with pytest.raises(ClaimStateError, match=r"ran job 1\.0, not 1\.1"):
            await client.activate(cid, second, after="1.1")
        assert (await client.status(cid)).state is ClaimState.ENDED  # left as it was
        with pytest.raises(ClaimStateError, match="already activated"):
            await client.activate(cid, second)  # an ended claim is reused only by name
        status = await client.activate(cid, second, after="1.0")
        assert status.state is ClaimState.STARTING and status.job == "1.2"
        pack(input_entries(second), tmp_path / "in.tar", dereference=True)
        status = await until(
            client, cid, ClaimState.ENDED, await client.send_input(cid, tmp_path / "in.tar")
        )
        assert status.job == "1.2" and status.outcome is not None
        assert status.outcome.exit_code == 0
        await client.fetch_output(cid, tmp_path / "out.tar")
        unpack_output(tmp_path / "out.tar", second)
        assert len(startd.slots.claims) == 1

    run_startd(tmp_path / "home", scenario)
    assert (iwd / "second.out").read_text() == "run second\n"


def test_a_reused_claims_next_job_ad_goes_as_its_changes_and_runs_whole(
    tmp_path: Path,
) -> None:
    """The next job on a reused claim is sent as what changed since the last job: its
    ad's attributes set and gone, and no input when it is the same tar again; the node
    runs it with its whole ad and its input, as if both were sent in full."""
    iwd = tmp_path / "iwd"
    script(iwd, 'grep -i -e "^Arguments" -e "^Gone" -e "^Kept" "$_CONDOR_JOB_AD"\n')
    sent: list[tuple[str, bool]] = []

    async def scenario(client: StartdClient, startd: Startd) -> None:
        activate = startd.activate

        async def spy(claim: str, ad: ClassAd | AdChanges, *args: Any, **kw: Any) -> ClaimStatus:
            sent.append((type(ad).__name__, kw.get("input_again", False)))
            return await activate(claim, ad, *args, **kw)

        startd.activate = spy  # type: ignore[method-assign]
        ads = [
            job_ad(iwd, Arguments="first", Out="first.out", Gone="yes", Kept="same"),
            job_ad(iwd, ProcId=1, Arguments="second", Out="second.out", Kept="same"),
        ]
        cid = claim_id()
        await client.request_claim(cid, ads[0], "s", 60)
        after = None
        for ad in ads:
            data = io.BytesIO()
            pack(input_entries(ad), data, dereference=True)
            status = await client.activate(cid, ad, data.getvalue(), after=after)
            status = await until(client, cid, ClaimState.ENDED, status)
            assert status.outcome is not None and status.outcome.exit_code == 0
            assert status.output_data is not None
            unpack_output(io.BytesIO(status.output_data), ad)
            after = status.job

    run_startd(tmp_path / "home", scenario)
    assert sent == [("ClassAd", False), ("AdChanges", True)]
    first = (iwd / "first.out").read_text().splitlines()
    second = (iwd / "second.out").read_text().splitlines()
    assert sorted(first) == ['Arguments = "first"', 'Gone = "yes"', 'Kept = "same"']
    assert sorted(second) == ['Arguments = "second"', 'Kept = "same"']


def test_a_renewed_proxy_replaces_the_jobs_copy_also_before_its_input_arrives(
    tmp_path: Path,
) -> None:
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    (iwd / "x509up").write_bytes(b"the submitted proxy")
    copied = iwd / "copied"  # the job has its first proxy: the test renews it only then
    script(
        iwd,
        f'cp "$X509_USER_PROXY" first.pem && touch {copied}\n'
        "n=0\n"
        'while cmp -s "$X509_USER_PROXY" first.pem && [ $n -lt 300 ]; do sleep 0.05; '
        "n=$((n + 1)); done\n"
        'cp "$X509_USER_PROXY" second.pem\n',
    )
    job = job_ad(iwd, x509userproxy="x509up")

    async def scenario(client: StartdClient, startd: Startd) -> None:
        idle = claim_id()
        await client.request_claim(idle, job, "s", 60)
        with pytest.raises(ClaimStateError, match="runs no job"):
            await client.put_proxy(idle, b"renewed")
        await client.release(idle)

        cid = claim_id()
        await client.request_claim(cid, job, "s", 60)
        status = await client.activate(cid, job)
        with pytest.raises(StartdProtocolError, match="not empty"):
            await client.put_proxy(cid, b"")
        # Renewed while the input (with the submitted proxy in it) is on its way.
        await client.put_proxy(cid, b"renewed once")
        pack(input_entries(job), tmp_path / "in.tar", dereference=True)
        status = await client.send_input(cid, tmp_path / "in.tar")
        status = await until(client, cid, ClaimState.RUNNING, status)
        for _ in range(600):
            if copied.exists():
                break
            await asyncio.sleep(0.05)
        await client.put_proxy(cid, b"renewed twice")
        status = await until(client, cid, ClaimState.ENDED, status)
        await client.fetch_output(cid, tmp_path / "out.tar")
        unpack_output(tmp_path / "out.tar", job)
        await client.release(cid)

    run_startd(tmp_path / "home", scenario)
    assert (iwd / "first.pem").read_bytes() == b"renewed once"
    assert (iwd / "second.pem").read_bytes() == b"renewed twice"
    assert (iwd / "x509up").read_bytes() == b"the submitted proxy"


def test_an_input_sandbox_not_in_base64_is_refused(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, "true\n")
    job = job_ad(iwd)

    async def scenario(client: StartdClient, startd: Startd) -> None:
        cid = claim_id()
        await client.request_claim(cid, job, "s", 60)
        reader, writer = await asyncio.open_unix_connection(str(startd.config.socket))
        try:
            for data in ('"QQ="', '"QQ==QQ=="', '"Q Q=="', "42"):
                body = f'{{"job_ad": {ads_to_json([job])[1:-1]}, "input_data": {data}}}'.encode()
                writer.write(
                    f"POST /v1/claims/{cid}/activate HTTP/1.1\r\nhost: startd\r\n"
                    f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
                assert length is not None, head
                answer = await reader.readexactly(int(length.group(1)))
                assert head.startswith(b"HTTP/1.1 400"), (data, head)
                assert b"must be a tar in base64" in answer
        finally:
            writer.close()
        assert (await client.status(cid)).state is ClaimState.CLAIMED  # nothing started

    run_startd(tmp_path / "home", scenario)


def test_an_idle_connection_outlives_the_clients_keep_alive(tmp_path: Path) -> None:
    """httpx lets an idle connection go after 5 s: the node must not close it first (at
    5 s each, a request sent as the node closed the connection failed, "Server
    disconnected without sending a response", and the node was taken for lost)."""

    async def scenario(client: StartdClient, startd: Startd) -> None:
        async def listening() -> dict[str, object] | None:
            try:
                return await client.health()
            except StartdUnavailable:
                return None

        await _eventually(listening)
        reader, writer = await asyncio.open_unix_connection(str(startd.config.socket))

        async def health() -> bytes:
            writer.write(b"GET /v1/health HTTP/1.1\r\nhost: startd\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
            assert length is not None, head
            await reader.readexactly(int(length.group(1)))
            return head

        try:
            assert (await health()).startswith(b"HTTP/1.1 200")
            await asyncio.sleep(6)  # idle, longer than a client keeps the connection
            assert (await health()).startswith(b"HTTP/1.1 200")
        finally:
            writer.close()

    run_startd(tmp_path / "home", scenario)


@pytest.mark.parametrize(("size", "inline"), [(1000, True), (200_000, False)])
def test_a_small_output_sandbox_comes_with_the_jobs_end(
    tmp_path: Path, size: int, inline: bool
) -> None:
    """The tar in the ended claim's status, a large one only at its own request (the
    same bytes either way); either is gone with the claim."""
    iwd = tmp_path / "iwd"
    script(iwd, f"head -c {size} /dev/urandom > out.bin\n")
    job = job_ad(iwd)

    async def scenario(client: StartdClient, startd: Startd) -> None:
        cid, status = await run_job(client, job)
        assert status.outcome is not None and status.outcome.output
        out = tmp_path / "out.tar"
        await client.fetch_output(cid, out)
        if inline:
            assert status.output_data == out.read_bytes()
        else:
            assert status.output_data is None and out.stat().st_size > size
        # A small one is held in memory, never written beside the sandbox.
        tars = list(startd.config.execute_dir.glob("*.output.tar"))
        assert len(tars) == (0 if inline else 1)
        await client.release(cid)
        assert list(startd.config.execute_dir.iterdir()) == []

    run_startd(tmp_path / "home", scenario)


def test_a_small_input_sandbox_comes_with_the_activation(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, "cat in.txt > out.txt\n")
    (iwd / "in.txt").write_text("input\n")
    job = job_ad(iwd, TransferInput="in.txt")

    async def scenario(client: StartdClient, startd: Startd) -> None:
        cid = claim_id()
        await client.request_claim(cid, job, "schedd@test", 60)
        tar = io.BytesIO()
        pack(input_entries(job), tar, dereference=True)
        status = await client.activate(cid, job, tar.getvalue())
        assert not status.transfer_input  # taken: nothing more to send
        again = tmp_path / "again.tar"
        again.write_bytes(tar.getvalue())
        with pytest.raises(ClaimStateError):
            await client.send_input(cid, again)
        status = await until(client, cid, ClaimState.ENDED, status)
        assert status.outcome is not None and status.outcome.kind is OutcomeKind.EXITED
        assert status.outcome.exit_code == 0 and status.output_data is not None
        unpack_output(io.BytesIO(status.output_data), job)
        await client.release(cid)

    run_startd(tmp_path / "home", scenario)
    assert (iwd / "out.txt").read_text() == "input\n"


def test_a_flat_input_lands_with_safe_modes_and_its_times_and_a_null_stream_makes_no_file(
    tmp_path: Path,
) -> None:
    """A sandbox of plain files, come with the activation, is written file by file: the
    modes tarfile's data filter gives (no set-id bits, nor write for others; the owner
    reads and writes, and executes only if it could), the files' times kept, so an
    input the job did not touch does not come back and one it changed does. Err unset
    (/dev/null) goes to /dev/null, as HTCondor's starter sends it: no _condor_stderr."""
    iwd = tmp_path / "iwd"
    script(
        iwd,
        "ls -a > listing.txt\nstat -c '%n %a %Y' tool data.txt > modes.txt\n"
        "echo more >> notes.txt\necho out; echo err >&2\n",
    )
    for name, mode in (("tool", 0o4775), ("data.txt", 0o077), ("notes.txt", 0o444)):
        (iwd / name).write_text(f"{name}\n")
        (iwd / name).chmod(mode)
        os.utime(iwd / name, (978307200, 978307200))  # 2001-01-01
    job = job_ad(iwd, TransferInput="tool, data.txt, notes.txt", Err="/dev/null")

    async def scenario(client: StartdClient, startd: Startd) -> None:
        cid = claim_id()
        await client.request_claim(cid, job, "schedd@test", 60)
        tar = io.BytesIO()
        pack(input_entries(job), tar, dereference=True)
        for name in ("tool", "data.txt", "notes.txt"):  # the output comes back over them
            (iwd / name).chmod(0o644)
        status = await until(
            client, cid, ClaimState.ENDED, await client.activate(cid, job, tar.getvalue())
        )
        assert status.outcome is not None and status.outcome.exit_code == 0
        assert status.output_data is not None
        with tarfile.open(fileobj=io.BytesIO(status.output_data)) as out:
            names = sorted(out.getnames())
        assert names == ["_condor_stdout", "listing.txt", "modes.txt", "notes.txt"]
        unpack_output(io.BytesIO(status.output_data), job)
        await client.release(cid)

    run_startd(tmp_path / "home", scenario)
    listing = (iwd / "listing.txt").read_text().split()
    assert "_condor_stdout" in listing and "_condor_stderr" not in listing
    assert (iwd / "modes.txt").read_text() == "tool 755 978307200\ndata.txt 644 978307200\n"
    assert (iwd / "notes.txt").read_text() == "notes.txt\nmore\n"
    assert (iwd / "job.out").read_text() == "out\n"


def test_an_activation_with_its_input_starts_the_job_and_clears_the_last_ones_files(
    tmp_path: Path,
) -> None:
    """A small input sandbox with the activation: the job is started before the answer
    (one request, one call off the node's loop). Reusing the claim (`after`) removes the
    last job's files first, also when the next job is refused."""
    iwd = tmp_path / "iwd"
    script(iwd, 'test ! -e left || exit 3\ntouch left\necho "run $1"\n')

    def tar(job: ClassAd) -> bytes:
        out = io.BytesIO()
        pack(input_entries(job), out, dereference=True)
        return out.getvalue()

    async def scenario(client: StartdClient, startd: Startd) -> None:
        execute = startd.config.execute_dir
        first = job_ad(iwd, Arguments="first")
        cid = claim_id()
        await client.request_claim(cid, first, "s", 60)
        status = await client.activate(cid, first, tar(first))
        assert status.state is ClaimState.RUNNING and not status.transfer_input
        status = await until(client, cid, ClaimState.ENDED, status)
        assert status.outcome is not None and status.outcome.exit_code == 0
        assert [p.name for p in execute.glob("dir_*/left")] == ["left"]
        big = job_ad(iwd, ProcId=1, RequestCpus=3)
        with pytest.raises(ClaimRefused, match="does not fit"):
            await client.activate(cid, big, tar(big), after="1.0")
        assert list(execute.iterdir()) == []  # the last job's sandbox went even so
        second = job_ad(iwd, ProcId=2, Arguments="second", Out="second.out")
        status = await until(
            client, cid, ClaimState.ENDED, await client.activate(cid, second, tar(second))
        )
        third = job_ad(iwd, ProcId=3, Arguments="third", Out="third.out")
        status = await client.activate(cid, third, tar(third), after="1.2")
        assert status.state is ClaimState.RUNNING and status.job == "1.3"
        status = await until(client, cid, ClaimState.ENDED, status)
        assert status.outcome is not None and status.outcome.exit_code == 0  # a fresh sandbox
        assert status.output_data is not None
        unpack_output(io.BytesIO(status.output_data), third)
        nobody = job_ad(iwd, ProcId=4, Owner="no-such-user-htgrid")  # held: no account
        status = await client.activate(cid, nobody, tar(nobody), after="1.3")
        assert status.state is ClaimState.ENDED and status.outcome is not None
        assert status.outcome.hold_code == HoldReasonCode.FailedToAccessUserAccount
        assert list(execute.iterdir()) == []  # the last job's sandbox went even so
        await client.release(cid)

    run_startd(tmp_path / "home", scenario)
    assert (iwd / "third.out").read_text() == "run third\n"


def test_a_small_input_sandbox_comes_as_a_tar_after_the_json_or_in_base64(
    tmp_path: Path,
) -> None:
    """A node says in its grants that it takes the input's tar after the activation's
    JSON (ACTIVATION_TAR): its client sends it so, no base64 to make or undo. A client
    that has no grant of it (a schedd restarted since) sends base64, which the node
    still takes; a body that is not what its type says is refused."""
    iwd = tmp_path / "iwd"
    script(iwd, 'cat in.txt > "out.$1"\n')
    (iwd / "in.txt").write_text("input\n")

    def job(proc: int) -> ClassAd:
        return job_ad(iwd, ProcId=proc, TransferInput="in.txt", Arguments=str(proc))

    def tar(ad: ClassAd) -> bytes:
        out = io.BytesIO()
        pack(input_entries(ad), out, dereference=True)
        return out.getvalue()

    async def scenario(client: StartdClient, startd: Startd) -> None:
        first, cid = job(0), claim_id()
        grant = await client.request_claim(cid, first, "s", 60)
        assert grant.tar_activation
        sent: list[str] = []
        request = client._request

        async def spy(method: str, path: str, body: object = None, **kw: Any) -> bytes:
            sent.append(kw.get("content_type", "application/json"))
            return await request(method, path, body, **kw)

        client._request = spy  # type: ignore[method-assign]
        status = await until(
            client, cid, ClaimState.ENDED, await client.activate(cid, first, tar(first))
        )
        assert sent[0].startswith("application/x-htgrid-activation; json=")
        assert status.outcome is not None and status.outcome.exit_code == 0
        assert status.output_data is not None
        unpack_output(io.BytesIO(status.output_data), first)
        async with StartdClient(startd.config.socket) as fresh:  # no grant seen: base64
            second = job(1)
            status = await fresh.activate(cid, second, tar(second), after="1.0")
            status = await until(fresh, cid, ClaimState.ENDED, status)
        assert status.outcome is not None and status.outcome.exit_code == 0
        assert status.output_data is not None
        unpack_output(io.BytesIO(status.output_data), second)
        third = job(2)
        head = f'{{"after": "1.1", "job_ad": {ads_to_json([third])[1:-1]}}}'.encode()
        path = f"/v1/claims/{cid}/activate"
        for kind, body, said in (
            ("application/x-htgrid-activation", head, "json=N"),
            (f"application/x-htgrid-activation; json={len(head) + 1}", head, "holds no JSON"),
            (f"application/x-htgrid-activation; json={len(head) - 1}", head, "not JSON"),
            ("application/x-htgrid-activation; json=2", b"[]", "must be an object"),
        ):
            with pytest.raises(StartdProtocolError, match=said):
                await client._request("POST", path, body, content_type=kind)
        assert (await client.status(cid)).state is ClaimState.ENDED  # left as it was
        await client.release(cid)

    run_startd(tmp_path / "home", scenario)
    assert (iwd / "out.0").read_text() == (iwd / "out.1").read_text() == "input\n"
