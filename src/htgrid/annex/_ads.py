"""Annex ads (MyType "Annex") in the collector, so that `htgrid status -annex` and
GlideinWMS-style tools see annexes as HTCondor ads: what was asked for, what the cloud
has (instances pending, booting, joined), the pool's slots of the annex (idle, busy),
the lease's end, what the cloud ended and was replaced, and an estimate of the spend so far.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

from htgrid.annex._replace import interrupted
from htgrid.annex._spec import CloudAnnex
from htgrid.annex._spot import spot_spend
from htgrid.classad import ClassAd

__all__ = ["ANNEX_TYPE", "PRICES", "annex_ad", "spend"]

ANNEX_TYPE: Final = "Annex"

#: On-demand prices (USD an hour, us-east-1, Linux) of common types, for the estimate
#: of spend; a type not here counts nothing (the ad's SpendIsEstimate says so).
PRICES: Final[Mapping[str, float]] = {
    "t3.micro": 0.0104,
    "t3.medium": 0.0416,
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m5.2xlarge": 0.384,
    "c5.large": 0.085,
    "c5.xlarge": 0.17,
    "c5.2xlarge": 0.34,
    "r5.large": 0.126,
    "m6i.large": 0.096,
    "c6i.large": 0.085,
}
# An ad outlives the annex's lease by this much, should nobody refresh or remove it.
_LINGER: Final = 300


def spend(annex: CloudAnnex, now: float, skip: Collection[str] = ()) -> tuple[float, bool]:
    """(USD so far, whether every instance's price was known): running instances'
    hours since launch times their on-demand price (but those of `skip`)."""
    total, known = 0.0, True
    for i in annex.instances:
        if i.state not in ("pending", "running") or i.instance_id in skip:
            continue
        price = PRICES.get(i.instance_type)
        if price is None:
            known = False
            continue
        total += price * max(0.0, now - i.launched) / 3600.0
    return round(total, 4), known


def annex_ad(annex: CloudAnnex, slots: Sequence[ClassAd], region: str, now: float,
             cloud: str = "ec2") -> ClassAd:  # fmt: skip
    """The ad of `annex`, given its slot ads in the pool."""
    machines = {s.get("EC2InstanceID") for s in slots} | {s.get("AzureVMName") for s in slots}
    states = [i.state for i in annex.instances]
    live = [i for i in annex.instances if i.state in ("pending", "running")]
    running = [i for i in live if i.state == "running"]
    dynamic = [s for s in slots if s.get("SlotType") == "Dynamic"]
    ad = ClassAd()
    ad["MyType"] = ANNEX_TYPE
    ad["TargetType"] = ""
    ad["Name"] = annex.name
    ad["AnnexName"] = annex.name
    ad["Owner"] = annex.owner
    ad["Cloud"] = cloud
    ad["Region"] = region
    ad["LeaseExpiration"] = int(annex.lease_end)
    ad["Requested"] = annex.requested
    ad["Pending"] = sum(1 for s in states if s == "pending")
    ad["Booting"] = sum(1 for i in running if i.instance_id not in machines)
    ad["Joined"] = sum(1 for i in running if i.instance_id in machines)
    ad["Terminated"] = sum(1 for s in states if s in ("shutting-down", "terminated"))
    # Instances the cloud ended before the lease (a spot interruption), and of those how
    # many a new request has replaced (the capacity restored).
    ad["Interrupted"] = len(interrupted(annex)) + annex.evicted
    ad["Replaced"] = len(annex.replaced) + annex.restored
    ad["BusySlots"] = sum(1 for s in dynamic if s.get("State") == "Claimed")
    ad["IdleSlots"] = sum(1 for s in slots if s.get("State") == "Unclaimed" and s.get("Cpus"))
    ad["InstanceIds"] = [i.instance_id for i in annex.instances]
    ad["InstanceStates"] = states
    ad["SpotFleetRequestIds"] = [f for f, _ in annex.fleets]
    ad["SpotFleetRequestStates"] = [s for _, s in annex.fleets]
    # Spot instances by the price history they ran at, the rest by the table.
    measured, priced = spot_spend(annex, now)
    running = [i for i in annex.instances if i.state in ("pending", "running")]
    total, known = spend(annex, now, priced)
    ad["Spend"] = round(total + measured, 4)
    ad["SpendIsEstimate"] = any(i.instance_id not in priced for i in running)
    ad["SpendSource"] = ", ".join(
        s
        for s, used in (
            ("spot price history", bool(priced)),
            ("on-demand price table", any(i.instance_id not in priced for i in running)),
        )
        if used
    )
    ad["SpendPricesKnown"] = known
    ad["MyCurrentTime"] = int(now)
    ad["ClassAdLifetime"] = max(60, int(annex.lease_end - now) + _LINGER)
    return ad


def by_annex(slots: Iterable[ClassAd]) -> dict[str, list[ClassAd]]:
    """Slot ads grouped by their AnnexName."""
    out: dict[str, list[ClassAd]] = {}
    for s in slots:
        name = s.get("AnnexName")
        if isinstance(name, str):
            out.setdefault(name, []).append(s)
    return out
