"""The grid manager on a real GRAM5 gatekeeper, against a loop of Globus's own
`globusrun -b` for the same jobs.

    python bench/gram_grid.py [--jobs 200]

Needs the gatekeeper of `.ci/gram-up.sh` (globus-gatekeeper, fork job manager, in the
network namespace htgrid-gram on 127.0.0.1:2119) and its test PKI; the GAHP and
globusrun run in the namespace. Each job is `/bin/true` with no files to move.

1. Submit time. A loop runs `globusrun -b` once per job (a gatekeeper request with a
   delegation, the job manager's answer); then the grid manager gets the same jobs from a
   fresh queue and is timed from its start until every job's contact is committed (GAHP
   start-up, the GASS server, two-phase requests, contact commits included; the commit
   signals follow).
2. End to end: the grid manager's jobs until every one has completed (COMMIT_REQUEST,
   status polls, DONE saved, COMMIT_END).
3. Status commands: GRAM has no bulk status; one GRAM_JOB_STATUS per job per poll.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from htgrid.client.x509 import make_proxy
from htgrid.grid import GRID_TYPES, GridManager, GridManagerConfig
from htgrid.grid.gram import gram_grid_type
from htgrid.queue import Identity, JobQueue, JobStatus
from htgrid.submit import SubmitDescription

ME = Identity("root")
PKI = Path(os.environ.get("HTGRID_REALGRID_DIR", "/var/tmp/htgrid-realgrid")) / "pki"
NETNS = os.environ.get("HTGRID_GRAM_NETNS", "htgrid-gram")
CONTACT = "localhost:2119/jobmanager-fork"
IN_NETNS = ("ip", "netns", "exec", NETNS, "env", "GLOBUS_HOSTNAME=localhost")
GAHP = (*IN_NETNS, sys.executable, "-m", "htgrid.cli", "gahp", "gram")


def new_proxy(path: Path) -> Path:
    cert, key = (PKI / "user.pem").read_bytes(), (PKI / "user.key").read_bytes()
    path.write_bytes(make_proxy(cert, key, lifetime=6 * 3600))
    path.chmod(0o600)
    return path


def globusrun_loop(count: int, proxy: Path) -> float:
    """Seconds to submit `count` jobs with one `globusrun -b` each."""
    env = {**os.environ, "X509_CERT_DIR": "/etc/grid-security/certificates"}
    for name in ("X509_USER_PROXY", "X509_USER_CERT", "X509_USER_KEY"):
        env[name] = str(proxy)
    started = time.perf_counter()
    for _ in range(count):
        subprocess.run(
            [*IN_NETNS, "globusrun", "-b", "-r", CONTACT, "&(executable=/bin/true)"],
            capture_output=True, env=env, check=True,
        )  # fmt: skip
    return time.perf_counter() - started


def queue_jobs(home: Path, work: Path, count: int, proxy: Path) -> JobQueue:
    text = (
        f"universe = grid\ngrid_resource = gt2 {CONTACT}\nexecutable = /bin/true\n"
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
    types = {**GRID_TYPES, "gt2": gram_grid_type(GAHP)}
    manager = GridManager(home, config=config, grid_types=types)
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
                figures.setdefault("submit", figures["done"])
                break
            await asyncio.sleep(0.2)
        for resource in manager.resources.values():
            figures["polls"] = resource.stats.polls
            figures["status_commands"] = resource.stats.status_commands
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
    history = queue.history("true")
    figures["completed"] = sum(1 for ad in history if ad.get("JobStatus") == JobStatus.COMPLETED)
    return figures


def stop_gass(home: Path) -> None:
    """The GASS server the grid manager's GAHP left up (it outlives the GAHP)."""
    for state in (home / "gram").glob("gass-*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            os.kill(int(json.loads(state.read_text())["pid"]), signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gram-bench-") as tmp:
        root = Path(tmp)
        proxy = new_proxy(root / "x509up")
        loop_s = globusrun_loop(args.jobs, proxy)
        print(f"globusrun -b loop: {args.jobs} jobs in {loop_s:.1f} s ({args.jobs / loop_s:.1f}/s)")
        home, work = root / "home", root / "work"
        work.mkdir(parents=True)
        queue = queue_jobs(home, work, args.jobs, proxy)
        try:
            figures = asyncio.run(grid_manager(home, queue, args.jobs))
        finally:
            queue.close()
            stop_gass(home)
        gm = figures["submit"]
        print(
            f"grid manager: {args.jobs} jobs submitted in {gm:.1f} s ({args.jobs / gm:.1f}/s), "
            f"ratio to the loop {gm / loop_s:.2f}; all completed after "
            f"{figures['done']:.1f} s ({int(figures['completed'])} completed)"
        )
        if "polls" in figures:
            print(
                f"status: {int(figures['status_commands'])} status rounds for "
                f"{int(figures['polls'])} polls (one GRAM_JOB_STATUS per job each)"
            )


if __name__ == "__main__":
    main()
