"""Jobs on execute nodes of other "hosts" against the same jobs in the local universe.

    python bench/remote_nodes.py [--jobs 1000] [--nodes 20] [--cpus 10] [--hold 200]

One pool with no execute node of its own (a central manager) and --nodes execute nodes
joining it over TLS, each a process of its own (`htgrid startd -pool`) with its own home
and loopback address (127.0.0.2, .3, ...), --cpus slots each. In the same run:

1. --jobs short vanilla jobs (`/bin/true`) run on the nodes: wall time from `htgrid
   submit` to the last one in the history;
2. the same jobs with `universe = local` on the schedd's host (START_LOCAL_UNIVERSE_LIMIT
   set to the nodes' slot count, so both sides may run as many at once);
3. --hold jobs that wait on a file, all running on the nodes: the schedd's RSS before
   and while they run, over their count (HTCondor's user schedds are sized at ~1.5 MB
   per running job).

Printed: both wall times and their ratio remote / local (target <= 1.5), the CPU time the
schedd (and, for the remote jobs, all nodes together) spent per job, which the machine's
load moves less than the wall times, the context switches per job of their threads
alive at the end (each a hand-off between threads or a wake-up of a process: on this
host a cost the CPU times show and the profiles do not; the nodes' threads of ended
jobs are not counted), and the schedd's memory per running remote job (target < 1.5 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.net.security import SecurityConfig, ensure_pool_security, pinned_ssl_context
from htgrid.startd import TLS_CERTIFICATE, StartdClient, host_port_of
from htgrid.testing import PersonalPool, run_cli, wait_for
from htgrid.testing.node import CENTRAL_MANAGER, ExecuteNode

FAST: dict[str, object] = {
    "NEGOTIATOR_INTERVAL": 2,
    "NEGOTIATOR_MIN_INTERVAL": 0.1,
    "SCHEDD_INTERVAL": 1,
    "MASTER_BACKOFF_CONSTANT": 0.5,
}


def rss_mb(pid: int) -> float:
    """The process's resident set now, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int, stat: str | None = None) -> float:
    """The process's user + system CPU time so far, in seconds (of one thread's
    `stat` file, if given)."""
    fields = Path(stat or f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switches(pid: int) -> int:
    """The context switches (voluntary and not) of the process's threads alive now: a
    thread that ended took its count with it (Linux keeps no total of them for another
    process to read), so a process whose threads come and go (an execute node's, one for
    each job's run) shows fewer than it made."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        total += sum(int(n) for n in re.findall(r"ctxt_switches:\s+(\d+)", text))
    return total


def loop_seconds(pid: int) -> float:
    """The CPU time so far of the process's main thread (the daemon's event loop)."""
    return cpu_seconds(pid, f"/proc/{pid}/task/{pid}/stat")


def cycles(pool: PersonalPool) -> list[float]:
    """The seconds each negotiation cycle so far took, from the SchedLog."""
    log = (pool.home / "log" / "SchedLog").read_text()
    return [float(t) for t in re.findall(r" cycle \d+: .* in ([0-9.]+)s", log)]


def refused_claims(pool: PersonalPool) -> int:
    """The claims the nodes refused so far (each a job matched to a slot already taken:
    the negotiator over-matched), from the SchedLog."""
    return (pool.home / "log" / "SchedLog").read_text().count("did not take the claim")


def node_updates(nodes: list[ExecuteNode]) -> int:
    """The updates of their ads the collector took from all the nodes so far (each
    partitionable slot's UpdatesTotal: every update carries it)."""
    return sum(
        int(ad.get("UpdatesTotal", 0))
        for node in nodes
        for ad in node.slots()
        if ad.get("PartitionableSlot")
    )


def submit(pool: PersonalPool, work: Path, text: str) -> int:
    """`htgrid submit` of `text` from `work`; the cluster id."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.sub").write_text(text)
    here = os.getcwd()
    os.chdir(work)
    try:
        status, out, err = run_cli(pool.home, "submit", "job.sub")
    finally:
        os.chdir(here)
    if status != 0:
        raise RuntimeError(err)
    return int(out.strip().rsplit(" ", 1)[-1].rstrip("."))


def left(pool: PersonalPool, cluster: int) -> int:
    """How many of the cluster's jobs are still queued (a held one stops the bench)."""
    with pool.client() as schedd:
        batches, _, _ = schedd.summary(f"ClusterId == {cluster}")
        if any(b.counts.get(5) for b in batches):
            held = schedd.query(f"ClusterId == {cluster} && JobStatus == 5", ["HoldReason"])
            raise RuntimeError(f"job held: {held[0].get('HoldReason')}")
    return sum(b.jobs for b in batches)


def run_through(pool: PersonalPool, work: Path, universe: str, jobs: int) -> float:
    """Wall seconds from submit until all `jobs` have completed and left the queue."""
    text = (
        f"universe = {universe}\nexecutable = /bin/true\n"
        "should_transfer_files = YES\nwhen_to_transfer_output = ON_EXIT\n"
        f"output = out.$(Process)\nqueue {jobs}\n"
    )
    start = time.perf_counter()
    cluster = submit(pool, work, text)
    wait_for(lambda: left(pool, cluster) == 0, 3600, 0.2, f"{universe} jobs to finish")
    took = time.perf_counter() - start
    with pool.client() as schedd:
        done = schedd.history(f"ClusterId == {cluster} && JobStatus == 4", ["ProcId"])
    if len(done) != jobs:
        raise RuntimeError(f"{universe}: {len(done)} of {jobs} completed")
    return took


def node_requests(pool: PersonalPool, nodes: list[ExecuteNode]) -> tuple[int, int] | None:
    """The API requests all the nodes served so far, and the answers of node-wide
    watches among them (their health's counts; None from nodes that do not count them)."""
    security = ensure_pool_security(SecurityConfig.load(pool.home))
    identity = (security.server.cert, security.server.key)

    async def count(ad: ClassAd) -> tuple[int, int] | None:
        where = host_port_of(ad["MyAddress"])
        assert where is not None
        tls = pinned_ssl_context(ad[TLS_CERTIFICATE], identity)
        async with StartdClient.over_tls(where, tls) as client:
            health = await client.health()
        served, polls = health.get("requests"), health.get("polls")
        watches = polls.get("watch") if isinstance(polls, dict) else None
        if not isinstance(served, int) or not isinstance(watches, int):
            return None
        return served, watches

    ads = [next(a for a in node.slots() if a.get("PartitionableSlot")) for node in nodes]
    counts = [asyncio.run(count(ad)) for ad in ads]
    if any(c is None for c in counts):
        return None
    return sum(c[0] for c in counts if c), sum(c[1] for c in counts if c)


def memory_per_job(pool: PersonalPool, work: Path, count: int) -> tuple[float, float]:
    """The schedd's RSS (MB) before and while `count` remote jobs run."""
    # The nodes are "other hosts" only by address: the gate file is seen by all.
    gate = work / "gate"
    work.mkdir(parents=True, exist_ok=True)
    script = work / "wait.sh"
    script.write_text(f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.5; done\n")
    script.chmod(0o755)
    assert pool.pid is not None
    before = rss_mb(pool.pid)
    cluster = submit(
        pool,
        work,
        f"universe = vanilla\nexecutable = {script}\nshould_transfer_files = YES\nqueue {count}\n",
    )

    def running() -> bool:
        with pool.client() as schedd:
            return (
                len(schedd.query(f"ClusterId == {cluster} && JobStatus == 2", ["ProcId"])) == count
            )

    wait_for(running, 600, 0.5, f"{count} jobs running")
    time.sleep(5)  # let the shadows settle into their steady state
    during = rss_mb(pool.pid)
    gate.touch()
    wait_for(lambda: left(pool, cluster) == 0, 600, 0.5, "waiting jobs to finish")
    return before, during


def record(
    pid: int, path: str | None, *, gil: bool, rate: int = 100
) -> subprocess.Popen[bytes] | None:
    """py-spy recording `pid` (raw, `rate` samples a second; only the thread holding the
    GIL, if `gil`) into `path`, once attached; None without one."""
    if path is None:
        return None
    spy = subprocess.Popen(
        [
            "py-spy",
            "record",
            "-p",
            str(pid),
            "-r",
            str(rate),
            "-f",
            "raw",
            "-o",
            path,
            *(["--gil"] if gil else []),
        ]
    )
    time.sleep(1)  # attached before the first job
    return spy


def stop(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--cpus", type=int, default=10)
    parser.add_argument("--hold", type=int, default=200)
    parser.add_argument(
        "--py-spy",
        metavar="FILE",
        help="record the schedd with py-spy (raw) during the remote jobs",
    )
    parser.add_argument(
        "--py-spy-local",
        metavar="FILE",
        help="record the schedd with py-spy (raw) during the local-universe jobs",
    )
    parser.add_argument(
        "--py-spy-node",
        metavar="FILE",
        help="record the first node with py-spy (raw) during the remote jobs",
    )
    parser.add_argument(
        "--py-spy-gil",
        action="store_true",
        help="with --py-spy(-local, -node): sample only the thread holding the GIL",
    )
    parser.add_argument(
        "--py-spy-rate", type=int, default=100, help="py-spy's samples a second (100)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the remote jobs this many times (the schedd's RSS after each: a leak grows it)",
    )
    parser.add_argument(
        "--logs", metavar="DIR", help="keep a copy of the pool's and the nodes' logs in DIR"
    )
    args = parser.parse_args()
    slots = args.nodes * args.cpus
    with tempfile.TemporaryDirectory(prefix="htgrid-remote-bench-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        config = {**FAST, "START_LOCAL_UNIVERSE_LIMIT": slots}
        pool = stack.enter_context(
            PersonalPool(
                root / "pool",
                kill_grace=2,
                fsync=True,
                max_local_jobs=slots,
                daemons=CENTRAL_MANAGER,
                config=config,
            )
        )
        start = time.perf_counter()
        nodes = [
            stack.enter_context(
                ExecuteNode(
                    pool,
                    root / f"node{i}",
                    f"node{i}",
                    f"127.0.0.{i + 2}",
                    config={"NUM_CPUS": args.cpus, "MEMORY": 512 * args.cpus},
                )
            )
            for i in range(args.nodes)
        ]
        for node in nodes:
            node.joined()
        print(f"{args.nodes} nodes, {slots} slots joined in {time.perf_counter() - start:.1f} s")
        assert pool.pid is not None
        rss = [rss_mb(pool.pid)]
        pids = [node.process.pid for node in nodes if node.process is not None]
        schedd_0, nodes_0 = cpu_seconds(pool.pid), sum(map(cpu_seconds, pids))
        switched_0 = switches(pool.pid), sum(map(switches, pids))
        loop_0 = loop_seconds(pool.pid)
        requests_0 = node_requests(pool, nodes)
        cycles_0 = len(cycles(pool))
        refused_0, updates_0 = refused_claims(pool), node_updates(nodes)
        spy = record(pool.pid, args.py_spy, gil=args.py_spy_gil, rate=args.py_spy_rate)
        node_spy = record(pids[0], args.py_spy_node, gil=args.py_spy_gil, rate=args.py_spy_rate)
        remote = run_through(pool, root / "remote", "vanilla", args.jobs)
        rss.append(rss_mb(pool.pid))
        stop(spy)
        stop(node_spy)
        schedd_1, nodes_1 = cpu_seconds(pool.pid), sum(map(cpu_seconds, pids))
        switched_1 = switches(pool.pid), sum(map(switches, pids))
        loop_1 = loop_seconds(pool.pid)
        requests_1 = node_requests(pool, nodes)
        during = cycles(pool)[cycles_0:]
        refused, updates = refused_claims(pool) - refused_0, node_updates(nodes) - updates_0
        spy = record(pool.pid, args.py_spy_local, gil=args.py_spy_gil, rate=args.py_spy_rate)
        local = run_through(pool, root / "local", "local", args.jobs)
        stop(spy)
        schedd_2, loop_2 = cpu_seconds(pool.pid), loop_seconds(pool.pid)
        switched_2 = switches(pool.pid)
        for n in range(1, args.rounds):
            run_through(pool, root / f"remote{n}", "vanilla", args.jobs)
            rss.append(rss_mb(pool.pid))
        per = 1000 / args.jobs
        print(
            f"{args.jobs} jobs on {args.nodes} remote nodes: {remote:.1f} s; CPU a job: "
            f"schedd {(schedd_1 - schedd_0) * per:.1f} ms (its event loop "
            f"{(loop_1 - loop_0) * per:.1f}), nodes {(nodes_1 - nodes_0) * per:.1f} ms"
        )
        print(
            f"  {len(during)} negotiation cycles, {sum(during):.1f} s in all; {refused} claims "
            f"refused; {updates} updates of the nodes' ads ({updates / len(nodes):.1f} a node)"
        )
        print(
            f"  context switches a job: schedd {(switched_1[0] - switched_0[0]) / args.jobs:.1f}, "
            f"nodes {(switched_1[1] - switched_0[1]) / args.jobs:.1f}"
        )
        if requests_0 is not None and requests_1 is not None:
            served = requests_1[0] - requests_0[0] - len(nodes)  # less the counts' own
            watches = requests_1[1] - requests_0[1]
            print(
                f"  {served} requests to the nodes: {served / args.jobs:.2f} a job "
                f"({watches / args.jobs:.2f} the watches' answers)"
            )
        print(
            f"{args.jobs} jobs in the local universe:      {local:.1f} s; CPU a job: "
            f"schedd {(schedd_2 - schedd_1) * per:.1f} ms (its event loop "
            f"{(loop_2 - loop_1) * per:.1f}); context switches a job "
            f"{(switched_2 - switched_1[0]) / args.jobs:.1f}"
        )
        print(f"remote / local = {remote / local:.2f} (target <= 1.5)")
        shown = ", ".join(f"{mb:.1f}" for mb in rss[1:])
        print(f"schedd RSS {rss[0]:.1f} MB with the nodes joined; after each remote round: {shown}")
        before, during = memory_per_job(pool, root / "hold", min(args.hold, slots))
        count = min(args.hold, slots)
        per_job = (during - before) / count
        print(
            f"schedd RSS {before:.1f} MB idle, {during:.1f} MB with {count} remote jobs "
            f"running: {per_job * 1024:.0f} KB per running job (target < 1.5 MB); against "
            f"the RSS before any job ran: {(during - rss[0]) / count * 1024:.0f} KB"
        )
        if args.logs:
            shutil.copytree(pool.home / "log", Path(args.logs) / "pool", dirs_exist_ok=True)
            for node in nodes:
                shutil.copy(node.home / "startd.out", Path(args.logs) / f"{node.name}.out")


if __name__ == "__main__":
    main()
