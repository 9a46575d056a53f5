"""One negotiation cycle against the naive matcher built on the official classad2.

    python bench/negotiation.py [--jobs 10000] [--slots 10000] [--repeat 3]

The pool: 8-slot machines of four hardware types (memory, KFlops), 10,000 static slots.
The queue: four users, five kinds of job each (memory, Rank), 10,000 idle jobs in about
20 autoclusters. htgrid runs a whole cycle (autoclusters, slot classes, fair share,
ranking with HTCondor's default PRE/POST_JOB_RANK, match records). The naive side only
matches: classad2's `symmetricMatch` of each autocluster's representative against every
slot, as a matcher without grouping would. Prints both times and the ratio
htgrid / classad2 (lower is better).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable
from typing import Any

import classad2
import htcondor2  # noqa: F401 - HTCondor mode for classad2

import htgrid.classad as ours
from htgrid.classad.adjson import json_members
from htgrid.collector._wire import decode_ads, encode_ad, join_ads
from htgrid.negotiator import NegotiatorConfig, PriorityTable, negotiate

TYPES = [  # (memory per slot MB, KFlops)
    (2048, 1_200_000),
    (4096, 1_500_000),
    (8192, 2_100_000),
    (16384, 2_600_000),
]
USERS = ["alice", "bob", "carol", "dave"]
KINDS = [  # (RequestMemory, Rank)
    (1024, "0.0"),
    (2048, "0.0"),
    (3072, "TARGET.KFlops / 1000"),
    (6000, "0.0"),
    (12000, "TARGET.Memory"),
]


def slot_text(i: int) -> str:
    machine, slot = divmod(i, 8)
    memory, kflops = TYPES[machine % len(TYPES)]
    return f"""MyType = "Machine"
TargetType = "Job"
Name = "slot{slot + 1}@node{machine:04d}.example.com"
Machine = "node{machine:04d}.example.com"
SlotID = {slot + 1}
OpSys = "LINUX"
Arch = "X86_64"
State = "Unclaimed"
Activity = "Idle"
LoadAvg = {(machine % 97) / 100:.2f}
Memory = {memory}
Disk = 50000000
Cpus = 1
KFlops = {kflops}
Mips = 20000
HasFileTransfer = true
FileSystemDomain = "node{machine:04d}.example.com"
START = true
Requirements = START
Rank = 0.0
CurrentRank = 0.0
MyAddress = "<10.1.{machine // 250}.{machine % 250}:9618>"
EnteredCurrentActivity = {1_700_000_000 + machine}
MyCurrentTime = 1700003600
"""


def job_text(i: int, per_cluster: int) -> str:
    kind = (i // per_cluster) % len(KINDS)
    user = USERS[(i // (per_cluster * len(KINDS))) % len(USERS)]
    memory, rank = KINDS[kind]
    cluster, proc = 100 + i // per_cluster, i % per_cluster
    return f"""MyType = "Job"
TargetType = "Machine"
ClusterId = {cluster}
ProcId = {proc}
Owner = "{user}"
User = "{user}@example.com"
QDate = {1_700_000_000 + cluster}
JobStatus = 1
JobUniverse = 5
JobPrio = 0
Cmd = "/home/{user}/run.sh"
Arguments = "--part {proc}"
Iwd = "/home/{user}"
RequestCpus = 1
RequestMemory = {memory}
RequestDisk = DiskUsage
DiskUsage = 5000
ImageSize = 5000
Rank = {rank}
Requirements = (TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX") && (TARGET.Disk >= RequestDisk) && (TARGET.Memory >= RequestMemory) && (TARGET.HasFileTransfer)
ShouldTransferFiles = "YES"
WhenToTransferOutput = "ON_EXIT"
"""


def over_the_wire(ads: Iterable[ours.ClassAd]) -> list[ours.ClassAd]:
    return decode_ads(join_ads(encode_ad(json_members(ad)) for ad in ads))


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    per_cluster = max(1, args.jobs // (len(USERS) * len(KINDS)))

    slots_text = "\n".join(slot_text(i) for i in range(args.slots))
    jobs_text = "\n".join(job_text(i, per_cluster) for i in range(args.jobs))
    # The negotiator receives ads as JSON (from the collector and the queue's API), so
    # they are read the way it reads them.
    slots = over_the_wire(ours.parseAds(slots_text, ours.ParserType.Old))
    jobs = over_the_wire(ours.parseAds(jobs_text, ours.ParserType.Old))
    table = PriorityTable()

    cycle_time, result = best_of(
        lambda: negotiate(jobs, slots, table, NegotiatorConfig(), now=1_700_003_600.0),
        args.repeat,
    )

    # The naive matcher: one representative per autocluster against every slot.
    their_slots = list(classad2.parseAds(slots_text, classad2.ParserType.Old))
    their_jobs = list(classad2.parseAds(jobs_text, classad2.ParserType.Old))
    reps = their_jobs[::per_cluster][: len(USERS) * len(KINDS)]

    def naive() -> int:
        return sum(1 for rep in reps for slot in their_slots if rep.symmetricMatch(slot))

    naive_time, pairs = best_of(naive, args.repeat)

    print(f"pool: {len(slots):,} slots; queue: {len(jobs):,} idle jobs")
    print(
        f"htgrid cycle: {cycle_time * 1000:8.1f} ms  ({len(result.matches):,} matches, "
        f"{result.autoclusters} autoclusters, {result.machine_classes} slot classes, "
        f"{result.spins} spins)"
    )
    print(
        f"classad2 pair by pair: {naive_time * 1000:8.1f} ms  ({len(reps)} representatives x "
        f"{len(their_slots):,} slots = {len(reps) * len(their_slots):,} symmetricMatch, "
        f"{pairs:,} true)"
    )
    print(f"ratio htgrid / classad2: {cycle_time / naive_time:.3f}")


if __name__ == "__main__":
    main()
