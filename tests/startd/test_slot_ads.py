"""The slot ads a node sends the collector: the static part made once, each slot's own
again only when it changed, yet each update the ads as made afresh would be."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.classad.adjson import ad_from_object, loads
from htgrid.startd import ClaimState, Resources, StartdConfig
from htgrid.startd._ads import AdContext, dynamic_ad, partitionable_ad, slot_members
from htgrid.startd._claims import Slots
from htgrid.startd._machine import MachineInfo

T0 = 1_700_000_000.0


def sent(members: list[Mapping[str, str]]) -> list[dict[str, object]]:
    """What the collector reads of the members sent."""
    objects = ["{" + ", ".join(m.values()) + "}" for m in members]
    return [dict(ad_from_object(o)) for o in loads("[" + ", ".join(objects) + "]")]


def test_each_update_sends_the_ads_as_made_afresh_through_a_claims_life(tmp_path: Path) -> None:
    config = StartdConfig.load(tmp_path)
    have = Resources(4, 4096, 100_000)
    machine = MachineInfo("node", "X86_64", "LINUX", "AlmaLinux", 9, 902, "Alma", have, have)
    now = [T0]
    slots = Slots(have, "node", clock=lambda: now[0])
    ctx = AdContext(config, machine, "<127.0.0.2:9>", int(T0))

    def fresh() -> list[dict[str, object]]:
        # A context of its own: nothing kept from earlier updates.
        mine = AdContext(config, machine, ctx.address, ctx.started)
        mine.sequence, mine.certificate = ctx.sequence, ctx.certificate
        ads = [partitionable_ad(mine, slots, now[0])]
        ads += [dynamic_ad(mine, slots, c, now[0]) for c in slots.claims.values()]
        return [dict(ad) for ad in ads]

    def update() -> list[dict[str, object]]:
        ctx.sequence += 1
        now[0] += 1
        ads = sent([m.whole() for m in slot_members(ctx, slots, now[0])])
        for ad in ads:  # the load may move between the two: not what is compared
            del ad["TotalLoadAvg"], ad["LoadAvg"]
        expected = fresh()
        for ad in expected:
            del ad["TotalLoadAvg"], ad["LoadAvg"]
        assert ads == expected
        return ads

    (pslot,) = update()
    assert pslot["Cpus"] == 4 and pslot["State"] == "Unclaimed"
    # The TLS API serving: its address and certificate in every ad from now on.
    ctx.address = "<127.0.0.2:9618?CCBID=127.0.0.1:9618%23node>"
    (pslot,) = update()
    assert pslot["MyAddress"] == ctx.address
    ctx.certificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    job = ClassAd({"ClusterId": 7, "ProcId": 0, "User": "u@x", "Owner": "u"})
    claim = slots.carve("c" * 20, Resources(1, 1024, 1000), job, "schedd@x", 60)
    pslot, dslot = update()
    assert pslot["Cpus"] == 3 and pslot["StartdTlsCertificate"] == ctx.certificate
    assert pslot["MyAddress"] == dslot["MyAddress"] == ctx.address
    assert (dslot["State"], dslot["Activity"], dslot["RemoteUser"]) == ("Claimed", "Idle", "u@x")
    for state, activity in [
        (ClaimState.STARTING, "Busy"),
        (ClaimState.RUNNING, "Busy"),
        (ClaimState.ENDED, "Idle"),
    ]:
        claim.move(state, now[0])
        _, dslot = update()
        assert (dslot["Activity"], dslot["EnteredCurrentActivity"]) == (activity, int(now[0]) - 1)
    # The claim's next job, started in the same second: a new JobId and JobStart.
    claim.job_ad = ClassAd({"ClusterId": 7, "ProcId": 1, "User": "u@x", "Owner": "u"})
    claim.job_start = now[0]
    claim.move(ClaimState.CLAIMED, now[0])
    claim.move(ClaimState.STARTING, now[0])
    _, dslot = update()
    assert (dslot["JobId"], dslot["Activity"]) == ("7.1", "Busy")
    claim.move(ClaimState.RUNNING, now[0])
    claim.move(ClaimState.ENDED, now[0])
    slots.release(claim)
    (pslot,) = update()
    assert pslot["Cpus"] == 4 and pslot["NumDynamicSlots"] == 0
