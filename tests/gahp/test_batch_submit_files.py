"""What a batch GAHP submit leaves in its scratch directory, and what a crash at each step
between its files leaves the next server: the job found again, never sent twice.

Slurm is scripted (sbatch prints ids, squeue answers from what was sent), so each crash
point is exact; tests/grid/test_crash.py kills real servers at random moments.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Awaitable, Sequence
from pathlib import Path

import pytest

import htgrid.classad as classad
from htgrid.backends.batch import _registry
from htgrid.backends.batch._base import CommandResult
from htgrid.backends.batch._jobad import parse_submit_ad
from htgrid.backends.batch._registry import BackendOptions
from htgrid.backends.batch.server import BatchGahp, BatchOptions
from htgrid.backends.batch.slurm import SlurmBackend
from htgrid.gahp import Call, Credentials

from ._fakes import ManualClock

_calls = itertools.count(1)


class ScriptedSlurm:
    """sbatch, squeue and sacct of a Slurm in memory: jobs by id and by name."""

    def __init__(self) -> None:
        self.ids = itertools.count(5001)
        self.names: dict[str, str] = {}  # job id -> job name
        self.done: set[str] = set()
        self.sbatch = 0

    async def __call__(
        self, argv: Sequence[str], *, stdin: str | None = None, timeout: float
    ) -> CommandResult:
        program, args = os.path.basename(argv[0]), list(argv[1:])
        if program == "sbatch":
            self.sbatch += 1
            script = Path(args[-1]).read_text()
            name = next(
                line.split("=", 1)[1] for line in script.splitlines() if "--job-name=" in line
            )
            job_id = str(next(self.ids))
            self.names[job_id] = name
            return CommandResult(tuple(argv), 0, f"{job_id}\n", "")
        if program == "squeue":
            live = {i: n for i, n in self.names.items() if i not in self.done}
            named = [a.split("=", 1)[1] for a in args if a.startswith("--name=")]
            if named:
                found = [i for i, n in live.items() if n == named[0]]
                return CommandResult(tuple(argv), 0, "".join(f"{i}\n" for i in found), "")
            asked = args[args.index("-j") + 1].split(",") if "-j" in args else list(live)
            lines = [f"{i}|PENDING|None|0:00|{live[i]}\n" for i in asked if i in live]
            return CommandResult(tuple(argv), 0, "".join(lines), "")
        if program == "sacct":
            return CommandResult(tuple(argv), 1, "", "accounting storage is disabled")
        return CommandResult(tuple(argv), 0, "", "")


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> ScriptedSlurm:
    scripted = ScriptedSlurm()

    def build(options: BackendOptions) -> SlurmBackend:
        return SlurmBackend(registry=options.registry or options.state_dir, runner=scripted)

    monkeypatch.setitem(_registry._FACTORIES, "slurm", build)
    return scripted


def gahp(tmp_path: Path) -> BatchGahp:
    return BatchGahp(BatchOptions(scratch=tmp_path / "scratch"), clock=ManualClock())


def submit_ad(tmp_path: Path, client_id: str) -> str:
    return str(
        classad.ClassAd(
            {
                "gridtype": "slurm",
                "Cmd": "/bin/true",
                "Iwd": str(tmp_path),
                "ClientJobId": client_id,
                "Out": "job.out",
            }
        )
    )


def call(command: str, *args: str) -> Call:
    return Call(command, next(_calls), tuple(args), Credentials())


async def submit(server: BatchGahp, text: str) -> str:
    result = await server.submit(call("BLAH_JOB_SUBMIT", text))
    assert result[:2] == ("0", "No error"), result
    return result[2]


def links_to(root: Path, target: Path) -> list[Path]:
    return [
        path for path in root.rglob("*") if path.is_symlink() and Path(os.readlink(path)) == target
    ]


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_a_submit_leaves_one_record_and_one_link_by_id(
    tmp_path: Path, slurm: ScriptedSlurm
) -> None:
    async def main() -> None:
        server = gahp(tmp_path)
        blah_id = await submit(server, submit_ad(tmp_path, "12.0"))
        native_id = blah_id.rsplit("/", 1)[1]
        [job_dir] = (tmp_path / "scratch" / "jobs").iterdir()
        # One link by id, the one the job's wrapper makes too (it finds the exit file).
        assert links_to(tmp_path / "scratch", job_dir) == [
            tmp_path / "scratch" / "ids" / "slurm" / native_id
        ]
        script = (job_dir / ".htgrid-job.slurm.sh").read_text()
        assert f'{tmp_path}/scratch/ids/slurm/"$htgrid_id"' in script
        # A restarted server knows the job by its id and by its client's id.
        again = gahp(tmp_path)
        record = again.store.find("slurm", native_id)
        assert record is not None and record.blah_id == blah_id
        found = await again.find(call("BLAH_JOB_FIND", "slurm", "12.0"))
        assert found == ("0", "No error", blah_id)
        assert await submit(again, submit_ad(tmp_path, "12.0")) == blah_id
        assert slurm.sbatch == 1

    run(main())


@pytest.mark.parametrize("left", ["record only", "record and link by id"])
def test_a_crash_after_sbatch_never_sends_the_job_twice(
    tmp_path: Path, slurm: ScriptedSlurm, left: str
) -> None:
    """kill -9 after sbatch returned, before the ids were written down: the next server's
    submit of the same client job finds it in Slurm by its name."""

    async def main() -> None:
        server = gahp(tmp_path)
        text = submit_ad(tmp_path, "13.0")
        request = parse_submit_ad(text, default_iwd="/", new_tag="unused")
        backend = server.backend("slurm")
        spec, _ = server.store.stage_in(request)
        prepared = backend.prepare(spec)
        native_id = backend.parse_submit(await backend.run(prepared.argv))
        if left == "record and link by id":
            server.store.index("slurm", native_id, spec.job_dir)
        again = gahp(tmp_path)
        blah_id = await submit(again, text)
        assert blah_id.endswith("/" + native_id)
        assert slurm.sbatch == 1
        # Written down now: the job's status finds its record by id.
        assert again.store.find("slurm", native_id) is not None
        assert (await again.find(call("BLAH_JOB_FIND", "slurm", "13.0")))[2] == blah_id

    run(main())


def test_a_job_that_never_reached_slurm_is_sent_again(tmp_path: Path, slurm: ScriptedSlurm) -> None:
    async def main() -> None:
        server = gahp(tmp_path)
        text = submit_ad(tmp_path, "14.0")
        request = parse_submit_ad(text, default_iwd="/", new_tag="unused")
        spec, _ = server.store.stage_in(request)  # ...and a crash before sbatch
        blah_id = await submit(gahp(tmp_path), text)
        assert slurm.sbatch == 1
        assert spec.job_dir.with_name(spec.job_dir.name + ".2").is_dir()
        assert blah_id.endswith("/5001")

    run(main())
