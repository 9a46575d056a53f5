"""The grid manager on a real ARC CE, against a loop of ARC's own `arcsub` for the same jobs.

    python bench/arc_grid.py [--jobs 200]

Needs the CE of `.ci/arc-up.sh` (A-REX, fork LRMS, REST on https://localhost:443/arex) and
its test PKI. Each job is `/bin/true` with no files to move.

1. Submit time. A loop runs `arcsub -T arcrest` once per job (each a delegation and a
   submit, as the grid manager makes them); then the grid manager gets the same jobs from a
   fresh queue and is timed from its start until every job's ARC id is committed (GAHP
   start-up, name commits, delegations, submits, id commits included).
2. End to end: the grid manager's jobs until every one has completed, its output checked
   and its session cleaned from the CE (the CE's own lag included: its state changes come
   with its information provider, about once a minute).
3. Status commands: the resource asks for all its jobs in one ARC_JOB_STATUS_ALL per poll.

The arcsub jobs are cleaned from the CE afterwards (by their ids).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from htgrid.client.x509 import make_proxy
from htgrid.grid import GridManager, GridManagerConfig
from htgrid.queue import Identity, JobQueue, JobStatus
from htgrid.submit import SubmitDescription

ME = Identity("root")
PKI = Path(os.environ.get("HTGRID_REALGRID_DIR", "/var/tmp/htgrid-realgrid")) / "pki"
CE = "https://localhost:443/arex"


def new_proxy(path: Path) -> Path:
    cert, key = (PKI / "user.pem").read_bytes(), (PKI / "user.key").read_bytes()
    path.write_bytes(make_proxy(cert, key, lifetime=6 * 3600))
    path.chmod(0o600)
    return path


def arcsub_loop(count: int, work: Path, proxy: Path) -> tuple[float, list[str]]:
    """Seconds to submit `count` jobs with one arcsub each, and their ids."""
    xrsl = work / "job.xrsl"
    xrsl.write_text('&(executable="/bin/true")(jobname="arcsub-bench")\n')
    env = {
        **os.environ,
        "X509_USER_PROXY": str(proxy),
        "X509_CERT_DIR": "/etc/grid-security/certificates",
    }
    ids = []
    started = time.perf_counter()
    for _ in range(count):
        out = subprocess.run(
            ["arcsub", "-C", CE, "-T", "arcrest", "-j", str(work / "jobs.db"), str(xrsl)],
            capture_output=True, text=True, env=env, check=True,
        ).stdout  # fmt: skip
        ids += [line.rsplit("/", 1)[-1] for line in out.splitlines() if "jobid:" in line]
    return time.perf_counter() - started, ids


def clean(proxy: Path, ids: list[str]) -> None:
    context = ssl.create_default_context(capath="/etc/grid-security/certificates")
    context.load_cert_chain(proxy)
    for action in ("kill", "clean"):
        for start in range(0, len(ids), 100):
            body = json.dumps({"job": [{"id": i} for i in ids[start : start + 100]]}).encode()
            request = urllib.request.Request(
                f"{CE}/rest/1.0/jobs?action={action}",
                data=body,
                headers={"Accept": "application/json", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, context=context, timeout=60):
                pass


def queue_jobs(home: Path, work: Path, count: int, proxy: Path) -> JobQueue:
    text = (
        f"universe = grid\ngrid_resource = arc {CE}\nexecutable = /bin/true\n"
        f"transfer_executable = false\nx509userproxy = {proxy}\nqueue {count}\n"
    )
    queue = JobQueue.open(home / "spool", fsync=False)
    desc = SubmitDescription.from_text(text, cwd=str(work))
    with queue.transaction(ME) as tx:
        cluster = tx.new_cluster()
        jobs = list(desc.jobs(cluster, owner="root", qdate=int(time.time())))
        for job in jobs:
            job.ad["Owner"] = "root"
        tx.set_cluster_ad(cluster, jobs[0].ad)
        for job in jobs:
            tx.new_proc(cluster, job.ad)
    return queue


async def grid_manager(home: Path, queue: JobQueue, count: int) -> dict[str, float]:
    (home / "htgrid.conf").write_text("ALLOW_ROOT_JOBS = true\n")
    config = GridManagerConfig(poll_interval=10.0, feed_interval=0.2, fsync=False)
    manager = GridManager(home, config=config)
    stop = asyncio.Event()
    started = time.perf_counter()
    task = asyncio.create_task(manager.run(stop))
    figures: dict[str, float] = {}
    try:
        while True:
            ads = queue.query("true")
            submitted = sum(1 for ad in ads if str(ad.get("GridJobId", "")).count(" ") == 2)
            if "submit" not in figures and submitted == count:
                figures["submit"] = time.perf_counter() - started
            if not ads and queue.history("true"):
                figures["done"] = time.perf_counter() - started
                break
            await asyncio.sleep(0.2)
        for resource in manager.resources.values():
            stats = resource.stats
            figures["polls"] = stats.polls
            figures["status_commands"] = stats.status_commands
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
    history = queue.history("true")
    figures["completed"] = sum(1 for ad in history if ad.get("JobStatus") == JobStatus.COMPLETED)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="arc-bench-") as tmp:
        root = Path(tmp)
        proxy = new_proxy(root / "x509up")
        (root / "loop").mkdir()
        loop_s, ids = arcsub_loop(args.jobs, root / "loop", proxy)
        print(f"arcsub loop: {args.jobs} jobs in {loop_s:.1f} s ({args.jobs / loop_s:.1f}/s)")
        clean(proxy, ids)
        home, work = root / "home", root / "work"
        work.mkdir(parents=True)
        queue = queue_jobs(home, work, args.jobs, proxy)
        figures = asyncio.run(grid_manager(home, queue, args.jobs))
        queue.close()
        gm = figures["submit"]
        print(
            f"grid manager: {args.jobs} jobs submitted in {gm:.1f} s ({args.jobs / gm:.1f}/s), "
            f"ratio to the loop {gm / loop_s:.2f}; all completed and cleaned after "
            f"{figures['done']:.1f} s ({int(figures['completed'])} completed)"
        )
        if "polls" in figures:
            print(
                f"status: {int(figures['status_commands'])} ARC_JOB_STATUS_ALL for "
                f"{int(figures['polls'])} polls"
            )


if __name__ == "__main__":
    main()
