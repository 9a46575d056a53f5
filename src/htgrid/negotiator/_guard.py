"""Keeping one bad job or ad out of a cycle, instead of letting it stop the cycle.

A job or slot ad whose expressions cannot be evaluated (one nested too deeply to
compile, a bug that ad alone meets) raises out of an evaluation. The cycle catches that
where it evaluates and asks `culprit` whose fault it is: an ad with an expression that
does not even compile is at fault; otherwise the ad whose expression was being
evaluated. A bad job goes unmatched and is reported for the queue to hold; a bad ad is
left out of the cycle. Every other job and slot is matched as if they were not there.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TypeVar

from htgrid.classad import ClassAd
from htgrid.classad.fast import compile_expressions
from htgrid.queue.faults import daemon_fault

__all__ = ["Side", "broken", "culprit", "label", "usable"]

T = TypeVar("T")


class Side(enum.Enum):
    """Whose ad an evaluation failed for."""

    JOB = "job"
    MACHINE = "machine"


def broken(ad: ClassAd) -> BaseException | None:
    """Why one of the ad's expressions cannot be compiled, or None when all can."""
    try:
        compile_expressions(ad)
    except Exception as exc:
        if daemon_fault(exc):
            raise
        return exc
    return None


def culprit(job: ClassAd, machine: ClassAd, evaluating: Side) -> Side:
    """Whose fault an evaluation of `job` against `machine` that raised is, `evaluating`
    being the side whose expression was evaluated."""
    if broken(job) is not None:
        return Side.JOB
    if broken(machine) is not None:
        return Side.MACHINE
    return evaluating


def label(ad: ClassAd, position: int) -> str:
    """How a log names a slot or site ad: its Name, else its place in the list."""
    name = ad.get("Name") if "Name" in ad else None
    return name if isinstance(name, str) else f"ad #{position}"


def usable(
    ads: Sequence[ClassAd], check: Callable[[ClassAd], object]
) -> tuple[list[ClassAd], list[tuple[int, ClassAd, Exception]]]:
    """The ads `check` does not raise for, and (position, ad, error) of those it does."""
    good: list[ClassAd] = []
    bad: list[tuple[int, ClassAd, Exception]] = []
    for position, ad in enumerate(ads):
        try:
            check(ad)
        except Exception as exc:
            if daemon_fault(exc):
                raise
            bad.append((position, ad, exc))
        else:
            good.append(ad)
    return good, bad
