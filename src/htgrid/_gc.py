"""The cyclic garbage collector, set for a long-running daemon.

A daemon's heap is mostly long-lived and acyclic: parsed ads, their cached values, the
modules. CPython's defaults suit small programs: a young collection every 700
allocations, and a full one, which walks the whole heap, each time the survivors have
grown it by a quarter. Measured on the queue daemon taking 1,000 jobs through
HTCondor-C (bench/htcondor_c.py), the collector took ~0.35 s of its ~3.3 s of CPU, each
full collection ~0.1 s. Young collections now come every 50,000 allocations, and what
the process holds when it starts serving is frozen out of every collection; the daemon's
CPU for the same run fell to ~2.5-3.3 s. The few cycles asyncio leaves (exceptions with
their tracebacks) are still collected, only later.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_gc"]

#: Allocations between two young collections (CPython's default is 700).
YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Freeze what the process holds now, and collect the young generation less often.

    Call it once the process has imported what it runs and before it serves. There is
    no collection first: it would cost a GAHP server ~30 ms of its start, to free the
    few cycles that importing leaves.
    """
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
