"""Jobs sent by HTCondor-C into a CE and routed to a real Slurm, against a plain loop of
sbatch for the same number of jobs in the same run.

    python bench/ce_route.py [--jobs 10000] [--pairs 3] [--poll 2]

--pairs pairs of runs, the loop first in odd pairs and the CE first in even ones, each
run into an empty Slurm: the jobs of the run before are cancelled, gone from squeue and
slurmctld quiet again before the next starts (`settle`). The ratio reported is the median
of the pairs' (each pair's two runs side by side in time, under the same load), with the
load average of each. Measures 3-5 are taken in the last pair's CE run.

1. The loop: one `sbatch` per job (a script each, as the batch GAHP writes one), timed.
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
4. Status requests per poll at the CE's last hop: every `squeue` the CE's batch GAHP runs
   goes through a shim on PATH that logs it and how it names the jobs; counted over
   --polls probe intervals once all N are in Slurm (all: one per poll, not per job).
5. Status lag: --lag-jobs short jobs sent the same way once Slurm is quiet again; the time
   from Slurm's change (seen by squeue every 0.25 s: running, then ended) to the same
   change of the source job on the submitter (its queue read every 0.25 s). Hops: Slurm
   -> the CE's grid manager (probe 5 s) -> the router (its polling period, 2 s) -> the
   submitter's grid manager over HTCondor-C (probe 5 s). Target: at most two poll
   intervals per hop, 24 s.

The jobs sleep (they stay queued on a small Slurm) and are cancelled afterwards by their
Slurm ids: only this run's jobs are touched. Needs Slurm up (`bash .ci/slurm-up.sh`) and
root (the CE runs the jobs as their owner).
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.grid.batch import BatchJobId
from htgrid.queue import JobQueue
from htgrid.router import CE_DEFAULTS, ce_route
from htgrid.testing import PersonalPool, run_cli

TARGET = 1.3
CE_NAME = "ce@htgrid-ce.bench"
PROBE = 5  # GRIDMANAGER_JOB_PROBE_INTERVAL of both pools
ROUTER_PERIOD = 2  # JOB_ROUTER_POLLING_PERIOD
SHIM = """#!/bin/sh
ids=all
for a in "$@"; do case "$a" in [0-9]*) ids=$(echo "$a" | tr ',' '\\n' | wc -l);; esac; done
echo "$(date +%s.%N) $ids" >> {log}
exec {real} "$@"
"""


def squeue_shim(root: Path) -> Path:
    """A directory whose `squeue` logs each call (time, ids named) to the returned file."""
    shim = root / "shim"
    shim.mkdir()
    log = root / "squeue.calls"
    real = shutil.which("squeue") or "/usr/bin/squeue"
    (shim / "squeue").write_text(SHIM.format(log=log, real=real))
    (shim / "squeue").chmod(0o755)
    os.environ["PATH"] = f"{shim}:{os.environ['PATH']}"
    return log


def squeue_calls(log: Path, since: float, until: float) -> list[str]:
    """The ids column of the calls logged between two times."""
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return []
    return [line.split()[1] for line in lines if since <= float(line.split()[0]) < until]


def cancel(ids: list[str]) -> None:
    for start in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[start : start + 500]], check=False)


def sbatch_loop(count: int, work: Path, prefix: str, ids: list[str]) -> float:
    """Seconds to submit `count` jobs with one sbatch each (their ids added to `ids`)."""
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
    return time.perf_counter() - started


#: PERIODIC_EXPR_INTERVAL, HTCondor's default: at 5 s, as this bench had it, each of the
#: CE's schedd, router and grid manager read every one of its 10,000 jobs every 5 s.
PERIODIC = 60.0


def pools(root: Path, count: int) -> tuple[PersonalPool, PersonalPool]:
    ce = PersonalPool(
        root / "ce",
        periodic_interval=PERIODIC,
        daemons=("MASTER", "SCHEDD", "COLLECTOR", "GRIDMANAGER", "JOB_ROUTER"),
        config={
            "TRUST_DOMAIN": "htgrid-ce-bench",
            "SCHEDD_NAME": CE_NAME,
            "GRIDMANAGER_JOB_PROBE_INTERVAL": PROBE,
            "JOB_ROUTER_POLLING_PERIOD": ROUTER_PERIOD,
        },
    )
    with (ce.home / "htgrid.conf").open("a") as f:
        f.write(CE_DEFAULTS + ce_route("slurm"))
        f.write(f"JOB_ROUTER_DEFAULT_MAX_IDLE_JOBS_PER_ROUTE = {count}\n")
        f.write(f"JOB_ROUTER_DEFAULT_MAX_JOBS_PER_ROUTE = {count}\n")
        f.write(f"GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE = {count}\n")
    sub = PersonalPool(
        root / "submit",
        periodic_interval=PERIODIC,
        daemons=("MASTER", "SCHEDD", "GRIDMANAGER"),
        config={
            "TRUST_DOMAIN": "htgrid-submit-bench",
            "SCHEDD_NAME": "submit@htgrid-ce.bench",
            "GRIDMANAGER_JOB_PROBE_INTERVAL": PROBE,
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


def job_file(work: Path, ce: PersonalPool, count: int, seconds: int) -> Path:
    path = work / f"job{count}x{seconds}.sub"
    path.write_text(
        "universe = grid\n"
        f"grid_resource = condor {CE_NAME} {ce.collector}\n"
        f"executable = /bin/sleep\narguments = {seconds}\ntransfer_executable = false\n"
        "+maxWallTime = 10\n+maxMemory = 100\n"
        f"initialdir = {work}\nqueue {count}\n"
    )
    return path


def submit(sub: PersonalPool, path: Path) -> None:
    status, _, err = run_cli(sub.home, "submit", str(path))
    if status != 0:
        raise SystemExit(f"submit failed: {err}")


def through_ce(
    root: Path, count: int, poll: float, polls: int, lag_jobs: int
) -> tuple[float, float, list[str], list[tuple[float, float]]]:
    """Seconds until all `count` are in Slurm; the CE's RSS per job; the squeue calls
    (the ids each named) over `polls` probe intervals; (running, ended) lags, measured
    once the CE's jobs are cancelled and gone. Its jobs are all gone when it returns."""
    calls_log = squeue_shim(root)
    sub, ce = pools(root, count)
    work = root / "work"
    work.mkdir()
    ids: list[str] = []
    try:
        with ce:
            sub.trust(ce, user=getpass.getuser())
            with sub:
                return _through(sub, ce, work, count, poll, polls, lag_jobs, ids, calls_log)
    finally:
        # The pools are down: their jobs still in Slurm (routed again after a cancel,
        # say) are in the CE's queue.
        queue = JobQueue.open(ce.config.spool, check=False)
        ids += in_slurm(queue)[2]
        queue.close()
        cancel(ids)
        settle(ids)


def _through(
    sub: PersonalPool,
    ce: PersonalPool,
    work: Path,
    count: int,
    poll: float,
    polls: int,
    lag_jobs: int,
    ids: list[str],
    calls_log: Path,
) -> tuple[float, float, list[str], list[tuple[float, float]]]:
    path = job_file(work, ce, count, 600)
    started = time.perf_counter()
    submit(sub, path)
    seen = 0
    queue = JobQueue.open(ce.config.spool, check=False)
    while seen < count:
        time.sleep(poll)
        arrived, routed, ids[:] = in_slurm(queue)
        if len(ids) != seen or routed < count:
            seen = len(ids)
            print(
                f"  {time.perf_counter() - started:7.1f} s: {arrived} at the CE, "
                f"{routed} routed, {seen} in Slurm"
            )
    took = time.perf_counter() - started
    pids = [p for p in (ce.pid, ce.child_pid("job_router"), ce.child_pid("gridmanager")) if p]
    per_job = rss_kib(pids) / count
    calls: list[str] = []
    if polls:
        print(f"   counting squeue calls over {polls} probe intervals...")
        since = time.time()
        time.sleep(polls * PROBE)
        calls = squeue_calls(calls_log, since, time.time())
    cancel(ids)
    # The cancelled jobs' sources go back to be routed again: let them go.
    run_cli(sub.home, "rm", "-all")
    if lag_jobs:
        settle(ids)
    lags = status_lag(sub, ce, queue, work, lag_jobs) if lag_jobs else []
    queue.close()
    return took, per_job, calls, lags


def settle(ids: list[str], deadline: float = 600.0, quiet: float = 20.0) -> None:
    """Wait until none of `ids` is in Slurm any more (cancelled and purged), and then
    until slurmctld has answered every probe (an squeue, a test submit) promptly for
    `quiet` seconds: it stalled for 35-40 s purging 10,000 cancelled jobs after they had
    left squeue, and a run that started then failed its submits."""
    wanted = set(ids)
    end = time.monotonic() + deadline
    while wanted and time.monotonic() < end:
        done = subprocess.run(
            ["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True, check=False
        )
        if done.returncode == 0 and not wanted.intersection(done.stdout.split()):
            break
        time.sleep(2)
    probe = ["sbatch", "--test-only", "--wrap=true", "--output=/dev/null"]
    calm_since = time.monotonic()
    while time.monotonic() < end and time.monotonic() - calm_since < quiet:
        started = time.monotonic()
        answers = [
            subprocess.run(argv, capture_output=True, check=False, timeout=60).returncode
            for argv in (["squeue", "-h", "-j", "1"], probe)
        ]
        if answers[1] != 0 or time.monotonic() - started > 5.0:
            calm_since = time.monotonic()
        time.sleep(1)


def slurm_states(ids: list[str]) -> dict[str, str]:
    done = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ",".join(ids)],
        capture_output=True,
        text=True,
        check=False,
    )
    states = dict(line.split()[:2] for line in done.stdout.splitlines() if line.strip())
    return {i: states.get(i, "GONE") for i in ids}


def status_lag(
    sub: PersonalPool, ce: PersonalPool, ce_queue: JobQueue, work: Path, jobs: int
) -> list[tuple[float, float]]:
    """Per job: (Slurm running -> the submitter's job Running, Slurm ended -> the
    submitter's job Completed), in seconds, both sides seen every 0.25 s. A submitter
    job's Slurm job: its GridJobId names the CE's source job, whose routed copy's
    GridJobId has the Slurm id."""
    sub_queue = JobQueue.open(sub.config.spool, check=False)
    before = {_jid(ad) for ad in sub_queue.query(None, [])}
    submit(sub, job_file(work, ce, jobs, 15))
    mine = [_jid(ad) for ad in sub_queue.query(None, []) if _jid(ad) not in before]
    seen: dict[tuple[str, str], float] = {}
    ce_source: dict[str, str] = {}  # submitter job -> the CE's source job
    end = time.monotonic() + 600
    while time.monotonic() < end and len(seen) < 4 * len(mine):
        now = time.monotonic()
        for job in mine:
            try:
                ad = sub_queue.get(job)
            except HTGridError:  # left the queue: completed
                seen.setdefault((job, "running"), now)
                seen.setdefault((job, "ended"), now)
                continue
            grid = str(ad.get("GridJobId") or "").split()
            if len(grid) >= 4:
                ce_source[job] = grid[-1]
            if ad["JobStatus"] in (2, 4):
                seen.setdefault((job, "running"), now)
            if ad["JobStatus"] == 4:
                seen.setdefault((job, "ended"), now)
        slurm_of: dict[str, str] = {}  # the CE's source job -> Slurm id
        for ad in ce_queue.query(
            "RoutedFromJobId isnt undefined", ["GridJobId", "RoutedFromJobId"]
        ):
            parsed = BatchJobId.parse(ad.get("GridJobId"))
            if parsed is not None and parsed.blah_id is not None:
                slurm_of[str(ad["RoutedFromJobId"])] = parsed.blah_id.rsplit("/", 1)[-1]
        ids = {job: slurm_of[src] for job, src in ce_source.items() if src in slurm_of}
        states = slurm_states(list(ids.values())) if ids else {}
        for job, sid in ids.items():
            state = states.get(sid, "")
            if state in ("RUNNING", "COMPLETED", "GONE"):
                seen.setdefault((job, "slurm running"), now)
            if state in ("COMPLETED", "GONE"):
                seen.setdefault((job, "slurm ended"), now)
        time.sleep(0.25)
    sub_queue.close()
    lags = []
    for job in mine:
        try:
            lags.append(
                (
                    seen[(job, "running")] - seen[(job, "slurm running")],
                    seen[(job, "ended")] - seen[(job, "slurm ended")],
                )
            )
        except KeyError:
            print(f"   job {job}: not seen through (lag not measured)")
    return lags


def _jid(ad: ClassAd) -> str:
    return f"{ad['ClusterId']}.{ad['ProcId']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs (median kept)")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between progress reads")
    parser.add_argument("--polls", type=int, default=4, help="probe intervals of squeue counts")
    parser.add_argument("--lag-jobs", type=int, default=2, help="jobs of the status lag run")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if os.geteuid() != 0:
        print("needs root (the CE runs each job as its owner)", file=sys.stderr)
        return 2
    pairs: list[tuple[float, float, str]] = []
    per_job, calls, lags = 0.0, [], []
    with tempfile.TemporaryDirectory(prefix="ce-route-", dir="/var/tmp") as tmp:
        settle([])
        for pair in range(1, args.pairs + 1):
            last = pair == args.pairs
            root = Path(tmp) / f"pair{pair}"
            root.mkdir()
            times: dict[str, float] = {}
            loads: list[float] = []
            for side in ("loop", "ce") if pair % 2 else ("ce", "loop"):
                loads.append(os.getloadavg()[0])
                if side == "loop":
                    print(f"{pair}.1 sbatch loop of {args.jobs} jobs...")
                    times[side] = loop_run(root, args.jobs)
                    print(f"   {times[side]:.1f} s ({args.jobs / times[side]:.0f} jobs/s)")
                    continue
                print(
                    f"{pair}.2 {args.jobs} jobs submitter -> HTCondor-C -> CE -> router -> Slurm..."
                )
                took, per_job, calls, lags = through_ce(
                    root,
                    args.jobs,
                    args.poll,
                    args.polls if last else 0,
                    args.lag_jobs if last else 0,
                )
                times[side] = took
                print(f"   {took:.1f} s ({args.jobs / took:.0f} jobs/s)")
            load = f"{min(loads):.0f}-{max(*loads, os.getloadavg()[0]):.0f}"
            pairs.append((times["loop"], times["ce"], load))
            print(
                f"   pair {pair}: CE / sbatch loop = {times['ce'] / times['loop']:.2f} (load {load})"
            )
    print(f"{args.jobs} jobs, {len(pairs)} pairs (sbatch loop, through the CE, ratio, load):")
    for loop, ce, load in pairs:
        print(f"   {loop:7.1f} s {ce:7.1f} s {ce / loop:6.2f}   {load}")
    ratio = statistics.median(ce / loop for loop, ce, _ in pairs)
    print(f"CE / sbatch loop = {ratio:.2f}, the median of the pairs' (target <= {TARGET})")
    print(f"3. the CE's resident memory per job: {per_job:.1f} KiB")
    if args.polls:  # --polls 0: not counted
        print(
            f"4. squeue per poll ({PROBE} s) with {args.jobs} jobs: "
            f"{len(calls) / args.polls:.1f} (ids named by each: {', '.join(calls) or '-'})"
        )
    for running, ended in lags:
        print(f"5. status lag: running {running:.1f} s, ended {ended:.1f} s (target <= 24)")
    return 0 if ratio <= TARGET else 1


def loop_run(root: Path, count: int) -> float:
    """The sbatch loop's seconds; its jobs cancelled and gone when it returns."""
    work = root / "loop"
    work.mkdir()
    ids: list[str] = []
    try:
        return sbatch_loop(count, work, f"cebench{uuid.uuid4().hex[:6]}_", ids)
    finally:
        cancel(ids)
        settle(ids)


if __name__ == "__main__":
    sys.exit(main())
