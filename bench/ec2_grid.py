"""VM jobs through the grid manager against moto: start throughput and polls per interval.

    python bench/ec2_grid.py [--vms 500] [--repeat 2]

1. Queue N ec2 jobs (default 500), run the grid manager (in this process, as the tests
   do) with `htgrid gahp ec2`, and time until every job's GridJobId carries its instance
   id (token committed, EC2_VM_START, instance id committed, 027 logged). Compare with a
   plain boto3 loop starting the same N instances one after the other (bench/ec2_vms.py's).
   Both against the same moto server, a separate process, reset before every run.
   Two grid manager times: from its start (the GAHP server's start and first ping
   included), and from the resource's first answered ping (the GAHP up and its boto3
   client made: what the loop does before its clock starts). Target: the second / loop
   <= 1.5; the first is printed too.
2. With 10 and with N VM jobs running, count the EC2_VM_STATUS_ALL requests the ec2
   resource makes per poll. Target: one per poll, whatever the number of jobs.

Times are the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

from ec2_vms import AMI, Moto, boto3_loop  # bench/ is on sys.path when run as a script

from htgrid.grid import GridManager, GridManagerConfig
from htgrid.grid.ec2._resource import Ec2Resource
from htgrid.queue import Identity, JobId, JobQueue
from htgrid.submit import SubmitDescription

TARGET = 1.5
ROOT = Identity("root")
# The default poll interval (10 s): a poll lists every instance, which moto renders slowly.
CONFIG = GridManagerConfig(feed_interval=0.2)


def submit(queue: JobQueue, work: Path, url: str, n: int) -> list[JobId]:
    access, secret = work / "access", work / "secret"
    access.write_text("bench\n")
    secret.write_text("bench\n")
    text = (
        f"universe = grid\ngrid_resource = ec2 {url}\nexecutable = bench-vm\n"
        f"ec2_access_key_id = {access}\nec2_secret_access_key = {secret}\n"
        f"ec2_ami_id = {AMI['ami_id']}\nec2_instance_type = m5.large\nqueue {n}\n"
    )
    desc = SubmitDescription.from_text(text, cwd=str(work))
    with queue.transaction(ROOT) as tx:
        cluster = tx.new_cluster()
        jobs = list(desc.jobs(cluster, owner="root", qdate=int(time.time())))
        for job in jobs:
            job.ad["Owner"] = "root"
        tx.set_cluster_ad(cluster, jobs[0].ad)
        for job in jobs:
            tx.new_proc(cluster, job.ad)
    return [JobId(cluster, proc) for proc in range(n)]


def started(queue: JobQueue, ids: list[JobId]) -> int:
    ads = queue.query(f"ClusterId == {ids[0].cluster}", ["GridJobId"])
    return sum(1 for ad in ads if len(str(ad.get("GridJobId", "")).split()) == 4)


async def grid_run(moto: Moto, n: int, polls: int = 0) -> tuple[float, float, float]:
    """(seconds until all N instances are started and saved, from the grid manager's start
    and from its resource's first answered ping; status requests per poll)."""
    moto.reset()
    with tempfile.TemporaryDirectory(prefix="htgrid-ec2-bench-") as scratch:
        home = Path(scratch)
        work = home / "work"
        work.mkdir()
        queue = JobQueue.open(home / "spool", fsync=False)
        try:
            ids = submit(queue, work, moto.url, n)
            manager = GridManager(home, config=CONFIG)
            stop = asyncio.Event()
            begin = time.perf_counter()
            task = asyncio.create_task(manager.run(stop))
            up = asyncio.create_task(resource_up(manager))
            while await asyncio.to_thread(started, queue, ids) < n:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
            end = time.perf_counter()
            elapsed, warm = end - begin, end - await up
            per_poll = 0.0
            if polls:
                (resource,) = manager.resources.values()
                assert isinstance(resource, Ec2Resource)
                first = (resource.stats.polls, resource.stats.status_commands)
                while resource.stats.polls < first[0] + polls:
                    await asyncio.sleep(0.1)
                made = resource.stats.status_commands - first[1]
                per_poll = made / (resource.stats.polls - first[0])
            stop.set()
            await asyncio.wait_for(task, 120)
        finally:
            queue.close()
    return elapsed, warm, per_poll


async def resource_up(manager: GridManager) -> float:
    """When the grid manager's one resource first answered a ping (perf_counter)."""
    while not any(resource.up for resource in manager.resources.values()):
        await asyncio.sleep(0.005)
    return time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="htgrid-moto-") as scratch:
        moto = Moto(Path(scratch))
        try:
            loop = min(boto3_loop(moto, args.vms) for _ in range(args.repeat))
            runs = [asyncio.run(grid_run(moto, args.vms)) for _ in range(args.repeat)]
            total = min(run[0] for run in runs)
            grid = min(run[1] for run in runs)
            ratio = grid / loop
            print(
                f"{args.vms} VMs: boto3 loop {loop:.2f} s, grid manager {grid:.2f} s from its "
                f"resource up ({total:.2f} s from its start)"
            )
            print(
                f"ratio grid manager / loop: {ratio:.2f} (target <= {TARGET}); "
                f"from its start: {total / loop:.2f}"
            )
            few = asyncio.run(grid_run(moto, 10, polls=3))[2]
            many = asyncio.run(grid_run(moto, args.vms, polls=3))[2]
            print(f"EC2_VM_STATUS_ALL per poll: {few:g} for 10 jobs, {many:g} for {args.vms}")
        finally:
            moto.close()
    sys.exit(0 if ratio <= TARGET else 1)


if __name__ == "__main__":
    main()
