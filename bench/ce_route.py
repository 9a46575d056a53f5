"""Jobs sent by HTCondor-C into a CE and routed to a real Slurm, against a plain loop of
sbatch for the same number of jobs in the same run.

    python bench/ce_route.py [--jobs 10000] [--poll 2]

1. The loop: one `sbatch` per job (a script each, as the batch GAHP writes one), timed;
   the jobs are then cancelled.
2. The CE: a submitter pool and a CE pool on this machine, as tests/ce builds them (the
   CE with HTCondor-CE's defaults, its route `batch slurm`, MaxIdleJobs raised to the
   number of jobs as a site sending that many would). One `htgrid submit` of N grid jobs
   (`grid_resource = condor CE-schedd CE-pool`) on the submitter, timed from the submit
   until every job's routed copy on the CE has its Slurm id (the submitter's grid
   manager, HTCondor-C to the CE, the CE's job router and its grid manager's batch GAHP:
   every hop). The CE's queue is read every --poll seconds, beside its daemon.
   Target: CE / loop <= 1.3.
3. The CE's resident memory per job (its daemons: master+schedd, router, grid manager),
   once all N are in Slurm.

The jobs sleep (they stay queued on a small Slurm) and are cancelled afterwards by their
Slurm ids: only this run's jobs are touched. Needs Slurm up (`bash .ci/slurm-up.sh`) and
root (the CE runs the jobs as their owner).
"""

from __future__ import annotations

import argparse
import getpass
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from htgrid.grid.batch import BatchJobId
from htgrid.queue import JobQueue
from htgrid.router import CE_DEFAULTS, ce_route
from htgrid.testing import PersonalPool, run_cli

TARGET = 1.3
CE_NAME = "ce@htgrid-ce.bench"


def cancel(ids: list[str]) -> None:
    for start in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[start : start + 500]], check=False)


def sbatch_loop(count: int, work: Path, prefix: str) -> float:
    """Seconds to submit `count` jobs with one sbatch each (then cancelled)."""
    ids: list[str] = []
    started = time.perf_counter()
    for i in range(count):
        script = work / f"job{i}.sh"
        script.write_text("#!/bin/sh\nexec /bin/sleep 600\n")
        done = subprocess.run(
            [
                "sbatch", "--parsable", f"--job-name={prefix}{i}", f"--chdir={work}",
                "--output=/dev/null", "--error=/dev/null", "--time=10", "--mem=100M",
                str(script),
            ],
            check=True,
            capture_output=True,
            text=True,
        )  # fmt: skip
        ids.append(done.stdout.strip().split(";")[0])
    took = time.perf_counter() - started
    cancel(ids)
    settle(prefix)
    return took


def settle(prefix: str, deadline: float = 600.0) -> None:
    """Wait until the loop's cancelled jobs have left Slurm: slurmctld purges them all
    at once (MinJobAge), which stalled it for ~40 s in the middle of the CE's run."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        done = subprocess.run(
            ["squeue", "-h", "-t", "all", "-o", "%j"], capture_output=True, text=True, check=False
        )
        if done.returncode == 0 and not any(
            line.startswith(prefix) for line in done.stdout.splitlines()
        ):
            return
        time.sleep(2)
    print(f"   (the loop's jobs still in Slurm after {deadline:.0f} s)")


def pools(root: Path, count: int) -> tuple[PersonalPool, PersonalPool]:
    ce = PersonalPool(
        root / "ce",
        periodic_interval=5.0,
        daemons=("MASTER", "SCHEDD", "COLLECTOR", "GRIDMANAGER", "JOB_ROUTER"),
        config={
            "TRUST_DOMAIN": "htgrid-ce-bench",
            "SCHEDD_NAME": CE_NAME,
            "GRIDMANAGER_JOB_PROBE_INTERVAL": 5,
            "JOB_ROUTER_POLLING_PERIOD": 2,
        },
    )
    with (ce.home / "htgrid.conf").open("a") as f:
        f.write(CE_DEFAULTS + ce_route("slurm"))
        f.write(f"JOB_ROUTER_DEFAULT_MAX_IDLE_JOBS_PER_ROUTE = {count}\n")
        f.write(f"JOB_ROUTER_DEFAULT_MAX_JOBS_PER_ROUTE = {count}\n")
        f.write(f"GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE = {count}\n")
    sub = PersonalPool(
        root / "submit",
        periodic_interval=5.0,
        daemons=("MASTER", "SCHEDD", "GRIDMANAGER"),
        config={
            "TRUST_DOMAIN": "htgrid-submit-bench",
            "SCHEDD_NAME": "submit@htgrid-ce.bench",
            "GRIDMANAGER_JOB_PROBE_INTERVAL": 5,
            "GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE": count,
        },
    )
    return sub, ce


def in_slurm(queue: JobQueue) -> tuple[int, int, list[str]]:
    """The CE's jobs arrived, those routed, and the Slurm ids of the routed ones that
    have one (its queue read beside it): where the time goes, hop by hop."""
    ids = []
    arrived = routed = 0
    for ad in queue.query(None, ["GridJobId", "RoutedFromJobId"]):
        if ad.get("RoutedFromJobId") is None:
            arrived += 1
            continue
        routed += 1
        parsed = BatchJobId.parse(ad.get("GridJobId"))
        if parsed is not None and parsed.blah_id is not None:
            ids.append(parsed.blah_id.rsplit("/", 1)[-1])
    return arrived, routed, ids


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def through_ce(root: Path, count: int, poll: float) -> tuple[float, float]:
    sub, ce = pools(root, count)
    work = root / "work"
    work.mkdir()
    (work / "job.sub").write_text(
        "universe = grid\n"
        f"grid_resource = condor {CE_NAME} $(CE_POOL)\n"
        "executable = /bin/sleep\narguments = 600\ntransfer_executable = false\n"
        "+maxWallTime = 10\n+maxMemory = 100\n"
        f"initialdir = {work}\nqueue {count}\n"
    )
    with ce:
        sub.trust(ce, user=getpass.getuser())
        text = (work / "job.sub").read_text().replace("$(CE_POOL)", ce.collector)
        (work / "job.sub").write_text(text)
        with sub:
            started = time.perf_counter()
            status, _, err = run_cli(sub.home, "submit", str(work / "job.sub"))
            if status != 0:
                raise SystemExit(f"submit failed: {err}")
            seen = 0
            ids: list[str] = []
            queue = JobQueue.open(ce.config.spool, check=False)
            while seen < count:
                time.sleep(poll)
                arrived, routed, ids = in_slurm(queue)
                if len(ids) != seen or routed < count:
                    seen = len(ids)
                    print(
                        f"  {time.perf_counter() - started:7.1f} s: {arrived} at the CE, "
                        f"{routed} routed, {seen} in Slurm"
                    )
            took = time.perf_counter() - started
            pids = [
                p for p in (ce.pid, ce.child_pid("job_router"), ce.child_pid("gridmanager")) if p
            ]
            per_job = rss_kib(pids) / count
            cancel(ids)
            queue.close()
            return took, per_job


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between progress reads")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if os.geteuid() != 0:
        print("needs root (the CE runs each job as its owner)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ce-route-", dir="/var/tmp") as tmp:
        root = Path(tmp)
        loop_dir = root / "loop"
        loop_dir.mkdir()
        prefix = f"cebench{uuid.uuid4().hex[:6]}_"
        print(f"1. sbatch loop of {args.jobs} jobs...")
        loop = sbatch_loop(args.jobs, loop_dir, prefix)
        print(f"   {loop:.1f} s ({args.jobs / loop:.0f} jobs/s)")
        print(f"2. {args.jobs} jobs submitter -> HTCondor-C -> CE -> router -> Slurm...")
        ce, per_job = through_ce(root, args.jobs, args.poll)
        print(f"   {ce:.1f} s ({args.jobs / ce:.0f} jobs/s)")
        ratio = ce / loop
        print(f"CE / sbatch loop = {ratio:.2f} (target <= {TARGET})")
        print(f"3. the CE's resident memory per job: {per_job:.1f} KiB")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
