"""An annex's spend: spot instances at the spot price history they ran at (one listing of
the history per refresh), on-demand ones at the shipped table's prices, and the Annex ad
says which (SpendIsEstimate, SpendSource)."""

from __future__ import annotations

import time
from pathlib import Path

from htgrid.annex import AnnexSpec, CloudAnnex, Instance
from htgrid.annex._spot import spot_spend

from .conftest import IMAGE, annexes

HOURS = 1000  # moto's spot price is a constant 0.00001 USD an hour: long enough to show


def test_spot_instances_are_charged_their_price_history(aws: str, home: Path) -> None:
    start = time.time()
    annexes(home).create(AnnexSpec("ss", slots=2, lifetime=3600, image_ids=(IMAGE,)))
    later = annexes(home, clock=lambda: start + HOURS * 3600)
    before = later.aws.calls
    (ad,) = later.ads("ss", publish=False)
    assert ad["SpendIsEstimate"] is False and ad["SpendSource"] == "spot price history"
    assert abs(ad["Spend"] - 2 * 0.00001 * HOURS) < 0.0005, ad["Spend"]
    calls = later.aws.calls - before
    # The on-demand annex: the table, an estimate (and no price history asked for).
    annexes(home).create(AnnexSpec("od", count=1, lifetime=3600, image_ids=(IMAGE,)))
    before = later.aws.calls
    (od,) = later.ads("od", publish=False)
    assert od["SpendIsEstimate"] is True and od["SpendSource"] == "on-demand price table"
    assert abs(od["Spend"] - 0.096 * HOURS) < 0.5, od["Spend"]
    assert later.aws.calls - before == calls - 1


def test_the_spot_price_in_force_at_each_moment_counts() -> None:
    def running(iid: str, launched: float) -> Instance:
        return Instance(iid, "running", "m5.large", launched, "spot", None, zone="us-east-1a")

    annex = CloudAnnex(
        name="p",
        owner="u",
        lease_end=10_000,
        requested=2,
        instances=(running("i-1", 900), running("i-2", 2700)),
        fleets=(),
        settings={},
        spot_prices={"m5.large us-east-1a": ((0, 1.0), (1800, 2.0))},
    )
    total, priced = spot_spend(annex, 3600)
    # i-1: 900 s at 1.0 then 1800 s at 2.0; i-2: 900 s at 2.0 (USD an hour).
    assert priced == {"i-1", "i-2"}
    assert abs(total - (0.25 + 1.0 + 0.5)) < 1e-9
