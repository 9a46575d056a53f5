"""The node's policy on a running job, step by step as HTCondor's startd takes them
(`decide`), and its knobs as htgrid.conf and a reconfig give them."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.pool import PoolError
from htgrid.startd import (
    ClaimState,
    ClaimStatus,
    OutcomeKind,
    Resources,
    StartdClient,
    StartdConfig,
)
from htgrid.startd._claims import Claim, Slots
from htgrid.startd._daemon import Startd
from htgrid.startd._policy import Step, decide, retirement_left
from htgrid.startd._policy_knobs import StartdPolicy
from htgrid.testing.procs import group_states, group_stopped

from .conftest import claim_id, job_ad, run_startd, script, until

T0 = 1_000_000.0


def _running(**job: object) -> Claim:
    slots = Slots(Resources(4, 4000, 100_000), "node.test", clock=lambda: T0)
    claim = slots.carve("c" * 20, Resources(1, 10, 10), ClassAd(job), "schedd", 60.0)
    claim.move(ClaimState.STARTING, T0)
    claim.move(ClaimState.RUNNING, T0)
    claim.job_start = T0
    return claim


def _my(**attrs: object) -> ClassAd:
    return ClassAd({"State": "Claimed", "Activity": "Busy", **attrs})


def test_by_default_a_running_job_is_left_alone() -> None:
    claim = _running(ClusterId=1)
    assert decide(StartdPolicy(), claim, _my(), T0 + 5, 10.0) is None


def test_suspend_then_continue_as_the_expressions_say() -> None:
    policy = StartdPolicy(want_suspend="true", suspend="MY.Busy", continue_="MY.Busy =!= true")
    claim = _running(ClusterId=1)
    assert decide(policy, claim, _my(Busy=False), T0 + 1, 10.0) is None
    assert decide(policy, claim, _my(Busy=True), T0 + 1, 10.0) is Step.SUSPEND
    claim.move(ClaimState.SUSPENDED, T0 + 1)
    assert decide(policy, claim, _my(Busy=True), T0 + 2, 10.0) is None
    assert decide(policy, claim, _my(Busy=False), T0 + 2, 10.0) is Step.CONTINUE
    # SUSPEND is looked at only when WANT_SUSPEND is true.
    claim.move(ClaimState.RUNNING, T0 + 3)
    no_want = StartdPolicy(suspend="true")
    assert decide(no_want, claim, _my(), T0 + 4, 10.0) is None


def test_preempt_is_looked_at_when_the_job_may_not_be_suspended_or_is_suspended() -> None:
    claim = _running(ClusterId=1)
    # WANT_SUSPEND true: a running job is not preempted (PREEMPT is not looked at) ...
    wants = StartdPolicy(want_suspend="true", preempt="true", continue_="false")
    assert decide(wants, claim, _my(), T0 + 1, 10.0) is None
    # ... until it is suspended.
    claim.move(ClaimState.SUSPENDED, T0 + 1)
    assert decide(wants, claim, _my(), T0 + 2, 10.0) is Step.RETIRE
    other = _running(ClusterId=2)
    assert decide(StartdPolicy(preempt="true"), other, _my(), T0 + 1, 10.0) is Step.RETIRE


def test_a_preempted_job_runs_out_its_retirement_less_its_vacate_time() -> None:
    policy = StartdPolicy(preempt="true", max_job_retirement_time="100")
    claim = _running(ClusterId=1)
    claim.preempted = True
    claim.move(ClaimState.RETIRING, T0 + 10)
    assert retirement_left(policy, claim, _my(), T0 + 10) == 90
    assert decide(policy, claim, _my(), T0 + 10, 5.0) is None
    # Vacated its vacate time before the end, so that it is gone by then.
    assert decide(policy, claim, _my(), T0 + 94, 5.0) is None
    assert decide(policy, claim, _my(), T0 + 95, 5.0) is Step.VACATE
    hard = StartdPolicy(preempt="true", max_job_retirement_time="100", want_vacate="false")
    assert decide(hard, claim, _my(), T0 + 95, 5.0) is Step.KILL_NOW
    # Time suspended does not count against it.
    claim.suspended_total = 50.0
    assert decide(policy, claim, _my(), T0 + 95, 5.0) is None
    assert retirement_left(policy, claim, _my(), T0 + 95) == 55


def test_a_jobs_own_retirement_time_may_be_less_never_more() -> None:
    policy = StartdPolicy(preempt="true", max_job_retirement_time="100")
    short = _running(ClusterId=1, MaxJobRetirementTime=20)
    assert retirement_left(policy, short, _my(), T0 + 5) == 15
    long = _running(ClusterId=1, MaxJobRetirementTime=1000)
    assert retirement_left(policy, long, _my(), T0 + 5) == 95
    # The node's expression is evaluated against the job.
    by_job = StartdPolicy(max_job_retirement_time="TARGET.RequestCpus * 60")
    assert retirement_left(by_job, _running(RequestCpus=2), _my(), T0) == 120


def test_a_retiring_job_may_be_suspended_and_a_vacating_one_killed() -> None:
    policy = StartdPolicy(want_suspend="true", suspend="true", kill="MY.Hurry")
    claim = _running(ClusterId=1)
    claim.preempted = True
    policy_long = StartdPolicy(want_suspend="true", suspend="true", max_job_retirement_time="3600")
    claim.move(ClaimState.RETIRING, T0 + 1)
    assert decide(policy_long, claim, _my(), T0 + 2, 5.0) is Step.SUSPEND
    claim.move(ClaimState.VACATING, T0 + 3)
    assert decide(policy, claim, _my(Hurry=False), T0 + 4, 5.0) is None
    assert decide(policy, claim, _my(Hurry=True), T0 + 4, 5.0) is Step.KILL


def test_the_claim_counts_its_suspensions_and_the_time_run() -> None:
    claim = _running(ClusterId=1)
    claim.move(ClaimState.SUSPENDED, T0 + 10)
    assert claim.run_time(T0 + 15) == 10
    claim.move(ClaimState.RUNNING, T0 + 30)
    claim.move(ClaimState.SUSPENDED, T0 + 40)
    claim.move(ClaimState.RUNNING, T0 + 45)
    assert (claim.suspensions, claim.suspended_total) == (2, 25.0)
    assert claim.run_time(T0 + 50) == 25
    assert claim.status().suspensions == 2
    # Claimed the whole time: the State began when the claim was granted.
    assert (claim.state_entered, claim.entered) == (T0, T0 + 45)
    claim.move(ClaimState.VACATING, T0 + 46)
    assert claim.state_entered == T0 + 46  # Preempting


def test_the_knobs_are_read_with_their_vanilla_forms_and_a_reconfig_names_them(
    tmp_path: Path,
) -> None:
    assert StartdConfig.load(tmp_path).policy == StartdPolicy()
    conf = tmp_path / "htgrid.conf"
    conf.write_text(
        "WANT_SUSPEND = true\nSUSPEND = false\nSUSPEND_VANILLA = MY.LoadAvg > 0.5\n"
        "POLLING_INTERVAL = 2\nMAXJOBRETIREMENTTIME = 3600\n"
    )
    config = StartdConfig.load(tmp_path)
    assert config.policy == StartdPolicy(
        want_suspend="true",
        suspend="MY.LoadAvg > 0.5",
        max_job_retirement_time="3600",
        polling_interval=2.0,
    )
    conf.write_text("WANT_SUSPEND = true\nPREEMPT = true\nPOLLING_INTERVAL = 2\n")
    _, changed, later = config.reconfigured(StartdConfig.load(tmp_path))
    assert changed == ["SUSPEND", "PREEMPT", "MAXJOBRETIREMENTTIME"] and later == []
    conf.write_text("\n\nKILL = (MY.x ==\n")
    with pytest.raises(PoolError, match=r"htgrid\.conf:3: KILL is not a ClassAd expression"):
        StartdConfig.load(tmp_path)


async def _until(probe: Callable[[], bool]) -> bool:
    for _ in range(1000):
        if probe():
            return True
        await asyncio.sleep(0.01)
    return False


def test_a_node_wide_poll_answers_with_a_suspension_and_a_continuation(tmp_path: Path) -> None:
    """The node stops the job's processes (state T) as SUSPEND turns true at a reconfig,
    and continues them as it turns false; a schedd's node-wide poll hears of each."""
    iwd = tmp_path / "iwd"
    script(iwd, f"echo $$ > {iwd / 'pid'}\nwhile [ ! -e {iwd / 'go'} ]; do sleep 0.05; done\n")
    home = tmp_path / "home"
    policy = (
        "POLLING_INTERVAL = 30\nWANT_SUSPEND = true\nSUSPEND = MY.Suspendme\n"
        "CONTINUE = MY.Suspendme =!= true\nSTARTD_ATTRS = Suspendme\n"
    )

    async def switch(startd: Startd, on: bool) -> None:
        conf = (home / "htgrid.conf").read_text().replace(f"Suspendme = {not on}", "")
        (home / "htgrid.conf").write_text(conf + f"Suspendme = {on}\n")
        await startd.reconfig()  # evaluated at once, not 30 s later

    async def scenario(client: StartdClient, startd: Startd) -> None:
        token, cid = secrets.token_urlsafe(24), claim_id()
        job = job_ad(iwd, ShouldTransferFiles="NO")
        await client.request_claim(cid, job, "schedd@test", 60)
        status = await until(
            client, cid, ClaimState.RUNNING, await client.activate(cid, job, watch=token)
        )
        for _ in range(200):
            if (iwd / "pid").exists() and (iwd / "pid").read_text().strip():
                break
            await asyncio.sleep(0.02)
        pid = int((iwd / "pid").read_text())
        await switch(startd, True)
        answer = await client.watch(token, {cid: status.version}, wait=30)
        status = answer[cid]
        assert isinstance(status, ClaimStatus)
        assert (status.state, status.suspensions) == (ClaimState.SUSPENDED, 1)
        assert await _until(lambda: group_stopped(pid))
        (slot,) = [a for a in await client.slots() if a.get("Name") == status.slot]
        assert (slot["State"], slot["Activity"]) == ("Claimed", "Suspended")
        # The policy is in the slot's ad, as condor_status -l shows HTCondor's.
        assert str(slot.lookup("SUSPEND")) == "MY.Suspendme"
        assert slot["WANT_SUSPEND"] is True and slot["MaxJobRetirementTime"] == 0
        assert slot["EnteredCurrentState"] <= slot["EnteredCurrentActivity"]
        await switch(startd, False)
        answer = await client.watch(token, {cid: status.version}, wait=30)
        status = answer[cid]
        assert isinstance(status, ClaimStatus)
        assert (status.state, status.suspensions) == (ClaimState.RUNNING, 1)
        assert await _until(lambda: "T" not in group_states(pid))
        (iwd / "go").touch()
        ended = (await client.watch(token, {cid: status.version}, wait=30))[cid]
        assert isinstance(ended, ClaimStatus) and ended.outcome is not None
        assert ended.outcome.kind is OutcomeKind.EXITED and ended.outcome.exit_code == 0

    run_startd(home, scenario, conf=policy + "Suspendme = False\n")
