"""Job queue throughput against SQLite's own limit, measured in one run.

    python bench/queue_submit.py [--procs 100000] [--held 0.1] [--repeat 3]

1. Submit one cluster of N procs (a 60-attribute cluster ad, three attributes per proc)
   and compare with the raw insert of the very rows the queue wrote (executemany in one
   transaction, same schema, same pragmas): the physical limit. Target: ratio <= 2.
2. Hold a fraction of the jobs, then query the held ones: the indexed query against a
   full scan that evaluates the same constraint on every job in Python.

Times are the best of --repeat runs (each on a fresh state directory).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import htgrid.classad as classad
from htgrid.queue import Identity, JobAction, JobQueue

USER = Identity("alice")


def cluster_ad() -> classad.ClassAd:
    """A cluster ad of the size condor_submit produces (about 60 attributes)."""
    ad = classad.ClassAd()
    ad["Cmd"] = "/home/alice/analysis/run.sh"
    ad["Iwd"] = "/home/alice/analysis"
    ad["JobUniverse"] = 5
    ad["MyType"] = "Job"
    ad["TargetType"] = "Machine"
    ad["RequestCpus"] = 1
    ad["RequestDisk"] = classad.ExprTree("DiskUsage")
    ad["RequestMemory"] = classad.ExprTree(
        "ifthenelse(MemoryUsage =!= undefined, MemoryUsage, (ImageSize + 1023) / 1024)"
    )
    ad["Requirements"] = classad.ExprTree(
        '(TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX") && (TARGET.Disk >= RequestDisk)'
        " && (TARGET.Memory >= RequestMemory) && (TARGET.HasFileTransfer)"
    )
    ad["Rank"] = 0.0
    ad["PeriodicRemove"] = classad.ExprTree("NumJobStarts > 10")
    ad["OnExitRemove"] = classad.ExprTree("NumJobCompletions > JobMaxRetries || ExitCode == 0")
    ad["JobMaxRetries"] = 3
    ad["LeaveJobInQueue"] = False
    zeros = [
        "NumCkpts", "NumJobStarts", "NumJobCompletions", "NumRestarts", "NumSystemHolds",
        "TotalSuspensions", "LastSuspensionTime", "CommittedTime", "CommittedSlotTime",
        "CommittedSuspensionTime", "CumulativeSlotTime", "CumulativeSuspensionTime",
        "ExitStatus", "ImageSize", "DiskUsage", "ExecutableSize", "TransferInputSizeMB",
        "CurrentHosts", "JobPrio", "JobNotification", "CoreSize",
    ]  # fmt: skip
    for name in zeros:
        ad[name] = 0
    for name in ["RemoteSysCpu", "RemoteUserCpu", "RemoteWallClockTime", "CumulativeRemoteSysCpu"]:
        ad[name] = 0.0
    ad["MinHosts"] = ad["MaxHosts"] = 1
    ad["JobLeaseDuration"] = 2400
    ad["ShouldTransferFiles"] = "IF_NEEDED"
    ad["WhenToTransferOutput"] = "ON_EXIT"
    ad["TransferIn"] = ad["TransferOut"] = ad["TransferErr"] = False
    ad["In"] = "/dev/null"
    ad["UserLog"] = "/home/alice/analysis/run.log"
    ad["Environment"] = ""
    ad["FileSystemDomain"] = "example.org"
    ad["ExitBySignal"] = False
    ad["CondorVersion"] = "$CondorVersion: 25.0.0 2025-01-01 $"
    ad["CondorPlatform"] = "$CondorPlatform: x86_64_AlmaLinux9 $"
    ad["JobSubmitMethod"] = 0
    ad["AccountingGroup"] = "group_physics.alice"
    ad["JobBatchName"] = "analysis"
    return ad


def proc_ads(n: int) -> list[classad.ClassAd]:
    """What differs per proc: $(Process) in the arguments and the output files."""
    ads = []
    for i in range(n):
        ad = classad.ClassAd()
        ad["Args"] = f"--seed {i} --input data/{i}.h5"
        ad["Out"] = f"out/{i}.out"
        ad["Err"] = f"out/{i}.err"
        ads.append(ad)
    return ads


def best_of(repeat: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(repeat))


def time_submit(root: Path, common: classad.ClassAd, procs: list[classad.ClassAd]) -> float:
    with JobQueue.open(root, clock=lambda: 1_700_000_000) as q:
        start = time.perf_counter()
        q.submit(USER, common, procs)
        return time.perf_counter() - start


def time_raw_insert(root: Path, written: Path) -> float:
    """The rows the queue wrote, inserted straight into an identical empty database."""
    src = sqlite3.connect(written)
    jobs = src.execute("SELECT cluster, proc, status, owner, seq, ad FROM jobs").fetchall()
    cluster = src.execute("SELECT cluster, owner, ad FROM clusters").fetchall()
    change = src.execute("SELECT * FROM changes").fetchall()
    src.close()
    root.mkdir()
    conn = sqlite3.connect(root / "queue.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(resources.files("htgrid.queue").joinpath("_schema.sql").read_text())
    start = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO jobs (cluster, proc, status, owner, seq, ad) VALUES (?, ?, ?, ?, ?, ?)", jobs
    )
    conn.executemany("INSERT INTO clusters (cluster, owner, ad) VALUES (?, ?, ?)", cluster)
    conn.executemany("INSERT INTO changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", change)
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=100_000)
    parser.add_argument("--held", type=float, default=0.1, help="fraction of jobs held")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.procs
    common, procs = cluster_ad(), proc_ads(n)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        runs = iter(range(1000))

        def submit_once() -> float:
            return time_submit(base / f"q{next(runs)}", common, procs)

        submit = best_of(args.repeat, submit_once)
        written = base / "q0" / "queue.db"
        raw = best_of(args.repeat, lambda: time_raw_insert(base / f"raw{next(runs)}", written))
        print(f"submit {n:,} procs in one cluster: {submit:.3f} s ({submit / n * 1e6:.1f} us/proc)")
        print(f"raw SQLite insert of the same rows:  {raw:.3f} s ({raw / n * 1e6:.1f} us/proc)")
        print(f"ratio submit / raw insert:           {submit / raw:.2f}  (target <= 2)")

        with JobQueue.open(base / "q0", clock=lambda: 1_700_000_100) as q:
            step = max(1, round(1 / args.held)) if args.held > 0 else n + 1
            hold_time, held = timed(
                lambda: q.act(JobAction.Hold, f"ProcId % {step} == 0", USER, "bench")
            )
            print(f"hold {len(held):,} jobs by constraint:        {hold_time:.3f} s")
            indexed = best_of(args.repeat, lambda: timed(lambda: q.query("JobStatus == 5"))[0])
            scan = best_of(args.repeat, lambda: timed(lambda: q.query("JobStatus + 0 == 5"))[0])
            found = len(q.query("JobStatus == 5"))
            assert found == len(held) == len(q.query("JobStatus + 0 == 5"))
            print(f"query the {found:,} held jobs (index):  {indexed:.3f} s")
            print(f"same constraint, full scan:          {scan:.3f} s")
            print(f"ratio indexed / full scan:           {indexed / scan:.3f}")
            everything = best_of(args.repeat, lambda: timed(lambda: q.query())[0])
            print(f"query all {n:,} jobs (full ads):     {everything:.3f} s")


if __name__ == "__main__":
    main()
