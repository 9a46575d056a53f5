"""The spend of an annex's spot instances from the cloud's spot price history: the price
each was charged is its type's in its zone at each moment since it was launched (EC2
bills spot instances at the spot price, by the second), so the sum is a measure, not an
estimate from a table."""

from __future__ import annotations

from collections.abc import Sequence

from htgrid.annex._spec import CloudAnnex

__all__ = ["spot_spend"]


def spot_spend(annex: CloudAnnex, now: float) -> tuple[float, frozenset[str]]:
    """(USD, the instances it covers): the annex's running spot instances whose type and
    zone have a price history, each from its launch to `now`."""
    total, priced = 0.0, set()
    for i in annex.instances:
        if i.lifecycle != "spot" or i.state not in ("pending", "running"):
            continue
        history = annex.spot_prices.get(f"{i.instance_type} {i.zone}")
        if not history:
            continue
        total += _integral(history, i.launched, now)
        priced.add(i.instance_id)
    return total, frozenset(priced)


def _integral(history: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """USD from `start` to `end` at the prices of `history` ((since, USD an hour), in
    time order): each price holds until the next; before the first, the first."""
    total = 0.0
    for n, (since, price) in enumerate(history):
        until = history[n + 1][0] if n + 1 < len(history) else end
        lo, hi = max(start, since if n else start), min(end, until)
        if hi > lo:
            total += price * (hi - lo) / 3600.0
    return total
