"""Reading what the negotiator needs from job and slot ads."""

from __future__ import annotations

import math

from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.fast import attr_value
from htgrid.negotiator._model import ResourceRequest
from htgrid.queue import JobId

__all__ = [
    "attr_value",
    "job_id",
    "matchable",
    "number",
    "rank_value",
    "request_of",
    "slot_weight",
    "submitter_of",
]

# What a rank that is not a number sorts as (HTCondor's -FLT_MAX).
_WORST = -3.4028234663852886e38


def submitter_of(job: ClassAd) -> str:
    """Who a job is accounted to: AccountingGroup, else User, else Owner."""
    for key in ("accountinggroup", "user", "owner"):
        value = attr_value(job, key)
        if isinstance(value, str) and value:
            return value
    return "unknown"


def number(value: object) -> float | None:
    """An int or a real as a float; None for anything else (bool and Value included)."""
    if isinstance(value, int | float) and type(value) in (int, float):
        return float(value)
    return None


def slot_weight(ad: ClassAd, use_slot_weights: bool = True) -> float:
    """What a slot counts toward shares: SlotWeight, else Cpus, else 1."""
    if not use_slot_weights:
        return 1.0
    for key in ("slotweight", "cpus"):
        value = number(attr_value(ad, key))
        if value is not None and value >= 0:
            return value
    return 1.0


def matchable(ad: ClassAd) -> bool:
    """Whether a slot may be offered: unclaimed, or with no State (a grid site)."""
    state = attr_value(ad, "state")
    return not isinstance(state, str) or state == "Unclaimed"


def job_id(job: ClassAd, position: int) -> JobId:
    """The job's ClusterId.ProcId."""
    cluster, proc = attr_value(job, "clusterid"), attr_value(job, "procid")
    if type(cluster) is int and type(proc) is int:
        return JobId(cluster, proc)
    return JobId(0, position)  # an ad with no ids (a test's, a tool's): its place in the list


def rank_value(expr: ExprTree | None, machine: ClassAd, job: ClassAd) -> float:
    """A PRE/POST_JOB_RANK (slot as MY, job as TARGET) as a number to sort by."""
    if expr is None:
        return 0.0
    value = expr.eval(machine, job)
    if type(value) in (int, float, bool):
        return float(value)
    return _WORST


def request_of(job: ClassAd, machine: ClassAd) -> ResourceRequest | None:
    """What the job asks of a partitionable slot, if the slot has that much left."""
    asked: list[int] = []
    for attr, have_attr, default in (
        ("RequestCpus", "Cpus", 1),
        ("RequestMemory", "Memory", 0),
        ("RequestDisk", "Disk", 0),
    ):
        value = number(job.lookup(attr).eval(job, machine)) if attr in job else None
        want = default if value is None else max(0, math.ceil(value))
        have = number(machine.get(have_attr))
        if have is not None and want > have:
            return None
        asked.append(want)
    return ResourceRequest(*asked)
