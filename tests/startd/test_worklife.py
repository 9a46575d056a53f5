"""CLAIM_WORKLIFE on the execute node: a claim older than it when a job ends takes no
further job; the schedd learns so with the job's end, and a reuse asked for all the same
is refused and the claim released."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.pool import PoolError
from htgrid.startd import (
    ClaimNotFound,
    ClaimRefused,
    ClaimState,
    ClaimStatus,
    Resources,
    StartdClient,
    StartdConfig,
)
from htgrid.startd._claims import Slots
from htgrid.startd._daemon import Startd
from htgrid.startd._transfer import input_entries, pack

from .conftest import MACHINE, job_ad, run_job, run_startd, script, until


def _ended_at(slots: Slots, cid: str, now: float) -> bool:
    """Run the claim's next job from `now` to its end then; whether the claim closes."""
    claim = slots.claims[cid]
    if claim.state is ClaimState.ENDED:
        claim.move(ClaimState.CLAIMED, now)
    claim.move(ClaimState.STARTING, now)
    claim.move(ClaimState.RUNNING, now)
    claim.move(ClaimState.ENDED, now)
    return claim.status().closing


def test_a_claim_closes_at_the_first_job_end_past_its_worklife() -> None:
    granted = [1000.0]
    slots = Slots(Resources(4, 1000, 10_000), "host", clock=lambda: granted[0])
    slots.carve("a" * 20, Resources(1, 10, 10), ClassAd(), "s", 60, worklife=100)
    slots.carve("b" * 20, Resources(1, 10, 10), ClassAd(), "s", 60)  # no limit
    assert [_ended_at(slots, "a" * 20, t) for t in (1010.0, 1099.0, 1100.0)] == [
        False,
        False,
        True,
    ]
    assert not _ended_at(slots, "b" * 20, 10**9)
    zero = slots.carve("c" * 20, Resources(1, 10, 10), ClassAd(), "s", 60, worklife=0)
    assert _ended_at(slots, zero.claim_id, 1000.0)  # 0: one job per claim


def test_closing_crosses_the_wire_and_is_off_by_default() -> None:
    status = ClaimStatus("c" * 20, "slot1_1@h", ClaimState.ENDED, 3, closing=True)
    assert status.to_json()["closing"] is True
    assert ClaimStatus.from_json(status.to_json()) == status
    plain = ClaimStatus("c" * 20, "slot1_1@h", ClaimState.ENDED, 3)
    assert "closing" not in plain.to_json()
    assert not ClaimStatus.from_json(plain.to_json()).closing


@pytest.mark.parametrize(
    ("text", "seconds"), [("", 1200.0), ("0", 0.0), ("3600", 3600.0), ("-1", None)]
)
def test_claim_worklife_is_read_from_the_pool_config(
    tmp_path: Path, text: str, seconds: float | None
) -> None:
    (tmp_path / "htgrid.conf").write_text(f"CLAIM_WORKLIFE = {text}\n" if text else "")
    assert StartdConfig.load(tmp_path).claim_worklife == seconds


def test_a_claim_worklife_that_is_not_a_number_is_refused_with_its_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "htgrid.conf").write_text("START = true\nCLAIM_WORKLIFE = 20m\n")
    with pytest.raises(PoolError, match=r"htgrid\.conf:2: CLAIM_WORKLIFE .* not '20m'"):
        StartdConfig.load(tmp_path)


def test_a_closing_claim_refuses_the_next_job_and_is_released(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, "exit 0\n")

    async def scenario(client: StartdClient, startd: Startd) -> None:
        cid, ended = await run_job(client, job_ad(iwd))
        assert ended.closing and ended.outcome is not None  # told with the job's end
        await client.fetch_output(cid, tmp_path / "out.tar")  # the output is still there
        with pytest.raises(ClaimRefused, match=r"CLAIM_WORKLIFE \(0 seconds\)"):
            await client.activate(cid, job_ad(iwd, ProcId=1), after="1.0")
        with pytest.raises(ClaimNotFound):
            await client.status(cid)
        assert not startd.slots.claims  # its resources are the slot's again

    run_startd(tmp_path / "home", scenario, conf="CLAIM_WORKLIFE = 0\n")


def test_an_idle_claim_past_its_worklife_is_released_by_the_node(tmp_path: Path) -> None:
    """HTCondor's startd releases a claim left idle past CLAIM_WORKLIFE by itself: a
    claim readied for another job, and none activated, is not kept for its schedd."""
    home, iwd = tmp_path / "home", tmp_path / "iwd"
    script(iwd, "exit 0\n")
    home.mkdir()
    (home / "htgrid.conf").write_text(
        "JOB_MAX_VACATE_TIME = 1\nALLOW_ROOT_JOBS = true\nCLAIM_WORKLIFE = 600\n"
    )
    config = StartdConfig.load(home)
    later = [0.0]  # the node's wall clock runs this far ahead

    async def main() -> None:
        startd = Startd(
            config, pool="127.0.0.1:1", machine=MACHINE, clock=lambda: time.time() + later[0]
        )
        task = asyncio.create_task(startd.run())
        try:
            async with StartdClient(config.socket) as client:
                while not (task.done() or config.socket.exists()):
                    await asyncio.sleep(0.01)
                cid, ended = await run_job(client, job_ad(iwd))
                assert not ended.closing
                assert (await client.reuse(cid)).state is ClaimState.CLAIMED
                later[0] = 601.0  # past the worklife, idle
                for _ in range(200):
                    if cid not in startd.slots.claims:
                        break
                    await asyncio.sleep(0.05)
                with pytest.raises(ClaimNotFound):
                    await client.status(cid)
        finally:
            startd.request_stop()
            await task

    asyncio.run(main())


def test_a_claim_not_closing_at_its_job_end_takes_the_next_job_past_its_worklife(
    tmp_path: Path,
) -> None:
    """The 'closing' answer with a job's end is the node's word: a claim that was not
    closing then takes the next job (activated with `after`) even if its worklife runs
    out before that activation comes, and is not released meanwhile. Were it refused, the
    schedd, which records the job's start before activating it, would have logged a
    start (001) of a job that never ran."""
    home, iwd = tmp_path / "home", tmp_path / "iwd"
    script(iwd, "exit 0\n")
    home.mkdir()
    (home / "htgrid.conf").write_text(
        "JOB_MAX_VACATE_TIME = 1\nALLOW_ROOT_JOBS = true\nCLAIM_WORKLIFE = 600\n"
    )
    config = StartdConfig.load(home)
    later = [0.0]

    async def main() -> None:
        startd = Startd(
            config, pool="127.0.0.1:1", machine=MACHINE, clock=lambda: time.time() + later[0]
        )
        task = asyncio.create_task(startd.run())
        try:
            async with StartdClient(config.socket) as client:
                while not (task.done() or config.socket.exists()):
                    await asyncio.sleep(0.01)
                cid, ended = await run_job(client, job_ad(iwd))
                assert not ended.closing
                later[0] = 601.0  # the worklife runs out before the schedd reuses it
                await asyncio.sleep(1.2)  # the node's checks (every 0.5 s) pass over it
                assert cid in startd.slots.claims
                second = job_ad(iwd, ProcId=1)
                status = await client.activate(cid, second, after="1.0")
                assert status.state is not ClaimState.ENDED and status.job == "1.1"
                if status.transfer_input:
                    tar = iwd / ".input.tar"
                    await asyncio.to_thread(pack, input_entries(second), tar, dereference=True)
                    status = await client.send_input(cid, tar)
                ended = await until(client, cid, ClaimState.ENDED, status)
                assert ended.outcome is not None and ended.outcome.exit_code == 0
                assert ended.closing  # this job's end is past the worklife: over
        finally:
            startd.request_stop()
            await task

    asyncio.run(main())
