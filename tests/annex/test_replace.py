"""Capacity the cloud takes back is restored while the lease lives: an annex's instance
the cloud ends (a spot interruption, played here by setting moto's state reason as EC2
does) is replaced at the next refresh of the annex, once, and the Annex ad says so; an
instance that someone terminated, or that shut itself down, is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from moto.backends import get_backend
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models.instances import StateReason

from htgrid.annex import AnnexSpec
from htgrid.annex import lease_function as lf

from .conftest import IMAGE, REGION, annexes, boto


def _interrupt(instance_id: str, code: str = "Server.SpotInstanceTermination") -> None:
    """What EC2 does to a spot instance it reclaims: terminated, the reason its own."""
    boto("ec2").terminate_instances(InstanceIds=[instance_id])  # type: ignore[attr-defined]
    instance = get_backend("ec2")[DEFAULT_ACCOUNT_ID][REGION].get_instance(instance_id)
    instance.state_reason = StateReason(f"{code}: reclaimed", code)


def _live(name: str) -> list[dict[str, Any]]:
    pages = boto("ec2").describe_instances(  # type: ignore[attr-defined]
        Filters=[{"Name": f"tag:{lf.ANNEX_TAG}", "Values": [name]}]
    )["Reservations"]
    return [
        i for r in pages for i in r["Instances"] if i["State"]["Name"] in ("pending", "running")
    ]


def _fleets() -> dict[str, float]:
    configs = boto("ec2").describe_spot_fleet_requests()["SpotFleetRequestConfigs"]  # type: ignore[attr-defined]
    return {
        c["SpotFleetRequestId"]: c["SpotFleetRequestConfig"]["TargetCapacity"]
        for c in configs
        if c["SpotFleetRequestState"] in ("submitted", "active", "modifying")
    }


def test_an_interrupted_spot_instance_is_replaced_while_the_lease_lives(
    aws: str, home: Path
) -> None:
    now = [1_900_000_000.0]
    ann = annexes(home, clock=lambda: now[0])
    spec = AnnexSpec("sp", slots=4, lifetime=3600, image_ids=(IMAGE,),
                     instance_types=("m5.large:2",))  # fmt: skip
    ann.create(spec)
    first = _live("sp")
    assert len(first) == 2 and all(i["InstanceLifecycle"] == "spot" for i in first)
    (ad,) = ann.ads(publish=False)
    assert ad["Interrupted"] == 0 and ad["Replaced"] == 0

    _interrupt(first[0]["InstanceId"])
    (ad,) = ann.ads(publish=False)  # the refresh replaces it: a fleet for its weight
    assert ad["Interrupted"] == 1 and ad["Replaced"] == 1
    live = _live("sp")
    assert len(live) == 2 and first[0]["InstanceId"] not in {i["InstanceId"] for i in live}
    assert sorted(_fleets().values()) == [2.0, 4.0]
    assert ad["Requested"] == 4  # the capacity asked for is the same
    # The new instances join as the first did: the annex's own boot, its tags.
    (new,) = (i for i in live if i["InstanceId"] != first[1]["InstanceId"])
    tags = {t["Key"]: t["Value"] for t in new["Tags"]}
    assert tags[lf.ANNEX_TAG] == "sp"

    # Refreshed again (the master's next pass): nothing more is requested.
    (ad,) = ann.ads(publish=False)
    assert ad["Replaced"] == 1 and len(_fleets()) == 2 and len(_live("sp")) == 2

    # Terminated by someone, or shut down by itself (idle): not replaced.
    boto("ec2").terminate_instances(InstanceIds=[first[1]["InstanceId"]])  # type: ignore[attr-defined]
    (ad,) = ann.ads(publish=False)
    assert ad["Interrupted"] == 1 and len(_fleets()) == 2 and len(_live("sp")) == 1

    # Near the lease's end nothing is replaced; at the end everything goes.
    (left,) = _live("sp")
    now[0] += 3600 - 30
    _interrupt(left["InstanceId"])
    (ad,) = ann.ads(publish=False)
    assert ad["Interrupted"] == 2 and ad["Replaced"] == 1 and _live("sp") == []
    event = {"htgrid": "annex-lease", "AnnexName": "sp", "LeaseExpiration": int(now[0] + 30)}
    lf.handler(event, None, clock=lambda: now[0] + 30, clients=boto)
    assert _fleets() == {} and _live("sp") == []


def test_an_on_demand_instance_the_cloud_ended_is_replaced(aws: str, home: Path) -> None:
    ann = annexes(home)
    ann.create(AnnexSpec("od", count=2, lifetime=3600, image_ids=(IMAGE,)))
    first = _live("od")
    _interrupt(first[0]["InstanceId"], "Server.InternalError")
    (annex,) = ann.restore(ann.describe("od"))
    assert annex.replaced == {first[0]["InstanceId"]}
    live = _live("od")
    assert len(live) == 2 and first[0]["InstanceId"] not in {i["InstanceId"] for i in live}
    (again,) = ann.restore(ann.describe("od"))
    assert again.replaced == {first[0]["InstanceId"]} and len(_live("od")) == 2
