"""One execute node's own CPU a short job, driven over its Unix socket as a schedd does.

    python bench/startd_jobs.py [--jobs 1000] [--claims 4] [--reference SRC] [--rounds 2]

An execute node (its own process, no collector to reach) takes --claims claims, each
running `/bin/true` jobs back to back with `should_transfer_files = YES`: the input tar
with each activation, the next job's activation reusing the claim (`after`), each end
waited for with the claim's long poll. Printed: the node's user and system CPU a job, from
/proc, which the machine's load moves less than the wall time. With --reference, a node
of another source tree (e.g. /work/main/src) runs the same jobs, alternating with this
one, --rounds times each: the ratio of their CPU a job (this / reference).

remote_nodes.py measures the nodes among 20, with TLS, their collector updates and the
schedd's own pace; this measures what a node does for a job and nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import io
import os
import pwd
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.startd import ClaimState, Resources, StartdClient, StartdConfig, input_entries, pack
from htgrid.submit import SubmitDescription

_SUBMIT = (
    "universe = vanilla\nexecutable = /bin/true\nshould_transfer_files = YES\n"
    "when_to_transfer_output = ON_EXIT\noutput = out\nrequest_memory = 100\n"
    "request_disk = 1000\nqueue 1\n"
)


def serve(home: Path) -> None:
    """The node: a fixed machine of 8 cpus, until SIGTERM."""
    from htgrid._gc import tune_gc
    from htgrid.classad import preload_functions
    from htgrid.pool import configure_logging
    from htgrid.startd._daemon import Startd
    from htgrid.startd._machine import MachineInfo

    configure_logging()
    preload_functions()
    tune_gc()
    have = Resources(8, 8000, 10_000_000)
    machine = MachineInfo("node.bench", "X86_64", "LINUX", "Linux", 1, 100, "Linux", have, have)
    config = StartdConfig.load(home)
    asyncio.run(Startd(config, pool="127.0.0.1:1", machine=machine).run())


def cpu(pid: int) -> tuple[float, float]:
    """The process's user and system CPU time so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


async def drive(socket: Path, base: ClassAd, jobs: int, claims: int) -> None:
    """`jobs` jobs on `claims` claims, each claim's back to back."""
    left = jobs

    async def claim(client: StartdClient, k: int) -> None:
        nonlocal left
        cid, after = secrets.token_urlsafe(24), None
        while left > 0:
            left -= 1
            ad = copy.copy(base)
            ad["ClusterId"], ad["ProcId"] = 1000 + left, k
            if after is None:
                await client.request_claim(cid, ad, "schedd@bench", 600)
            tar = io.BytesIO()
            pack(input_entries(ad), tar, dereference=True)
            status = await client.activate(cid, ad, tar.getvalue(), after=after)
            while status.state is not ClaimState.ENDED:
                status = await client.status(cid, wait=10, version=status.version)
            if status.outcome is None or status.outcome.exit_code != 0:
                raise RuntimeError(f"job {ad['ClusterId']}.{k} failed: {status}")
            after = f"{ad['ClusterId']}.{k}"
        await client.release(cid)

    async with StartdClient(socket) as client:
        await asyncio.gather(*(claim(client, k) for k in range(claims)))


def run(src: str | None, root: Path, base: ClassAd, jobs: int, claims: int) -> tuple[float, ...]:
    """The node's wall time, user and system CPU a job (ms), its code from `src`."""
    home = root / "home"
    home.mkdir(parents=True)
    (home / "htgrid.conf").write_text("TRUST_DOMAIN = bench\nALLOW_ROOT_JOBS = true\n")
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    log = (root / "node.log").open("w")
    node = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(home)], env=env, stdout=log, stderr=log
    )
    try:
        socket = StartdConfig.load(home).socket
        deadline = time.monotonic() + 60
        while not socket.exists():
            if node.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the node did not start: see {root / 'node.log'}")
            time.sleep(0.05)
        asyncio.run(drive(socket, base, 2 * claims, claims))  # warm-up
        user0, sys0 = cpu(node.pid)
        start = time.perf_counter()
        asyncio.run(drive(socket, base, jobs, claims))
        wall = time.perf_counter() - start
        user1, sys1 = cpu(node.pid)
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait()
        log.close()
    per = 1000 / jobs
    return wall, (user1 - user0) * per, (sys1 - sys0) * per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--claims", type=int, default=4)
    parser.add_argument("--reference", metavar="SRC", help="another tree's src, run alternately")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve", metavar="HOME", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve))
        return
    owner = pwd.getpwuid(os.geteuid()).pw_name
    with tempfile.TemporaryDirectory(prefix="htgrid-startd-bench-") as tmp:
        root = Path(tmp)
        (root / "iwd").mkdir()
        desc = SubmitDescription.from_text(_SUBMIT, cwd=str(root / "iwd"))
        base = desc.jobs(1, owner=owner, qdate=int(time.time()))[0].ad
        base["Owner"], base["User"] = owner, f"{owner}@bench"
        sides = [("this", None)] + ([("reference", args.reference)] if args.reference else [])
        totals: dict[str, list[float]] = {name: [] for name, _ in sides}
        for n in range(args.rounds):
            for name, src in sides if n % 2 == 0 else sides[::-1]:
                wall, user, system = run(src, root / f"{name}{n}", base, args.jobs, args.claims)
                totals[name].append(user + system)
                print(
                    f"{name:9} {args.jobs} jobs on {args.claims} claims: {wall:.2f} s; node CPU "
                    f"a job {user + system:.2f} ms (user {user:.2f}, system {system:.2f}); "
                    f"load {os.getloadavg()[0]:.1f}"
                )
        if args.reference:
            this, ref = min(totals["this"]), min(totals["reference"])
            print(f"node CPU a job, best of {args.rounds}: this / reference = {this / ref:.2f}")


if __name__ == "__main__":
    main()
