"""Big clusters through `htgrid submit` against htcondor 24's Submit.jobs(), in one run.

    python bench/submit_scale.py [--procs 100000] [--items 10000] [--repeat 1]
                                 [--materialize 0] [--factory-procs 1000000]
                                 [--factory-until 0] [--item-factory 0] [--skip-submit]
                                 [--oracle .venv-oracle24/bin/python]

For each description, `htgrid submit FILE` (a process of its own, against a personal
pool) and htcondor 24's Submit(FILE).jobs(), which makes the same ads in the same
process (the time of the jobs() loop alone, not its interpreter's start):

1. `hold = true`, `queue N` (nothing varies from proc to proc);
2. `arguments = $(Item) $(Process)`, `queue 10 Item from FILE` of N/10 lines.

Printed: wall times and their ratio (target <= 1.0), the client's peak RSS (target
< 100 MB) and the daemon's (VmHWM) before and after. Then `htgrid q -totals` and
`htgrid q` (the batch summary) on the queue so filled (targets 0.3 s and 1 s), and, with
--materialize M, a cluster of --factory-procs procs with `max_materialize = M` run through
(`universe = local`, `/bin/true`): the daemon's RSS as they go (--factory-until N: until
N procs are made). --item-factory N: a factory of `queue Item from` a file of N lines.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from htgrid.testing import PersonalPool, wait_for

ROOT = Path(__file__).resolve().parents[1]
ORACLE_SCRIPT = """
import resource, sys, time, warnings
warnings.simplefilter("ignore")
import htcondor
sub = htcondor.Submit(open(sys.argv[1]).read())
start = time.perf_counter()
n = sum(1 for _ in sub.jobs(clusterid=1))
took = time.perf_counter() - start
print(n, took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _rss(pid: int, field: str) -> int:
    """A field of /proc/PID/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _htgrid(home: Path, *argv: str, cwd: Path) -> tuple[float, int, str]:
    """`htgrid ARGV` as its own process: wall seconds, peak RSS (KiB), stdout."""
    env = {**os.environ, "HTGRID_HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "htgrid", *argv], cwd=cwd, env=env, stdout=out, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)  # its own rusage: its peak RSS
        took = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"htgrid {' '.join(argv)} failed: {err.read().decode()[-2000:]}")
        return took, usage.ru_maxrss, out.read().decode()


def _oracle(python: str, path: Path) -> tuple[float, int]:
    out = subprocess.run(
        [python, "-c", ORACLE_SCRIPT, str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[1]), int(out[2])


def _case(name: str, text: str, pool: PersonalPool, work: Path, oracle: str) -> None:
    path = work / f"{name}.sub"
    path.write_text(text)
    before = _rss(pool.pid or 0, "VmRSS")
    took, peak, out = _htgrid(pool.home, "submit", str(path), cwd=work)
    daemon = _rss(pool.pid or 0, "VmHWM")
    count = out.strip().splitlines()[-1]
    oracle_took, oracle_peak = _oracle(oracle, path)
    print(
        f"{name}: {count}\n"
        f"  htgrid submit {took:6.2f} s, client peak {peak / 1024:5.0f} MB, daemon "
        f"{before / 1024:.0f} MB before, peak {daemon / 1024:.0f} MB\n"
        f"  htcondor 24 Submit.jobs() {oracle_took:6.2f} s ({oracle_peak / 1024:.0f} MB)"
        f"  ratio {took / oracle_took:.2f}"
    )


def _q(pool: PersonalPool, work: Path, repeat: int) -> None:
    for argv in (("q", "-totals"), ("q",), ("q", "-hold", "-totals")):
        best = min(_htgrid(pool.home, *argv, cwd=work)[0] for _ in range(repeat))
        print(f"htgrid {' '.join(argv)}: {best:.2f} s (best of {repeat})")
    best = min(_htgrid(pool.home, "--version", cwd=work)[0] for _ in range(repeat))
    print(f"  (htgrid --version, the interpreter's start and the CLI's imports: {best:.2f} s)")


def _materialize(pool: PersonalPool, work: Path, procs: int, limit: int, until: int) -> None:
    path = work / "factory.sub"
    path.write_text(
        f"universe = local\nexecutable = /bin/true\nmax_materialize = {limit}\nqueue {procs}\n"
    )
    before = _rss(pool.pid or 0, "VmRSS")
    took, peak, out = _htgrid(pool.home, "submit", str(path), cwd=work)
    cluster = int(out.split()[-1].rstrip("."))
    print(f"factory: {procs} procs, max_materialize = {limit}: submitted in {took:.2f} s")
    start = time.monotonic()
    samples = []
    with pool.client() as schedd:

        def done() -> bool:
            history = schedd.history(f"ClusterId == {cluster}", ["ProcId"], limit=1)
            left = schedd.query(f"ClusterId == {cluster}", ["ProcId"], limit=1)
            samples.append(_rss(pool.pid or 0, "VmRSS"))
            if len(samples) % 12 == 0:  # a line a minute
                made = [f.next_proc for f in schedd.summary(f"ClusterId == {cluster}")[2]]
                print(
                    f"  {time.monotonic() - start:5.0f} s: next proc {made[0] if made else 'done'}"
                    f", daemon RSS {samples[-1] / 1024:.0f} MB",
                    flush=True,
                )
                if made and made[0] >= until:
                    return True
            return bool(history) and not left

        wait_for(done, timeout=24 * 3600, interval=5.0, what="the factory to finish")
    print(
        f"  ran {time.monotonic() - start:.0f} s; daemon RSS {before / 1024:.0f} MB "
        f"before, {min(samples) / 1024:.0f}-{max(samples) / 1024:.0f} MB while they ran "
        f"(client peak {peak / 1024:.0f} MB)"
    )


def _item_factory(pool: PersonalPool, work: Path, lines: int, limit: int) -> None:
    """A factory of `queue Item from` a file of `lines` lines, per-proc arguments: the
    submit's time and the client's and daemon's peak RSS (the items are read, not held)."""
    items = work / "factory-items.txt"
    with items.open("w") as out:
        out.writelines(f"item{n}\n" for n in range(lines))
    path = work / "item-factory.sub"
    path.write_text(
        "universe = local\nexecutable = /bin/true\nhold = true\narguments = $(Item) $(Process)\n"
        f"max_materialize = {limit}\nqueue Item from {items}\n"
    )
    took, peak, out = _htgrid(pool.home, "submit", str(path), cwd=work)
    daemon = _rss(pool.pid or 0, "VmHWM")
    print(
        f"item factory: {out.strip().splitlines()[-1]} ({lines} lines, max_materialize = "
        f"{limit}): {took:.2f} s, client peak {peak / 1024:.0f} MB, daemon peak "
        f"{daemon / 1024:.0f} MB"
    )


def _submits(args: argparse.Namespace, work: Path) -> None:
    items = work / "items.txt"
    items.write_text("".join(f"item{n}\n" for n in range(args.items)))
    with PersonalPool(work / "pool") as pool:
        head = "universe = local\nexecutable = /bin/true\nhold = true\n"
        _case("same", f"{head}queue {args.procs}\n", pool, work, args.oracle)
        _case(
            "items",
            f"{head}arguments = $(Item) $(Process)\nqueue 10 Item from {items}\n",
            pool,
            work,
            args.oracle,
        )
        _q(pool, work, args.repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--materialize", type=int, default=0, help="max_materialize")
    parser.add_argument("--factory-procs", type=int, default=1_000_000)
    parser.add_argument(
        "--factory-until", type=int, default=0, help="stop once this many procs are made"
    )
    parser.add_argument("--skip-submit", action="store_true", help="only the factory run")
    parser.add_argument(
        "--item-factory", type=int, default=0, help="lines of a `queue Item from` factory"
    )
    parser.add_argument("--oracle", default=str(ROOT / ".venv-oracle24" / "bin" / "python"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="submit-scale-") as tmp:
        work = Path(tmp)
        if not args.skip_submit:
            _submits(args, work)
        if args.item_factory:
            with PersonalPool(work / "items") as pool:
                _item_factory(pool, work, args.item_factory, args.materialize or 1000)
        if args.materialize:
            with PersonalPool(work / "factory", max_local_jobs=50) as pool:
                until = args.factory_until or args.factory_procs
                _materialize(pool, work, args.factory_procs, args.materialize, until)


if __name__ == "__main__":
    main()
