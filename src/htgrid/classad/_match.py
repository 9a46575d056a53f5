"""Matchmaking: two ads' Requirements evaluated against each other, and Rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

from htgrid.classad._compile import compiled
from htgrid.classad._state import EvalState

if TYPE_CHECKING:
    from htgrid.classad._classad import ClassAd

__all__ = ["rank", "requirements_hold", "symmetric_match"]


def _evaluate(ad: ClassAd, key: str, target: ClassAd) -> object:
    entry = ad._attrs.get(key)
    if entry is None:
        return None
    st = EvalState(ad, ad, target)
    try:
        v = compiled(entry.node)(st)
    except RecursionError:
        return None
    budget = st.budget
    return None if budget is not None and budget[0] < 0 else v  # `overspent`


def requirements_hold(ad: ClassAd, target: ClassAd) -> bool:
    """Whether `ad`'s Requirements are true with `ad` as MY and `target` as TARGET.

    A number counts by its truth; undefined, error, strings and missing Requirements do not.
    """
    v = _evaluate(ad, "requirements", target)
    if v is True:
        return True
    t = type(v)
    return (t is int or t is float) and v != 0


def symmetric_match(a: ClassAd, b: ClassAd) -> bool:
    """Both ads' Requirements hold, each against the other."""
    return requirements_hold(a, b) and requirements_hold(b, a)


def rank(ad: ClassAd, target: ClassAd) -> float:
    """`ad`'s Rank of `target` as a real; anything not a number ranks 0.0."""
    v = _evaluate(ad, "rank", target)
    t = type(v)
    if t is int or t is float or t is bool:
        return float(v)  # type: ignore[arg-type]
    return 0.0
