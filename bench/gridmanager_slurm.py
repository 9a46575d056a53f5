"""The grid manager on a real Slurm, against a plain loop of sbatch for the same jobs.

    python bench/gridmanager_slurm.py [--jobs 2000] [--small 10] [--poll 5]

1. Submit time. A loop runs `sbatch` once per job (each job a script, as the batch GAHP
   writes one); then the grid manager gets the same jobs from a fresh queue and is timed
   from its start until every job's Slurm id is committed to the queue (phase 2 of the
   two-phase submit): GAHP start-up, the tag commits, sbatch through the batch GAHP and the
   id commits included. Target: grid manager / loop <= 1.1.
   For reference, the batch GAHP alone is timed too (the same submit ads sent straight
   to it, 50 at a time): what the grid manager adds is the gap between the two.
2. Status commands per poll interval, for --small jobs and for --jobs jobs: the batch
   resource asks for all its jobs at once (BLAH_JOB_STATUS_ALL), so the count must not
   grow with the number of jobs.

The jobs sleep (they stay queued on a small Slurm), and are cancelled afterwards by name:
only this run's jobs are touched. Needs Slurm up (`bash .ci/slurm-up.sh`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from htgrid.classad import ClassAd
from htgrid.gahp import GahpClient
from htgrid.grid import GridManager, GridManagerConfig
from htgrid.grid.batch import BatchState, build_submit_ad
from htgrid.queue import Identity, JobQueue
from htgrid.submit import SubmitDescription

ME = Identity("root")


def cancel_named(prefix: str) -> None:
    """scancel this run's jobs (their names start with `prefix`), and wait until gone."""
    while True:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, check=True
        ).stdout
        ids = [
            line.split()[0]
            for line in out.splitlines()
            if line.split()[1:2] and line.split()[1].startswith(prefix)
        ]
        if not ids:
            return
        for start in range(0, len(ids), 500):
            subprocess.run(["scancel", *ids[start : start + 500]], check=False)
        time.sleep(1)


def sbatch_loop(count: int, work: Path, prefix: str) -> float:
    """Seconds to submit `count` jobs with one sbatch each."""
    started = time.perf_counter()
    for i in range(count):
        script = work / f"job{i}.sh"
        script.write_text("#!/bin/sh\nexec /bin/sleep 600\n")
        subprocess.run(
            [
                "sbatch", "--parsable", f"--job-name={prefix}{i}", f"--chdir={work}",
                "--output=/dev/null", "--error=/dev/null", str(script),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
    return time.perf_counter() - started


def queue_jobs(home: Path, work: Path, count: int) -> int:
    text = (
        "universe = grid\ngrid_resource = batch slurm\nexecutable = /bin/sleep\n"
        "arguments = 600\ntransfer_executable = false\noutput = /dev/null\n"
        f"error = /dev/null\nqueue {count}\n"
    )
    queue = JobQueue.open(home / "spool")
    desc = SubmitDescription.from_text(text, cwd=str(work))
    with queue.transaction(ME) as tx:
        cluster = tx.new_cluster()
        jobs = list(desc.jobs(cluster, owner="root", qdate=int(time.time())))
        shared = jobs[0].ad
        shared["Owner"] = "root"
        tx.set_cluster_ad(cluster, shared)
        for job in jobs:
            # As `htgrid submit` sends them: each proc holds what differs from the cluster.
            own = ClassAd()
            for name in job.ad:
                if name not in ("ProcId", "Owner") and repr(job.ad.lookup(name)) != repr(
                    shared.lookup(name)
                ):
                    own[name] = job.ad.lookup(name)
            tx.new_proc(cluster, own)
    queue.close()
    return cluster


async def through_gahp(count: int) -> float:
    """Seconds for the batch GAHP alone to take `count` submits (50 in flight)."""
    with tempfile.TemporaryDirectory(prefix="htgrid-bench-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        work.mkdir()
        cluster = queue_jobs(home, work, count)
        queue = JobQueue.open(home / "spool")
        ads = [build_submit_ad(ad, "slurm", f"htgrid_{cluster}_{ad['ProcId']}_g") for ad in
               queue.query(f"ClusterId == {cluster}")]  # fmt: skip
        queue.close()
        started = time.perf_counter()
        client = await GahpClient.start(
            GridManagerConfig().batch_gahp, env={**os.environ, "GAHP_TEMP": str(home)}
        )
        try:
            await client.call("BLAH_PING", "slurm")
            results = await asyncio.gather(*(client.call("BLAH_JOB_SUBMIT", ad) for ad in ads))
            seconds = time.perf_counter() - started
        finally:
            await client.close()
            cancel_named(f"htgrid_{cluster}_")
    assert all(result[0] == "0" for result in results), results[:3]
    return seconds


async def through_manager(count: int, poll: float, polls: int) -> dict[str, Any]:
    """Submit `count` jobs through a grid manager; times and status command counts."""
    with tempfile.TemporaryDirectory(prefix="htgrid-bench-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        work.mkdir()
        cluster = queue_jobs(home, work, count)
        config = GridManagerConfig(
            poll_interval=poll,
            feed_interval=0.5,
            max_submitted_per_resource=max(count, 1000),
            batch_gahp=(sys.executable, "-m", "htgrid.cli", "gahp", "batch"),
        )
        manager = GridManager(home, config=config)
        stop = asyncio.Event()
        started = time.perf_counter()
        task = asyncio.create_task(manager.run(stop))
        try:
            await manager.ready.wait()
            while sum(j.state is BatchState.SUBMITTED for j in manager.jobs.values()) < count:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
            submit_time = time.perf_counter() - started
            writes = manager.stats()["queue_writes"]
            resource = manager.stats()["resources"]["batch slurm"]
            before = dataclasses.replace(resource)
            while resource.polls < before.polls + polls:
                await asyncio.sleep(0.1)
            after = dataclasses.replace(resource)
        finally:
            stop.set()
            await task
            cancel_named(f"htgrid_{cluster}_")
    return {
        "jobs": count,
        "submit_seconds": submit_time,
        "polls": after.polls - before.polls,
        "status_commands": after.status_commands - before.status_commands,
        "status_failures": after.status_failures - before.status_failures,
        "queue_writes": writes,
        "max_requests_in_flight": after.max_in_flight,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument(
        "--poll", type=float, default=5.0, help="poll interval of the status counts, seconds"
    )
    parser.add_argument("--polls", type=int, default=3, help="poll intervals to count")
    parser.add_argument(
        "--timing-poll",
        type=float,
        default=GridManagerConfig().poll_interval,
        help="poll interval while submit times are taken (default: the grid manager's)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of loop-then-manager (best kept)"
    )
    args = parser.parse_args()

    loops: list[float] = []
    gahps: list[float] = []
    runs: list[dict[str, Any]] = []
    # Alternate the two, so that a machine busy with something else hurts both alike.
    for _ in range(args.repeat):
        prefix = f"hb{uuid.uuid4().hex[:8]}_"
        with tempfile.TemporaryDirectory(prefix="htgrid-bench-") as tmp:
            try:
                loops.append(sbatch_loop(args.jobs, Path(tmp), prefix))
            finally:
                cancel_named(prefix)
        gahps.append(asyncio.run(through_gahp(args.jobs)))
        runs.append(asyncio.run(through_manager(args.jobs, args.timing_poll, 0)))
    small = asyncio.run(through_manager(args.small, args.poll, args.polls))
    large = asyncio.run(through_manager(args.jobs, args.poll, args.polls))

    best_loop = min(loops)
    big = min(runs, key=lambda run: float(run["submit_seconds"]))
    ratio = big["submit_seconds"] / best_loop
    seconds = ", ".join(f"{x:.1f}" for x in loops)
    print(
        f"submit {args.jobs} jobs to Slurm (best of {args.repeat}; status polls every "
        f"{args.timing_poll:g} s meanwhile)"
    )
    print(f"  sbatch loop         {best_loop:8.2f} s  ({args.jobs / best_loop:7.1f} jobs/s)")
    print(f"                      all: {seconds}")
    best_gahp = min(gahps)
    print(f"  batch GAHP alone    {best_gahp:8.2f} s  ({args.jobs / best_gahp:7.1f} jobs/s)")
    print(f"                      all: {', '.join(f'{x:.1f}' for x in gahps)}")
    print(
        f"  grid manager        {big['submit_seconds']:8.2f} s  "
        f"({args.jobs / big['submit_seconds']:7.1f} jobs/s)  "
        f"{big['queue_writes']} queue commits, at most {big['max_requests_in_flight']} "
        "GAHP requests in flight"
    )
    seconds = ", ".join(f"{run['submit_seconds']:.1f}" for run in runs)
    print(f"                      all: {seconds}")
    print(f"  ratio               {ratio:8.2f}   (target <= 1.1; manager / GAHP alone: "
          f"{big['submit_seconds'] / best_gahp:.2f})")  # fmt: skip
    # Each round's three runs are side by side in time: their ratios share the load.
    rounds = [
        (run["submit_seconds"] / loop, gahp / loop)
        for loop, gahp, run in zip(loops, gahps, runs, strict=True)
    ]
    print(
        "  ratios by round     "
        + ", ".join(f"{manager:.2f}" for manager, _ in rounds)
        + f"  (median {statistics.median(m for m, _ in rounds):.2f}); GAHP alone / loop: "
        + ", ".join(f"{alone:.2f}" for _, alone in rounds)
        + f" (median {statistics.median(a for _, a in rounds):.2f})"
    )
    print(f"status commands per poll interval ({args.poll:g} s)")
    for run in (small, large):
        per_poll = run["status_commands"] / max(1, run["polls"])
        print(
            f"  {run['jobs']:5d} jobs          {per_poll:8.2f}   "
            f"({run['status_commands']} commands in {run['polls']} polls, "
            f"{run['status_failures']} failed)"
        )
    grows = large["status_commands"] / max(1, large["polls"]) > small["status_commands"] / max(
        1, small["polls"]
    )
    print(f"  grows with the jobs: {'YES' if grows else 'no'}")
    return 0 if ratio <= 1.1 and not grows else 1


if __name__ == "__main__":
    sys.exit(main())
