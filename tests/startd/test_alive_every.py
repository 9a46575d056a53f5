"""A job with no lease lasts two of its schedd's keep-alive intervals once its schedd is
silent: the interval the schedd says it keeps, not a gap the node measured across its own
stall (stopped, or starved of CPU), which would stretch it (a CI run at load saw 40 s)."""

from __future__ import annotations

from htgrid.classad import ClassAd
from htgrid.startd._claims import Slots
from htgrid.startd._states import ClaimState
from htgrid.startd._wire import Resources

from .conftest import MACHINE

LEASE = 60.0


def _running_claim(every: float | None) -> tuple[Slots, list[float], list[str]]:
    """A claim running a job with no lease: one keep-alive, then one that waited 25 s in
    the stopped node's socket; what the late one found cut off."""
    now = [1000.0]
    slots = Slots(MACHINE.offered, MACHINE.hostname, clock=lambda: now[0], monotonic=lambda: now[0])
    claim = slots.carve("c1", Resources(1, 100, 100), ClassAd({"JobLeaseDuration": 0}), "s", LEASE)
    claim.no_lease = True
    claim.move(ClaimState.STARTING, now[0])
    claim.move(ClaimState.RUNNING, now[0])
    now[0] += 2.0
    assert slots.renew(["c1"], every) == []
    now[0] += 25.0
    return slots, now, slots.renew(["c1"], every)


def test_the_interval_the_schedd_says_bounds_a_job_with_no_lease() -> None:
    slots, now, cut = _running_claim(every=2.0)
    assert cut == ["c1"]  # two intervals passed: its job is ended
    assert slots.claims["c1"].cut_off(now[0])


def test_an_older_schedd_that_says_none_is_measured() -> None:
    slots, _, cut = _running_claim(every=None)
    assert cut == []  # one keep-alive told nothing: the claim lease held
    assert slots.claims["c1"].limit() == 50.0  # the stall taken for the interval, twice
