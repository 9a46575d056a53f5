"""The grid manager with the real batch GAHP server and the fork back end: real processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Awaitable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from htgrid.grid import explain_grid_job
from htgrid.grid._task import JobTask
from htgrid.grid.batch import BatchJobId
from htgrid.grid.batch._resource import BatchResource
from htgrid.queue import JobAction, JobId, JobStatus

from ._harness import (
    FAST,
    ROOT,
    Grid,
    ext_gahp,
    flaky_control,
    running,
    unset,
    wait_for,
    with_gahp,
)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_jobs_run_and_their_outputs_come_back(grid: Grid) -> None:
    (grid.work / "in.txt").write_text("input data\n")
    ids = grid.submit(
        "executable = /bin/sh\n"
        "arguments = \"-c 'cat in.txt; echo out $(Process) > result.$(Process); "
        "echo err >&2; exit $(Process)'\"\n"
        "transfer_input_files = in.txt\n"
        "transfer_output_files = result.$(Process)\n"
        "output = out.$(Process)\nerror = err.$(Process)\nlog = job.log",
        count=3,
    )

    async def main() -> None:
        async with running(grid) as manager:
            await wait_for("the jobs to finish", lambda: not any(map(grid.in_queue, ids)))
            stats = manager.stats()["resources"]["batch fork"]
            assert stats.submits == 3
            assert stats.submit_failures == 0

    run(main())
    for job_id in ids:
        ad = grid.ad(job_id)
        proc = job_id.proc
        assert ad["JobStatus"] == JobStatus.COMPLETED
        assert ad["ExitCode"] == proc
        assert ad["ExitBySignal"] is False
        assert ad["GridJobStatus"] == "COMPLETED"
        assert ad["RemoteWallClockTime"] > 0
        assert ad["Managed"] == "External"
        grid_id = BatchJobId.parse(ad["GridJobId"])
        assert grid_id is not None
        assert grid_id.tag.startswith(f"htgrid_{job_id.cluster}_{proc}_")
        assert re.fullmatch(r"fork/\d{8}/\d+(\.\d+)?", grid_id.blah_id or "")
        assert (grid.work / f"out.{proc}").read_text() == "input data\n"
        assert (grid.work / f"err.{proc}").read_text() == "err\n"
        assert (grid.work / f"result.{proc}").read_text() == f"out {proc}\n"
        assert explain_grid_job(ad)[-1] == (
            f"Completed as batch job {grid_id.blah_id}: exit code {proc} after "
            f"{ad['RemoteWallClockTime']:g} s of wall-clock time."
        )
    log = grid.log()
    # 027 for each job, with its GridJobId; the daemon, not us, writes 001 and 005.
    assert log.count("027 (") == 3
    for job_id in ids:
        assert f"    GridJobId: {grid.ad(job_id)['GridJobId']}\n" in log
    assert "001 (" not in log
    assert "005 (" not in log


def test_a_bad_executable_is_held_with_the_reason(grid: Grid) -> None:
    program = grid.work / "prog.sh"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    (job_id,) = grid.submit("executable = prog.sh\nlog = job.log")
    program.unlink()  # gone by the time the grid manager submits it

    async def main() -> None:
        async with running(grid):
            await wait_for("the hold", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.HELD)
            await wait_for("the hand-back", lambda: grid.ad(job_id).get("Managed") == "Schedd")

    run(main())
    ad = grid.ad(job_id)
    assert ad["HoldReason"] == (
        f"Attempts to submit failed: Cannot stage executable {program}: No such file or directory"
    )
    assert ad["HoldReasonCode"] == 0
    assert ad["HoldReasonSubCode"] == 1  # the batch GAHP's result code
    assert unset(ad, "GridJobId")
    lines = explain_grid_job(ad)
    assert lines[1].startswith("Held: Attempts to submit failed: Cannot stage executable")
    assert "HoldReasonCode 0 Unspecified" in lines[1]
    assert lines[2] == "`htgrid release` submits it again from the start."


def test_rm_cancels_the_batch_job_before_the_job_leaves(grid: Grid) -> None:
    pid_file = grid.work / "pid"
    (job_id,) = grid.submit(
        f"executable = /bin/sh\narguments = \"-c 'echo $$ > {pid_file}; exec sleep 300'\"\n"
        "log = job.log"
    )

    async def main() -> None:
        async with running(grid):
            await wait_for("the job to run", lambda: grid.ad(job_id)["JobStatus"] == 2)
            await wait_for("its pid", lambda: pid_file.exists() and pid_file.read_text())
            pid = int(pid_file.read_text())
            assert _alive(pid)
            grid.queue.act(JobAction.Remove, job_id, ROOT)
            # Removed, but kept in the queue until the grid manager has cancelled it.
            ad = grid.queue.get(job_id)
            assert ad["JobStatus"] == JobStatus.REMOVED
            assert any("cancels batch job" in line for line in explain_grid_job(ad))
            await wait_for("the job to leave", lambda: not grid.in_queue(job_id))
            await wait_for("the batch job to die", lambda: not _alive(pid), timeout=15)

    run(main())
    assert grid.ad(job_id)["JobStatus"] == JobStatus.REMOVED


def test_hold_cancels_and_release_resubmits(grid: Grid) -> None:
    runs = grid.work / "runs"
    (job_id,) = grid.submit(
        "executable = /bin/sh\n"
        f"arguments = \"-c 'echo $$ >> {runs}; n=$(wc -l < {runs}); "
        "if [ $n -ge 2 ]; then exit 7; fi; exec sleep 300'\"\nlog = job.log"
    )

    async def main() -> None:
        async with running(grid):
            await wait_for("the first run", lambda: runs.exists() and runs.read_text())
            first = BatchJobId.parse(grid.ad(job_id)["GridJobId"])
            pid = int(runs.read_text().split()[0])
            grid.queue.act(JobAction.Hold, job_id, ROOT, "wait a moment")
            await wait_for("the hand-back", lambda: grid.ad(job_id).get("Managed") == "Schedd")
            await wait_for("the batch job to die", lambda: not _alive(pid), timeout=15)
            held = grid.ad(job_id)
            assert held["HoldReason"] == "wait a moment"
            assert BatchJobId.parse(held.get("GridJobId")) is None  # cleared, as HTCondor does
            grid.queue.act(JobAction.Release, job_id, ROOT)
            await wait_for("the second run to end", lambda: not grid.in_queue(job_id))
            second = BatchJobId.parse(grid.ad(job_id)["GridJobId"])
            assert first is not None and second is not None
            assert second.tag != first.tag
            assert second.blah_id != first.blah_id

    run(main())
    assert len(runs.read_text().split()) == 2
    assert grid.ad(job_id)["ExitCode"] == 7
    assert grid.log().count("027 (") == 2


def test_status_is_one_bulk_request_per_poll(grid: Grid) -> None:
    ids = grid.submit("executable = /bin/sleep\narguments = 2", count=40)

    async def main() -> None:
        async with running(grid) as manager:
            await wait_for("the jobs to finish", lambda: not any(map(grid.in_queue, ids)))
            stats = manager.stats()["resources"]["batch fork"]
            assert stats.polls >= 3
            assert stats.status_commands == stats.polls
            assert stats.status_failures == 0

    run(main())
    assert all(grid.ad(i)["ExitCode"] == 0 for i in ids)


def test_a_job_just_submitted_is_asked_about_at_the_next_poll(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Asked about only a whole poll interval after its submit, a job that ended at once
    # was seen done at the poll after the next one: up to two intervals.
    polls: list[list[str]] = []  # the batch ids each bulk status asked about, in order
    bulk = BatchResource._poll_bulk

    async def recorded(self: BatchResource, ids: list[str], by_id: Any) -> None:
        polls.append(list(ids))
        await bulk(self, ids, by_id)

    monkeypatch.setattr(BatchResource, "_poll_bulk", recorded)
    (running_job,) = grid.submit("executable = /bin/sleep\narguments = 8")

    def blah_id(job_id: JobId) -> str | None:
        grid_id = BatchJobId.parse(grid.ad(job_id).get("GridJobId"))
        return grid_id.blah_id if grid_id is not None else None

    async def main() -> None:
        async with running(grid, replace(FAST, poll_interval=1.0)):
            await wait_for("a poll about the running job", lambda: polls)
            (quick,) = grid.submit("executable = /bin/true")
            await wait_for("its batch id", lambda: blah_id(quick))
            seen = len(polls)  # polls begun before now may have missed it
            await wait_for("the next poll", lambda: len(polls) > seen)
            assert blah_id(quick) in polls[seen]
            assert blah_id(running_job) in polls[seen]
            await wait_for(
                "the quick job to complete",
                lambda: grid.ad(quick)["JobStatus"] == JobStatus.COMPLETED,
            )

    run(main())


def test_without_a_bulk_command_each_job_is_asked(grid: Grid) -> None:
    ids = grid.submit("executable = /bin/sleep\narguments = 1", count=3)

    async def main() -> None:
        async with running(grid, with_gahp(ext_gahp("--no-status-all"))) as manager:
            await wait_for("the jobs to finish", lambda: not any(map(grid.in_queue, ids)))
            stats = manager.stats()["resources"]["batch fork"]
            assert stats.status_commands > stats.polls

    run(main())
    assert all(grid.ad(i)["JobStatus"] == JobStatus.COMPLETED for i in ids)


def test_a_job_the_batch_system_forgets_is_held_after_the_limit(grid: Grid) -> None:
    control = grid.work / "control"
    control.mkdir()
    pid_file = grid.work / "pid"
    (job_id,) = grid.submit(
        f"executable = /bin/sh\narguments = \"-c 'echo $$ > {pid_file}; exec sleep 300'\"",
        resource="batch flaky",
    )
    config = with_gahp(ext_gahp(control=control), max_unknown_polls=3)

    async def main() -> None:
        async with running(grid, config):
            await wait_for("the job to run", lambda: grid.ad(job_id)["JobStatus"] == 2)
            (control / "lost").touch()
            await wait_for("the hold", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.HELD)

    try:
        run(main())
    finally:
        # The back end only pretended to lose it: the process is still ours to stop.
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    ad = grid.ad(job_id)
    assert re.fullmatch(
        r"The batch system has not known job flaky/\d+/\d+ for 3 status polls "
        r"\(Job flaky/\d+/\d+ not found\); it may have been removed outside htgrid",
        ad["HoldReason"],
    )
    assert ad["HoldReasonCode"] == 0


def test_a_failing_status_command_fails_no_job(grid: Grid) -> None:
    control = grid.work / "control"
    control.mkdir()
    (job_id,) = grid.submit("executable = /bin/sleep\narguments = 2", resource="batch flaky")
    config = with_gahp(ext_gahp(control=control), max_unknown_polls=2)

    async def main() -> None:
        async with running(grid, config) as manager:
            await wait_for("the job to run", lambda: grid.ad(job_id)["JobStatus"] == 2)
            (control / "status-down").touch()
            stats = manager.stats()["resources"]["batch flaky"]
            await wait_for("failed polls", lambda: stats.status_failures >= 5)
            assert grid.ad(job_id)["JobStatus"] == JobStatus.RUNNING
            (control / "status-down").unlink()
            await wait_for("the job to finish", lambda: not grid.in_queue(job_id))

    run(main())
    assert grid.ad(job_id)["JobStatus"] == JobStatus.COMPLETED


def test_transient_submit_failures_are_retried(grid: Grid) -> None:
    control = grid.work / "control"
    control.mkdir()
    (control / "submit-down").touch()
    (job_id,) = grid.submit("executable = /bin/true", resource="batch flaky")
    config = with_gahp(ext_gahp(control=control), max_submit_attempts=100)

    async def main() -> None:
        async with running(grid, config) as manager:
            reason = lambda: grid.ad(job_id).get("GridWaitReason") or ""  # noqa: E731
            await wait_for("a retry", lambda: "submit attempt" in reason())
            assert "flaky: sbatch timed out" in reason()
            assert any(
                line.startswith("Waiting: submit") for line in explain_grid_job(grid.ad(job_id))
            )
            stats = manager.stats()["resources"]["batch flaky"]
            await wait_for("more failures", lambda: stats.submit_failures >= 3)
            (control / "submit-down").unlink()
            await wait_for("the job to finish", lambda: not grid.in_queue(job_id))
            assert stats.submits == 1

    run(main())
    ad = grid.ad(job_id)
    assert ad["JobStatus"] == JobStatus.COMPLETED
    assert unset(ad, "GridWaitReason")


def test_a_burst_of_failed_submits_does_not_pause_the_resource_for_long(grid: Grid) -> None:
    # A batch system that stalls fails every submit in flight: they are one outage, so
    # once it answers again the jobs go in after their own short back-off, not after the
    # resource's longest pause (20 failures counted in a row paused submits for 120 s).
    control = flaky_control(grid, "submit-down")
    ids = grid.submit("executable = /bin/true", count=20, resource="batch flaky")
    config = with_gahp(ext_gahp(control=control), max_submit_attempts=100, retry_max=120.0)

    async def main() -> None:
        async with running(grid, config) as manager:
            stats = manager.stats()["resources"]["batch flaky"]
            await wait_for("every job's submit to fail", lambda: stats.submit_failures >= 20)
            (control / "submit-down").unlink()
            await wait_for("the jobs to finish", lambda: not any(map(grid.in_queue, ids)))
            assert stats.submits == 20

    run(main())
    assert all(grid.ad(i)["JobStatus"] == JobStatus.COMPLETED for i in ids)


def test_submit_failures_end_in_a_hold_after_the_limit(grid: Grid) -> None:
    control = grid.work / "control"
    control.mkdir()
    (control / "submit-down").touch()
    (job_id,) = grid.submit("executable = /bin/true", resource="batch flaky")
    config = with_gahp(ext_gahp(control=control), max_submit_attempts=2)

    async def main() -> None:
        async with running(grid, config):
            await wait_for("the hold", lambda: grid.ad(job_id)["JobStatus"] == JobStatus.HELD)

    run(main())
    ad = grid.ad(job_id)
    assert ad["HoldReason"].startswith("Attempts to submit failed: ")
    assert "flaky: sbatch timed out" in ad["HoldReason"]
    assert (ad["HoldReasonCode"], ad["HoldReasonSubCode"]) == (0, 3)


def test_a_restarted_manager_picks_the_jobs_up(grid: Grid) -> None:
    ids = grid.submit("executable = /bin/sh\narguments = \"-c 'sleep 2; exit 3'\"", count=4)

    async def main() -> None:
        async with running(grid):
            await wait_for("the submits", lambda: all(grid.ad(i)["JobStatus"] == 2 for i in ids))
        async with running(grid) as manager:
            await wait_for("the jobs to finish", lambda: not any(map(grid.in_queue, ids)))
            assert manager.stats()["resources"]["batch fork"].submits == 0

    run(main())
    assert [grid.ad(i)["ExitCode"] for i in ids] == [3, 3, 3, 3]


def test_only_one_manager_per_queue(grid: Grid) -> None:
    async def main() -> None:
        async with running(grid):
            from htgrid.grid import AlreadyRunning, GridManager

            try:
                await GridManager(grid.home, config=FAST).run(asyncio.Event())
            except AlreadyRunning as err:
                assert "another grid manager runs" in str(err)
            else:
                raise AssertionError("a second grid manager ran")

    run(main())


def test_the_submit_throttle_holds_jobs_back(grid: Grid) -> None:
    ids = grid.submit("executable = /bin/sleep\narguments = 1\nlog = job.log", count=4)
    config = with_gahp(FAST.batch_gahp, max_submitted_per_resource=2)

    async def main() -> None:
        async with running(grid, config) as manager:
            waiting = lambda: [  # noqa: E731
                i for i in ids if "submit slot" in str(grid.ad(i).get("GridWaitReason"))
            ]
            await wait_for("two jobs to wait", lambda: len(waiting()) == 2)
            line = next(x for x in explain_grid_job(grid.ad(waiting()[0])) if "Waiting" in x)
            assert "batch fork takes at most 2 submitted jobs at once" in line
            await wait_for("the jobs to finish", lambda: not any(map(grid.in_queue, ids)))
            assert manager.stats()["resources"]["batch fork"].submits == 4

    started = time.monotonic()
    run(main())
    assert time.monotonic() - started > 2  # two rounds of 1 s jobs
    assert os.path.exists(grid.work / "job.log")


def test_a_reconfig_raising_the_submit_limit_lets_every_waiting_job_go(grid: Grid) -> None:
    ids = grid.submit("executable = /bin/sleep\narguments = 60", count=4)
    config = with_gahp(FAST.batch_gahp, max_submitted_per_resource=1)

    async def main() -> None:
        async with running(grid, config) as manager:
            resource = lambda: manager.resources["batch fork"]  # noqa: E731
            await wait_for("three jobs to wait", lambda: resource().slots() == (1, 1, 3))
            manager.reconfig(replace(config, max_submitted_per_resource=3))
            await wait_for("two more submitted", lambda: resource().slots() == (3, 3, 1))
            manager.reconfig(replace(config, max_submitted_per_resource=10))
            await wait_for("all submitted", lambda: resource().slots() == (4, 10, 0))
            await wait_for(
                "their batch jobs", lambda: all(grid.ad(i).get("GridJobId") for i in ids)
            )
            for job_id in ids:
                grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the jobs to leave", lambda: not any(map(grid.in_queue, ids)))

    run(main())


def test_a_slot_freed_while_a_job_writes_its_wait_reason_is_not_lost(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit is raised (a reconfig) just as the waiting job writes why it waits:
    the job goes at once, not after some later change wakes it."""
    ids = grid.submit("executable = /bin/sleep\narguments = 60", count=2)
    config = with_gahp(FAST.batch_gahp, max_submitted_per_resource=1)
    managers: list[Any] = []
    write = JobTask.set_wait_reason

    async def raising_the_limit_meanwhile(job: Any, text: str | None, **more: Any) -> None:
        if text is not None and "submit slot" in text and managers:
            managers.pop().reconfig(replace(config, max_submitted_per_resource=2))
        await write(job, text, **more)

    monkeypatch.setattr(JobTask, "set_wait_reason", raising_the_limit_meanwhile)

    async def main() -> None:
        async with running(grid, config) as manager:
            managers.append(manager)
            await wait_for("both submitted", lambda: all(grid.ad(i).get("GridJobId") for i in ids))
            for job_id in ids:
                grid.queue.act(JobAction.Remove, job_id, ROOT)
            await wait_for("the jobs to leave", lambda: not any(map(grid.in_queue, ids)))

    run(main())


def test_periodic_remove_of_a_running_grid_job_cancels_it(grid: Grid) -> None:
    pid_file = grid.work / "pid"
    (job_id,) = grid.submit(
        f"executable = /bin/sh\narguments = \"-c 'echo $$ > {pid_file}; exec sleep 300'\"\n"
        "periodic_remove = JobStatus == 2 && NumJobStarts >= 1"
    )

    async def main() -> None:
        async with running(grid):
            await wait_for("its pid", lambda: pid_file.exists() and pid_file.read_text())
            pid = int(pid_file.read_text())
            await wait_for("the job to leave", lambda: not grid.in_queue(job_id))
            await wait_for("the batch job to die", lambda: not _alive(pid), timeout=15)

    run(main())
    ad = grid.ad(job_id)
    assert ad["JobStatus"] == JobStatus.REMOVED
    assert "PeriodicRemove" in ad["RemoveReason"]


def test_a_trimmed_change_feed_makes_it_rescan(
    grid: Grid, caplog: pytest.LogCaptureFixture
) -> None:
    config = with_gahp(FAST.batch_gahp, feed_interval=1.5)

    async def main() -> None:
        async with running(grid, config):
            await asyncio.sleep(0.2)  # the manager has read the feed and sleeps
            (job_id,) = grid.submit("executable = /bin/true")
            grid.queue.trim_changes(grid.queue.last_seq)  # it never sees the submit
            await wait_for("the job to finish", lambda: not grid.in_queue(job_id))

    run(main())
    assert "change feed trimmed after" in caplog.text


def test_a_release_of_many_jobs_adopts_the_grid_jobs_among_them(grid: Grid) -> None:
    # A CE's HTCondor-C side releases thousands of jobs at once, nearly none of them grid
    # jobs: the grid manager reads them together and takes only its own.
    ids = grid.submit("executable = /bin/sh\narguments = \"-c 'exit 3'\"\nhold = true", count=2)
    vanilla = grid.submit("executable = /bin/true\nhold = true", count=60, universe="vanilla")

    async def main() -> None:
        async with running(grid) as manager:
            grid.queue.act(JobAction.Release, "JobStatus == 5", ROOT)
            await wait_for("the grid jobs to end", lambda: not any(map(grid.in_queue, ids)))
            assert manager.stats()["resources"]["batch fork"].submits == 2

    run(main())
    for job_id in ids:
        assert grid.ad(job_id)["ExitCode"] == 3
    for job_id in vanilla:
        ad = grid.queue.get(job_id)
        assert ad["JobStatus"] == JobStatus.IDLE and unset(ad, "GridJobId")
