"""htgrid's batch GAHP server, with what the grid manager tests need changed (a script).

    python gahp_ext.py [--no-find] [--no-status-all] [--control DIR] [GAHP options]

* `--no-find` leaves BLAH_JOB_FIND out of COMMANDS (recovery by resubmitting instead).
* `--no-status-all` leaves BLAH_JOB_STATUS_ALL out (per-job status instead).
* `--finish-submits`: on EOF (the grid manager died) the submits in flight are finished
  and recorded before the server exits, instead of being cancelled half-way (a launched
  batch job the server never recorded cannot be found by its tag).
* back end `flaky`: the fork back end, steered by files in the control directory:
  `ping-down` fails its ping, `submit-down` fails submits as unavailable, `status-down`
  fails status queries, `lost` makes every job unknown to it, `submit-slow` makes a submit
  wait 3 s before it reaches the batch system. `mute` (any back end) holds blah ids, one a
  line: the server answers no status for those jobs (an error ad, not "not found").
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from htgrid.backends.batch._base import BackendUnavailable, JobState, NativeStatus
from htgrid.backends.batch._registry import register
from htgrid.backends.batch._sandbox import JobRecord
from htgrid.backends.batch.fork import ForkBackend
from htgrid.backends.batch.server import BatchGahp, BatchOptions
from htgrid.cli._gahp import default_scratch
from htgrid.gahp import Call, GahpServer


class FlakyBackend(ForkBackend):
    """Fork, with failures switched on by files in `control`."""

    name = "flaky"

    def __init__(self, state_dir: Path, control: Path) -> None:
        super().__init__(state_dir, grace=2.0)
        self.control = control

    async def ping(self) -> None:
        if (self.control / "ping-down").exists():
            raise BackendUnavailable("flaky: the batch system does not answer")
        await super().ping()

    async def submit(self, spec):  # type: ignore[no-untyped-def]
        if (self.control / "submit-down").exists():
            raise BackendUnavailable("flaky: sbatch timed out")
        if (self.control / "submit-slow").exists():
            (self.control / f"submitting.{spec.tag}").touch()
            await asyncio.sleep(3)
        return await super().submit(spec)

    async def status(self, native_ids: Sequence[str]) -> dict[str, NativeStatus]:
        if (self.control / "status-down").exists():
            raise BackendUnavailable("flaky: squeue timed out")
        if (self.control / "lost").exists():
            return {n: NativeStatus(n, JobState.UNKNOWN, source="none") for n in native_ids}
        return await super().status(native_ids)


class ExtendedGahp(BatchGahp):
    """The batch GAHP with commands left out of COMMANDS."""

    def __init__(
        self,
        options: BatchOptions,
        *,
        leave_out: frozenset[str],
        finish_submits: bool,
        control: Path,
    ) -> None:
        super().__init__(options)
        self.leave_out = leave_out
        self.finish_submits = finish_submits
        self.control = control
        self.in_flight: set[asyncio.Task[Sequence[str]]] = set()

    def server(self) -> GahpServer:
        base = super().server()
        kept = [
            replace(c, handler=self._shielded) if name == "BLAH_JOB_SUBMIT" else c
            for name, c in base._commands.items()
            if name not in self.leave_out
        ]
        return GahpServer(base.version, kept)

    async def _shielded(self, call: Call) -> Sequence[str]:
        if not self.finish_submits:
            return await self.submit(call)
        task = asyncio.create_task(self.submit(call))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        return await asyncio.shield(task)

    async def _status(
        self, blah_id: str, *, max_age: float | None = None
    ) -> tuple[NativeStatus, JobRecord | None]:
        mute = self.control / "mute"
        if mute.exists() and blah_id in mute.read_text().split():
            raise BackendUnavailable(f"flaky: no answer about {blah_id}")
        return await super()._status(blah_id, max_age=max_age)

    async def serve(self) -> None:
        await self.server().serve_stdio()
        if self.in_flight:
            await asyncio.gather(*self.in_flight, return_exceptions=True)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-find", action="store_true")
    parser.add_argument("--no-status-all", action="store_true")
    parser.add_argument("--finish-submits", action="store_true")
    parser.add_argument("--control", type=Path, default=Path("/nonexistent"))
    parser.add_argument("--status-max-age", type=float, default=0.2)
    parser.add_argument("--status-window", type=float, default=0.05)
    args = parser.parse_args(argv)
    register("flaky", lambda options: FlakyBackend(options.state_dir, args.control))
    scratch = default_scratch().absolute()
    scratch.mkdir(parents=True, exist_ok=True)
    options = BatchOptions(
        scratch=scratch, status_window=args.status_window, status_max_age=args.status_max_age
    )
    leave_out = {"BLAH_JOB_FIND"} if args.no_find else set()
    if args.no_status_all:
        leave_out.add("BLAH_JOB_STATUS_ALL")
    gahp = ExtendedGahp(
        options,
        leave_out=frozenset(leave_out),
        finish_submits=args.finish_submits,
        control=args.control,
    )
    asyncio.run(gahp.serve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
