"""What EC2's answers say of an annex's instances: each instance, and the spot prices
its spend is counted by."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from htgrid.annex._spec import Instance

__all__ = ["instance_of", "spot_prices"]

_RUNNING: Final = frozenset({"pending", "running"})


def instance_of(raw: Mapping[str, Any]) -> Instance:
    launched = raw.get("LaunchTime")
    return Instance(
        instance_id=str(raw["InstanceId"]),
        state=str(raw.get("State", {}).get("Name", "unknown")),
        instance_type=str(raw.get("InstanceType", "")),
        launched=float(launched.timestamp()) if launched is not None else 0.0,
        lifecycle=str(raw.get("InstanceLifecycle", "on-demand")),
        address=raw.get("PrivateIpAddress"),
        reason=str((raw.get("StateReason") or {}).get("Code", "")),
        zone=str((raw.get("Placement") or {}).get("AvailabilityZone", "")),
    )


def spot_prices(pages: Callable[..., Iterator[Any]], instances: Sequence[Instance]) -> dict[str, tuple[tuple[float, float], ...]]:  # fmt: skip
    """The spot price history of the running spot instances' types and zones since
    the first was launched ("TYPE ZONE" -> ((since, USD an hour), ...)): one listing,
    however many instances."""
    spot = [i for i in instances if i.lifecycle == "spot" and i.state in _RUNNING]
    if not spot:
        return {}
    since = min(i.launched for i in spot)
    history: dict[str, list[tuple[float, float]]] = {}
    for record in pages(
        "ec2",
        "describe_spot_price_history",
        "SpotPriceHistory",
        InstanceTypes=sorted({i.instance_type for i in spot}),
        ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
        StartTime=datetime.fromtimestamp(since, UTC),
    ):
        try:
            when = record["Timestamp"]
            at = when.timestamp() if isinstance(when, datetime) else float(when)
            price = float(record["SpotPrice"])
        except (KeyError, TypeError, ValueError):
            continue
        key = f"{record.get('InstanceType')} {record.get('AvailabilityZone')}"
        history.setdefault(key, []).append((at, price))
    return {k: tuple(sorted(v)) for k, v in history.items()}
