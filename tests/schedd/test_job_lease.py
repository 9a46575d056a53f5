"""Which job found Running at a restart the schedd reconnects to: HTCondor's schedd's
test of the job's lease (its JobLeaseDuration since its LastJobLeaseRenewal)."""

from __future__ import annotations

from typing import Any

import pytest

from htgrid.classad import ClassAd
from htgrid.schedd._shadow_base import lease_valid

NOW = 1_800_000_000


@pytest.mark.parametrize(
    ("attrs", "valid"),
    [
        ({"JobLeaseDuration": 2400, "LastJobLeaseRenewal": NOW - 2399}, True),
        ({"JobLeaseDuration": 2400, "LastJobLeaseRenewal": NOW - 2400}, False),  # passed
        ({"JobLeaseDuration": 0, "LastJobLeaseRenewal": NOW}, False),  # asks for none
        ({"JobLeaseDuration": 0}, False),
        ({"JobLeaseDuration": 20}, True),  # no renewal recorded (an older daemon's): tried
        ({"LastJobLeaseRenewal": NOW - 1}, False),  # no JobLeaseDuration: no lease
        ({"JobLeaseDuration": True, "LastJobLeaseRenewal": NOW}, False),
    ],
)
def test_the_lease_decides_the_reconnection(attrs: dict[str, Any], valid: bool) -> None:
    assert lease_valid(ClassAd(attrs), NOW) is valid
