"""ClassAd performance against the official classad2 (HTCondor mode), measured in one run.

    python bench/classad_bench.py [--quick]

Prints, for each case, microseconds per operation on both sides and the ratio
htgrid / classad2 (lower is better; the targets are in bench/README.md).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

import classad2
import htcondor2  # noqa: F401 - HTCondor mode for classad2

import htgrid.classad as ours

EXPR = '(Memory >= 1024) && (Arch == "X86_64") && stringListMember("a","a,b,c")'


def best_of(fn: Callable[[], Any], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def case_eval(mod: Any, n: int) -> float:
    expr = mod.ExprTree(EXPR)
    ad = mod.ClassAd('[Memory = 2048; Arch = "x86_64"]')
    assert expr.eval(ad) is True

    def run() -> None:
        for _ in range(n):
            expr.eval(ad)

    return best_of(run) / n * 1e6


def job_ad_text(i: int) -> str:
    lines = [
        f"ClusterId = {1000 + i}",
        "ProcId = 0",
        'Owner = "alice"',
        'MyType = "Job"',
        'TargetType = "Machine"',
        f"QDate = {1700000000 + i}",
        "JobStatus = 1",
        "JobUniverse = 5",
        'Cmd = "/home/alice/analysis/run.sh"',
        'Arguments = "--input data.root --events 100000"',
        'Environment = "HOME=/home/alice PATH=/usr/bin:/bin"',
        'Iwd = "/home/alice/analysis"',
        'In = "/dev/null"',
        'Out = "job.out"',
        'Err = "job.err"',
        'UserLog = "/home/alice/analysis/job.log"',
        "RequestCpus = 1",
        f"RequestMemory = {1024 + (i % 8) * 512}",
        "RequestDisk = DiskUsage",
        "DiskUsage = 1000",
        "ImageSize = 1000",
        "ExecutableSize = 1000",
        "JobPrio = 0",
        "JobNotification = 0",
        "LeaveJobInQueue = false",
        "Rank = 0.0",
        'ShouldTransferFiles = "IF_NEEDED"',
        'WhenToTransferOutput = "ON_EXIT"',
        "TransferIn = false",
        'TransferInput = "data.root,config.json"',
        "NumJobStarts = 0",
        "NumRestarts = 0",
        "NumSystemHolds = 0",
        "CumulativeSlotTime = 0",
        "RemoteWallClockTime = 0.0",
        "JobLeaseDuration = 2400",
        "MinHosts = 1",
        "MaxHosts = 1",
        'FileSystemDomain = "example.org"',
        'Requirements = (TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX") && '
        "(TARGET.Disk >= RequestDisk) && (TARGET.Memory >= RequestMemory) && "
        "((TARGET.FileSystemDomain == MY.FileSystemDomain) || (TARGET.HasFileTransfer))",
    ]
    return "\n".join(lines) + "\n"


def case_parse(mod: Any, n: int) -> float:
    texts = [job_ad_text(i) for i in range(n)]
    assert len(mod.parseOne(texts[0], mod.ParserType.Old)) == 40

    def run() -> None:
        for text in texts:
            ad = mod.parseOne(text, mod.ParserType.Old)
            for key in ad:
                ad.eval(key)

    return best_of(run, 3) / n * 1e6


def machine_ad(mod: Any, i: int) -> Any:
    rnd = random.Random(i)
    return mod.ClassAd(
        {
            "Name": f"slot1@node{i:04d}.example.org",
            "Arch": "X86_64" if i % 10 else "aarch64",
            "OpSys": "LINUX",
            "Memory": rnd.choice([2048, 4096, 8192, 16384]),
            "Disk": rnd.choice([500, 5000, 50000000]),
            "Cpus": rnd.choice([1, 4, 8]),
            "HasFileTransfer": True,
            "FileSystemDomain": f"node{i:04d}.example.org",
            "Requirements": mod.ExprTree(
                '(TARGET.RequestMemory <= Memory) && (TARGET.Owner =!= "mallory")'
            ),
            "Rank": mod.ExprTree('TARGET.Owner == "alice" ? 10 : 0'),
        }
    )


def case_match(mod: Any, jobs_n: int, machines_n: int) -> tuple[float, int]:
    jobs = [mod.parseOne(job_ad_text(i), mod.ParserType.Old) for i in range(jobs_n)]
    machines = [machine_ad(mod, i) for i in range(machines_n)]
    count = 0

    def run() -> None:
        nonlocal count
        count = 0
        for job in jobs:
            for machine in machines:
                if job.symmetricMatch(machine):
                    count += 1

    seconds = best_of(run, 1)
    return seconds / (jobs_n * machines_n) * 1e6, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    n_eval = 20_000 if args.quick else 100_000
    n_parse = 200 if args.quick else 2_000
    n_match = 200 if args.quick else 1_000

    rows = []
    theirs = case_eval(classad2, n_eval)
    mine = case_eval(ours, n_eval)
    rows.append(("(a) eval, parsed once", theirs, mine, 1.5))
    theirs = case_parse(classad2, n_parse)
    mine = case_parse(ours, n_parse)
    rows.append(("(b) parse+eval 40-attr old ad", theirs, mine, 3.0))
    theirs, their_count = case_match(classad2, n_match, n_match)
    mine, my_count = case_match(ours, n_match, n_match)
    assert my_count == their_count, (my_count, their_count)
    rows.append((f"(c) symmetricMatch {n_match}x{n_match}", theirs, mine, 1.5))

    print(f"{'case':36} {'classad2 us':>12} {'htgrid us':>10} {'ratio':>6} {'target':>7}")
    for name, t, m, target in rows:
        print(f"{name:36} {t:12.2f} {m:10.2f} {m / t:6.2f} {'<= ' + str(target):>7}")
    print(f"matches found: {my_count} (same as classad2)")


if __name__ == "__main__":
    main()
