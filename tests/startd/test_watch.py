"""One long poll for the ends of many claims (`POST /v1/watch`): it answers for every
claim named or activated with its token that ended, and for those alone."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from htgrid.startd import (
    ClaimNotFound,
    ClaimState,
    ClaimStatus,
    OutcomeKind,
    StartdClient,
    StartdError,
    StartdProtocolError,
)
from htgrid.startd._daemon import Startd

from .conftest import claim_id, job_ad, run_startd, script


def _over(ended: dict[str, ClaimStatus | StartdError]) -> dict[str, int]:
    """Each ended claim's exit code."""
    codes = {}
    for cid, status in ended.items():
        assert isinstance(status, ClaimStatus), status
        assert status.state is ClaimState.ENDED and status.outcome is not None
        assert status.outcome.kind is OutcomeKind.EXITED
        codes[cid] = status.outcome.exit_code
    return codes


def test_one_poll_answers_for_the_ends_of_the_claims_activated_with_its_token(
    tmp_path: Path,
) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, f'while [ ! -e {iwd / "go"} ]; do sleep 0.05; done\nexit "$1"\n')

    async def scenario(client: StartdClient, startd: Startd) -> None:
        token, other = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        claims = {}
        for proc in range(3):
            job = job_ad(iwd, ProcId=proc, Arguments=str(proc), ShouldTransferFiles="NO")
            cid = claim_id()
            await client.request_claim(cid, job, "schedd@test", 60)
            status = await client.activate(cid, job, watch=token)
            assert status.state in (ClaimState.STARTING, ClaimState.RUNNING)  # not over
            claims[cid] = proc
        # Nothing ended yet: the poll waits its time out, and says so.
        assert await client.watch(token, {}, wait=0.2) == {}
        poll = asyncio.create_task(client.watch(token, {}, wait=60))
        (iwd / "go").touch()
        codes = _over(await poll)
        assert codes and set(codes) <= set(claims)
        while len(codes) < len(claims):
            codes |= _over(await client.watch(token, {}, wait=60))
        assert codes == claims
        # Each end is answered once; another token's poll has none of them.
        assert await client.watch(token, {}, wait=0) == {}
        assert await client.watch(other, {}, wait=0) == {}
        polls = (await client.health())["polls"]
        assert (polls["claim"], polls["open"], polls["peak"]) == (0, 0, 1)

    run_startd(tmp_path / "home", scenario)


def test_a_poll_follows_a_claim_activated_while_it_waits(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, "exit 7\n")

    async def scenario(client: StartdClient, startd: Startd) -> None:
        token = secrets.token_urlsafe(24)
        poll = asyncio.create_task(client.watch(token, {}, wait=60))
        await asyncio.sleep(0)
        job = job_ad(iwd, ShouldTransferFiles="NO")
        cid = claim_id()
        await client.request_claim(cid, job, "schedd@test", 60)
        await client.activate(cid, job, watch=token)
        assert _over(await poll) == {cid: 7}

    run_startd(tmp_path / "home", scenario)


def test_a_named_claim_that_is_gone_is_not_found_and_a_newer_poll_ends_the_older(
    tmp_path: Path,
) -> None:
    iwd = tmp_path / "iwd"
    script(iwd, f"while [ ! -e {iwd / 'go'} ]; do sleep 0.05; done\n")

    async def scenario(client: StartdClient, startd: Startd) -> None:
        token = secrets.token_urlsafe(24)
        job = job_ad(iwd, ShouldTransferFiles="NO")
        cid = claim_id()
        await client.request_claim(cid, job, "schedd@test", 60)
        status = await client.activate(cid, job)
        older = asyncio.create_task(client.watch(token, {cid: status.version}, wait=60, seq=1))
        while (await client.health())["polls"]["open"] == 0:  # it waits on the node
            await asyncio.sleep(0.02)
        gone = claim_id()
        newer = await client.watch(token, {gone: 0}, wait=60, seq=2)
        assert list(newer) == [gone] and isinstance(newer[gone], ClaimNotFound)
        assert await older == {}  # answered by the newer poll: nothing had ended
        # A poll overtaken on its way (another connection) by a newer one: at once.
        assert await client.watch(token, {cid: status.version}, wait=60, seq=2) == {}
        (iwd / "go").touch()
        assert _over(await client.watch(token, {cid: status.version}, wait=60)) == {cid: 0}
        with pytest.raises(StartdProtocolError, match='"watch"'):
            await client.watch("short", {}, wait=0)

    run_startd(tmp_path / "home", scenario)
