"""Submitting N jobs through the Slurm back end, against a plain loop of `sbatch`.

    python bench/slurm_submit.py [--n 2000] [--concurrency 16]

Needs a running Slurm (.ci/slurm-up.sh). Jobs are submitted held (`--hold`) so that
running them does not disturb the timing; each pass cancels its jobs afterwards.

Prints, for each way of submitting, the wall time and the ratio to the plain loop
(target: the back end, one job at a time, within 1.1x), then the number of status
commands one poll runs for 10 jobs and for all N (target: the same, 1). The
plain loop's job scripts are written before its clock starts; the back end's are not.

Each way of submitting is a `Submitter`; a later one can go through the GAHP server or
the grid manager without touching the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from htgrid.backends.batch._base import BatchJobSpec
from htgrid.backends.batch._command import CountingRunner
from htgrid.backends.batch._script import render_job_script, script_path
from htgrid.backends.batch.slurm import SlurmBackend


class Submitter(Protocol):
    """One way of submitting the benchmark's jobs."""

    name: str

    async def submit_all(self, specs: Sequence[BatchJobSpec]) -> list[str]: ...


@dataclass
class PlainSbatch:
    """The baseline: job scripts written beforehand, then `sbatch` in a loop."""

    registry: Path
    name: str = "plain sbatch loop"

    def prepare(self, specs: Sequence[BatchJobSpec]) -> list[Path]:
        backend = SlurmBackend(registry=self.registry)
        paths = []
        for spec in specs:
            path = script_path(spec, "plain")
            text = render_job_script(
                spec,
                directives=backend.directives(spec),
                job_id_var=backend.job_id_var,
                registry=self.registry,
            )
            path.write_text(text)
            paths.append(path)
        return paths

    async def submit_all(self, specs: Sequence[BatchJobSpec]) -> list[str]:
        paths = self.prepare(specs)  # not timed separately: the baseline's advantage
        ids = []
        for path in paths:
            done = subprocess.run(
                ["sbatch", "--parsable", "--hold", str(path)],
                capture_output=True,
                text=True,
                check=True,
            )
            ids.append(done.stdout.strip().split(";")[0])
        return ids


@dataclass
class BackendOneByOne:
    """SlurmBackend.submit, awaited one job at a time: the back end's own overhead."""

    backend: SlurmBackend
    name: str = "back end, one at a time"

    async def submit_all(self, specs: Sequence[BatchJobSpec]) -> list[str]:
        return [await self.backend.submit(spec) for spec in specs]


@dataclass
class BackendConcurrent:
    """SlurmBackend.submit for all jobs at once, as the GAHP server issues them."""

    backend: SlurmBackend
    name: str = "back end, concurrent"

    async def submit_all(self, specs: Sequence[BatchJobSpec]) -> list[str]:
        return list(await asyncio.gather(*(self.backend.submit(s) for s in specs)))


def make_specs(root: Path, n: int, label: str) -> list[BatchJobSpec]:
    specs = []
    for i in range(n):
        job_dir = root / label / str(i)
        job_dir.mkdir(parents=True)
        specs.append(
            BatchJobSpec(
                tag=f"bench-{label}-{i}",
                job_dir=job_dir,
                executable="/bin/true",
                extra_args="--hold",
            )
        )
    return specs


def cancel(ids: Sequence[str]) -> None:
    for start in range(0, len(ids), 500):
        subprocess.run(["scancel", *ids[start : start + 500]], check=False)


async def status_commands(backend: SlurmBackend, runner: CountingRunner, ids: list[str]) -> int:
    runner.commands.clear()
    found = await backend.status(ids)
    assert len(found) == len(ids)
    return len(runner.commands)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="jobs per pass (default 2000)")
    parser.add_argument("--concurrency", type=int, default=16, help="back end's command limit")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    opts = parser.parse_args()
    if shutil.which("sbatch") is None:
        print("sbatch not found: run .ci/slurm-up.sh first", file=sys.stderr)
        return 2

    root = Path(tempfile.mkdtemp(prefix="htgrid-bench-"))
    registry = root / "registry"
    runner = CountingRunner()
    backend = SlurmBackend(registry=registry, runner=runner, max_commands=opts.concurrency)
    submitters: list[Submitter] = [
        PlainSbatch(registry),
        BackendOneByOne(backend),
        BackendConcurrent(backend),
    ]
    # Rounds interleave the submitters, so load from elsewhere on the machine falls on
    # all of them alike.
    times = dict.fromkeys((s.name for s in submitters), 0.0)
    per_round = max(1, opts.n // opts.rounds)
    for round_no in range(opts.rounds):
        for index, submitter in enumerate(submitters):
            specs = make_specs(root, per_round, f"r{round_no}p{index}")
            start = time.perf_counter()
            ids = await submitter.submit_all(specs)
            times[submitter.name] += time.perf_counter() - start
            assert len(set(ids)) == per_round
            cancel(ids)
    n = per_round * opts.rounds

    # Status commands per poll, with all N jobs in the queue.
    ids = await BackendConcurrent(backend).submit_all(make_specs(root, opts.n, "status"))
    small = await status_commands(backend, runner, ids[:10])
    t0 = time.perf_counter()
    large = await status_commands(backend, runner, ids)
    poll_seconds = time.perf_counter() - t0
    cancel(ids)

    base = times[submitters[0].name]
    print(f"{n} held jobs per submitter in {opts.rounds} rounds, Slurm {_version()}")
    for name, seconds in times.items():
        print(
            f"  {name:26s} {seconds:8.2f} s  {seconds / n * 1e3:6.2f} ms/job  {seconds / base:5.2f}x"
        )
    print(f"  status commands per poll: {small} for 10 jobs, {large} for {opts.n} jobs")
    print(f"  one poll of {opts.n} jobs: {poll_seconds:.3f} s")
    shutil.rmtree(root, ignore_errors=True)
    return 0


def _version() -> str:
    done = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
