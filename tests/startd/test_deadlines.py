"""The node's checks of its claims (leases, CLAIM_WORKLIFE) sleep until the first of
them is due (`Slots.next_due`), not on a fixed tick: an idle node sleeps."""

from __future__ import annotations

from htgrid.classad import ClassAd
from htgrid.startd._claims import Slots
from htgrid.startd._states import ClaimState
from htgrid.startd._wire import Resources

from .conftest import MACHINE


def test_the_next_check_is_the_first_lease_to_run_out_or_claim_to_wear_out() -> None:
    now = [1000.0]
    slots = Slots(MACHINE.offered, MACHINE.hostname, clock=lambda: now[0], monotonic=lambda: now[0])
    assert slots.next_due() is None  # no claim: nothing is due
    ad = ClassAd({"JobLeaseDuration": 0})
    slots.carve("c1", Resources(1, 100, 100), ad, "s", 60.0, worklife=30.0)
    slots.carve("c2", Resources(1, 100, 100), ad, "s", 40.0)
    assert slots.next_due() == 40.0  # c2's lease; c1 took no job yet: it does not wear out
    now[0] += 10.0
    assert slots.renew(["c2"]) == []
    assert slots.next_due() == 40.0  # c2's lease starts again: c1's runs out first
    c1 = slots.claims["c1"]
    c1.move(ClaimState.STARTING, now[0])
    c1.move(ClaimState.RUNNING, now[0])
    c1.move(ClaimState.ENDED, now[0])
    c1.uses, c1.renewed = 1, now[0]
    c1.move(ClaimState.CLAIMED, now[0])  # readied for its next job: idle, it wears out
    assert slots.next_due() == 20.0  # at 1030, its worklife from the grant
    c2 = slots.claims["c2"]
    c2.no_lease = True
    c2.move(ClaimState.STARTING, now[0])
    assert slots.renew(["c2"], 2.0) == []
    assert slots.next_due() == 4.0  # a job with no lease: two keep-alives' time
