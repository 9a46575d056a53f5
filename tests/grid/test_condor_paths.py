"""The condor grid type against a scripted GAHP whose remote schedd is a real JobQueue.

The test plays the remote execute side (job_started, job_exited on the remote queue);
the grid manager runs in this event loop. See condor_fake_gahp.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import htgrid.classad as classad
from htgrid.grid import GridManager
from htgrid.grid.condor import CondorJobId
from htgrid.grid.condor._ad import build_remote_ad, build_stage_in_ad
from htgrid.grid.condor._job import condor_type
from htgrid.grid.condor._resource import CondorResource
from htgrid.queue import Identity, JobAction, JobId, JobNotFound, JobQueue, JobStatus
from htgrid.submit import SubmitDescription

from ._harness import FAST, Grid, unset, wait_for

FAKE = Path(__file__).parent / "condor_fake_gahp.py"
RESOURCE = "condor remote@test 127.0.0.1:9999"
ROOT = Identity("root")


class Remote:
    """The fake GAHP's remote schedd, seen from the test."""

    def __init__(self, state: Path) -> None:
        self.state = state
        (state / "control").mkdir(parents=True, exist_ok=True)
        self.queue = JobQueue.open(state / "queue", fsync=False)

    def flag(self, name: str, on: bool = True) -> None:
        path = self.state / "control" / name
        if on:
            path.touch()
        else:
            path.unlink(missing_ok=True)

    def requests(self, command: str) -> list[int]:
        """The job counts of every request of `command` so far."""
        path = self.state / "requests.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [int(line.split()[1]) for line in lines if line.split()[0] == command]

    def jobs(self) -> list[classad.ClassAd]:
        return self.queue.query("true")

    def all_jobs(self) -> list[classad.ClassAd]:
        return self.jobs() + self.queue.history("true")

    def ad(self, remote: str) -> classad.ClassAd | None:
        try:
            return self.queue.get(remote)
        except JobNotFound:
            return None

    def idle(self, remote: str) -> bool:
        ad = self.ad(remote)
        return ad is not None and ad["JobStatus"] == JobStatus.IDLE

    def run(self, remote: str, output: str, code: int) -> None:
        """The remote job runs, writes its output into its sandbox and exits."""
        ad = self.queue.get(remote)
        self.queue.update(remote, {"RemoteHost": "slot1@execute.b"})
        self.queue.job_started(remote)
        cluster, proc = remote.split(".")
        (self.state / "spool" / cluster / proc / str(ad["Out"])).write_text(output)
        self.queue.job_exited(remote, code)


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    r = Remote(tmp_path / "remote")
    yield r
    r.queue.close()


@contextlib.asynccontextmanager
async def running(grid: Grid, remote: Remote, **config: object) -> AsyncIterator[GridManager]:
    gahp = (sys.executable, str(FAKE), "--state", str(remote.state))
    settings = replace(FAST, **config)  # type: ignore[arg-type]
    manager = GridManager(grid.home, config=settings, grid_types={"condor": condor_type(gahp)})
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    await asyncio.wait(
        [task, asyncio.ensure_future(manager.ready.wait())], return_when=asyncio.FIRST_COMPLETED
    )
    try:
        yield manager
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def _submit(grid: Grid, count: int = 1, extra: str = "") -> list[JobId]:
    script = grid.work / "job.sh"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (grid.work / "in.txt").write_text("input data\n")
    body = (
        "executable = job.sh\noutput = out.$(Process).txt\nerror = err.$(Process).txt\n"
        f"log = job.log\ntransfer_input_files = in.txt\nremote_universe = local\n{extra}"
    )
    return grid.submit(body, count, resource=RESOURCE)


def _grid_id(grid: Grid, job_id: JobId) -> CondorJobId | None:
    return CondorJobId.parse(grid.ad(job_id).get("GridJobId"))


def _remote_of(grid: Grid, job_id: JobId) -> str | None:
    parsed = _grid_id(grid, job_id)
    return None if parsed is None else parsed.remote


def _events(log: str) -> list[str]:
    return [line[:3] for line in log.splitlines() if line[:3].isdigit()]


# ---- the remote ad ---------------------------------------------------------------------------


def test_remote_ad_is_built_as_condorjob_does(tmp_path: Path) -> None:
    text = (
        "universe = grid\ngrid_resource = condor b@x 127.0.0.1:9618\n"
        "executable = /bin/true\narguments = local args\noutput = logs/out.txt\n"
        "error = err.txt\ninput = data/in.txt\ntransfer_input_files = a.txt, dir/b.txt\n"
        'log = job.log\nremote_universe = local\n+Remote_Arguments = "remote args"\n'
        '+Remote_Foo = 3\n+Remote_GridResource = "batch slurm"\n'
        "periodic_hold = false\njob_lease_duration = 60\nqueue\n"
    )
    desc = SubmitDescription.from_text(text, cwd=str(tmp_path))
    local = next(iter(desc.jobs(7, owner="alice", qdate=1))).ad
    run_dir = str(tmp_path)
    local["GridJobId"] = "condor b@x 127.0.0.1:9618 3.0"
    ad = build_remote_ad(
        local, tag="htgrid_7_0_abc", submitter="me#1", global_job_id="me#1#7.0#1",
        lease_expiration=1060, now=1000,
    )  # fmt: skip
    assert ad["JobUniverse"] == 12  # remote_universe
    assert ad["Foo"] == 3 and ad["GridResource"] == "batch slurm"
    assert ad["Arguments"] == "remote args" and "Args" not in ad  # the whole group replaced
    assert (ad["JobStatus"], ad["HoldReasonCode"]) == (5, 16)
    assert ad["HoldReason"] == "Spooling input data files"
    assert ad["Cmd"] == "true" and ad["Out"] == "out.txt" and ad["Err"] == "err.txt"
    assert ad["In"] == "in.txt" and ad["TransferInput"] == "a.txt,b.txt"
    assert ad["SUBMIT_Out"] == f"{run_dir}/logs/out.txt"
    assert ad["SUBMIT_Err"] == f"{run_dir}/err.txt"
    assert ad["SUBMIT_Iwd"] == run_dir
    assert (ad["JobLeaseDuration"], ad["JobLeaseExpiration"]) == (60, 1060)
    assert ad["SubmitterId"] == "me#1" and ad["SubmitterGlobalJobId"] == "me#1#7.0#1"
    assert ad["GridSubmitTag"] == "htgrid_7_0_abc"
    for gone in ("ClusterId", "ProcId", "Owner", "UserLog", "PeriodicHold", "GridJobId"):
        assert gone not in ad, gone
    assert "Remote_Foo" not in ad and "Remote_JobUniverse" not in ad
    assert "\n" not in repr(ad)
    left = classad.ClassAd(repr(ad))
    left["JobStatus"] = 4
    assert left.eval("LeaveJobInQueue") is False  # the lease (1060) is long past
    staged = build_stage_in_ad(ad, local, CondorJobId("b@x", "127.0.0.1:9618", 3, 0))
    assert (staged["ClusterId"], staged["ProcId"]) == (3, 0)
    assert staged["Cmd"] == "/bin/true" and staged["In"] == f"{run_dir}/data/in.txt"
    assert staged["TransferInput"] == f"{run_dir}/a.txt,{run_dir}/dir/b.txt"
    assert staged["SUBMIT_Iwd"] == run_dir
    # Only what the stage in reads travels: the whole ad went with the submit.
    assert "JobLeaseDuration" not in staged and "SubmitterGlobalJobId" not in staged


def test_the_proxy_is_staged_in_and_named_by_its_base_name_there(tmp_path: Path) -> None:
    text = (
        "universe = grid\ngrid_resource = condor b@x 127.0.0.1:9618\n"
        "executable = /bin/true\nx509userproxy = creds/x509up_u1000\nqueue\n"
    )
    desc = SubmitDescription.from_text(text, cwd=str(tmp_path))
    local = next(iter(desc.jobs(7, owner="alice", qdate=1))).ad
    ad = build_remote_ad(
        local, tag="t", submitter="me#1", global_job_id="g", lease_expiration=1060, now=1000
    )
    staged = build_stage_in_ad(ad, local, CondorJobId("b@x", "127.0.0.1:9618", 3, 0))
    assert ad["x509userproxy"] == "x509up_u1000"
    assert staged["x509userproxy"] == f"{tmp_path}/creds/x509up_u1000"


def test_default_lease_and_universe() -> None:
    text = "universe = grid\ngrid_resource = condor b@x h:1\nexecutable = /bin/true\nqueue\n"
    local = next(iter(SubmitDescription.from_text(text, cwd="/tmp").jobs(1, owner="a", qdate=1))).ad
    ad = build_remote_ad(
        local, tag="t", submitter="s", global_job_id="g", lease_expiration=2, now=1
    )
    assert ad["JobUniverse"] == 5 and ad["JobLeaseDuration"] == 2400


# ---- whole paths -----------------------------------------------------------------------------


def test_a_job_runs_remotely_and_its_output_comes_back(grid: Grid, remote: Remote) -> None:
    [job] = _submit(grid)

    async def main() -> None:
        async with running(grid, remote):
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            rid = _remote_of(grid, job)
            assert rid is not None
            ad = remote.ad(rid)
            assert ad is not None
            assert ad["Cmd"] == "job.sh" and ad["Out"] == "out.0.txt"
            assert ad["SUBMIT_Out"] == str(grid.work / "out.0.txt")
            assert ad["GridSubmitTag"] == grid.ad(job)["GridSubmitTag"]
            box = remote.state / "spool" / rid.replace(".", "/")
            assert (box / "in.txt").read_text() == "input data\n"
            assert (box / "job.sh").exists()
            remote.run(rid, "hello from B\n", 3)
            await wait_for("the local job to finish", lambda: not grid.in_queue(job))
            await wait_for("the remote copy to go", lambda: remote.ad(rid) is None)

    run(main())
    ad = grid.ad(job)
    assert ad["JobStatus"] == JobStatus.COMPLETED and ad["ExitCode"] == 3
    assert ad["GridJobStatus"] == "COMPLETED"
    assert (grid.work / "out.0.txt").read_text() == "hello from B\n"
    # 027 is the grid manager's; 001 and 005 the queue daemon's (tests/htcondor_c checks them).
    assert _events(grid.log()) == ["027"]
    assert remote.requests("CONDOR_JOB_SUBMIT") == [1]


def test_only_a_slow_stage_out_shows_in_the_wait_reason(grid: Grid, remote: Remote) -> None:
    """GridWaitReason says a job's output is being fetched once that takes a while; a
    quick stage-out writes nothing of it (a queue change per job, for every follower)."""
    quick, slow = _submit(grid, 2)

    def reasons(job: JobId) -> list[object]:
        return [
            change.attrs.get("GridWaitReason")
            for change in grid.queue.changes_since(0, limit=100_000)
            if job in change.job_ids and "GridWaitReason" in change.attrs
        ]

    async def main() -> None:
        async with running(grid, remote, slow_step_after=3.0):
            ids = []
            for job in (quick, slow):
                await wait_for(
                    "the stage in", lambda j=job: (r := _remote_of(grid, j)) and remote.idle(r)
                )
                ids.append(_remote_of(grid, job))
            remote.run(ids[0], "quick\n", 0)
            await wait_for("the quick one done", lambda: not grid.in_queue(quick))
            remote.flag("stage-out-slow")
            remote.run(ids[1], "slow\n", 0)
            await wait_for(
                "the slow one shown",
                lambda: str(grid.ad(slow).get("GridWaitReason")).startswith("fetching the output"),
            )
            remote.flag("stage-out-slow", False)
            await wait_for("the slow one done", lambda: not grid.in_queue(slow))

    run(main())
    assert not [r for r in reasons(quick) if isinstance(r, str)]
    assert (grid.work / "out.0.txt").read_text() == "quick\n"
    assert (grid.work / "out.1.txt").read_text() == "slow\n"
    assert grid.ad(slow)["JobStatus"] == JobStatus.COMPLETED
    assert not isinstance(grid.ad(slow).get("GridWaitReason"), str)  # cleared at the end


def test_running_remotely_is_mirrored_with_the_remote_status_in_one_commit(
    grid: Grid, remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 001 (and the 004) that mirror the remote job commit its GridJobStatus and
    RemoteHost in their own transaction, as HTCondor's gridmanager does: no reader ever
    sees the remote job running beside a local one still idle, or the other way round."""
    [job] = _submit(grid)
    # Each JobQueue call is one transaction: which of them wrote the remote status.
    writes: list[tuple[str, object, object]] = []
    started, evicted, update_many = JobQueue.job_started, JobQueue.job_evicted, JobQueue.update_many

    def job_started(q: JobQueue, job_id: JobId, attrs: Any = None) -> None:
        writes.append(("001", (attrs or {}).get("GridJobStatus"), (attrs or {}).get("RemoteHost")))
        started(q, job_id, attrs)

    def job_evicted(q: JobQueue, job_id: JobId, *args: Any, attrs: Any = None) -> None:
        writes.append(("004", (attrs or {}).get("GridJobStatus"), None))
        evicted(q, job_id, *args, attrs=attrs)

    def update(q: JobQueue, batch: Any) -> Any:
        writes.extend(
            ("update", a["GridJobStatus"], None) for _, a in batch if "GridJobStatus" in a
        )
        return update_many(q, batch)

    monkeypatch.setattr(JobQueue, "job_started", job_started)
    monkeypatch.setattr(JobQueue, "job_evicted", job_evicted)
    monkeypatch.setattr(JobQueue, "update_many", update)

    async def main() -> None:
        async with running(grid, remote):
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            rid = _remote_of(grid, job)
            assert rid is not None
            remote.queue.update(rid, {"RemoteHost": "slot1@execute.b"})
            started(remote.queue, rid)
            await wait_for("running here", lambda: grid.ad(job)["JobStatus"] == JobStatus.RUNNING)
            assert grid.ad(job)["RemoteHost"] == "slot1@execute.b"
            assert grid.ad(job)["GridJobStatus"] == "RUNNING"
            evicted(remote.queue, rid, "the execute node went away")
            await wait_for("idle again here", lambda: grid.ad(job)["JobStatus"] == JobStatus.IDLE)

    run(main())
    assert [w for w in writes if w[0] != "update" or w[1] in ("RUNNING", "IDLE")] == [
        ("001", "RUNNING", "slot1@execute.b"),
        ("004", "IDLE", None),
    ]


def test_a_lost_submit_is_found_by_its_tag_not_sent_twice(grid: Grid, remote: Remote) -> None:
    remote.flag("submit-crash")  # the GAHP dies after the remote queue took the job
    [job] = _submit(grid)

    async def main() -> None:
        async with running(grid, remote) as manager:
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            assert manager.gahps["CONDOR/127.0.0.1:9999/remote@test"].starts == 2

    run(main())
    assert len(remote.all_jobs()) == 1
    assert remote.requests("CONDOR_JOB_SUBMIT") == [1]


def test_a_restart_with_only_a_tag_recovers_or_submits_once(grid: Grid, remote: Remote) -> None:
    """The grid manager died between committing the tag and the GridJobId: one job had
    reached the remote schedd, the other had not."""
    jobs = _submit(grid, 2)
    for job in jobs:
        grid.queue.update(
            job, {"GridSubmitTag": f"htgrid_{job.cluster}_{job.proc}_ab", "Managed": "External"}
        )
    landed = classad.ClassAd('[Cmd = "job.sh"; JobStatus = 5; HoldReasonCode = 16; '
                             'HoldReason = "Spooling input data files"; '
                             f'GridSubmitTag = "htgrid_{jobs[0].cluster}_0_ab"]')  # fmt: skip
    remote.queue.submit(Identity("condor", admin=True), landed, 1)

    async def main() -> None:
        async with running(grid, remote):
            for job in jobs:
                await wait_for(
                    "the stage in", lambda j=job: (r := _remote_of(grid, j)) and remote.idle(r)
                )

    run(main())
    assert _remote_of(grid, jobs[0]) == "1.0"  # found, not submitted again
    assert remote.requests("CONDOR_JOB_SUBMIT") == [1]  # only the job that had not landed
    assert len(remote.all_jobs()) == 2


def test_remote_hold_is_mirrored_and_a_local_release_releases_it(
    grid: Grid, remote: Remote
) -> None:
    [job] = _submit(grid)

    async def main() -> None:
        async with running(grid, remote):
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            rid = _remote_of(grid, job)
            assert rid is not None
            remote.queue.act(
                JobAction.Hold,
                rid,
                Identity("condor", admin=True),
                "scratch disk full",
                code=34,
                subcode=2,
            )
            await wait_for("held here", lambda: grid.ad(job)["JobStatus"] == JobStatus.HELD)
            ad = grid.ad(job)
            assert ad["HoldReason"] == "scratch disk full"
            assert (ad["HoldReasonCode"], ad["HoldReasonSubCode"]) == (34, 2)
            await wait_for("handed back", lambda: grid.ad(job).get("Managed") == "Schedd")
            grid.queue.act(JobAction.Release, job, ROOT)
            await wait_for("released there", lambda: remote.idle(rid))
            assert _remote_of(grid, job) == rid  # the same remote job, not a new one

    run(main())
    assert remote.requests("CONDOR_JOB_SUBMIT") == [1]


def test_local_hold_and_removal_are_forwarded(grid: Grid, remote: Remote) -> None:
    [job] = _submit(grid)

    async def main() -> None:
        async with running(grid, remote):
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            rid = _remote_of(grid, job)
            assert rid is not None
            grid.queue.act(JobAction.Hold, job, ROOT, "wait a bit")
            await wait_for(
                "held there", lambda: (a := remote.ad(rid)) and a["JobStatus"] == JobStatus.HELD
            )
            await wait_for("handed back", lambda: grid.ad(job).get("Managed") == "Schedd")
            grid.queue.act(JobAction.Release, job, ROOT)
            await wait_for("released there", lambda: remote.idle(rid))
            grid.queue.act(JobAction.Remove, job, ROOT, "not needed")
            await wait_for("removed there", lambda: remote.ad(rid) is None)
            await wait_for("gone here", lambda: not grid.in_queue(job))

    run(main())
    assert grid.ad(job)["JobStatus"] == JobStatus.REMOVED
    assert remote.requests("CONDOR_JOB_HOLD") and remote.requests("CONDOR_JOB_REMOVE")


def test_a_vanished_remote_job_is_held_with_a_clear_reason(grid: Grid, remote: Remote) -> None:
    [job] = _submit(grid)

    async def main() -> None:
        async with running(grid, remote):
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            rid = _remote_of(grid, job)
            assert rid is not None
            remote.queue.act(JobAction.Remove, rid, Identity("condor", admin=True), "admin cleanup")
            await wait_for("held here", lambda: grid.ad(job)["JobStatus"] == JobStatus.HELD)
            # The remote id is forgotten (just after the hold): a release submits afresh.
            await wait_for("the remote id cleared", lambda: unset(grid.ad(job), "GridJobId"))

    run(main())
    reason = grid.ad(job)["HoldReason"]
    assert "remote schedd remote@test" in reason
    assert "disappeared" in reason or "removed there" in reason


def test_jobs_wait_while_the_remote_schedd_is_down(grid: Grid, remote: Remote) -> None:
    remote.flag("down")
    [job] = _submit(grid)

    async def main() -> None:
        async with running(grid, remote):
            await wait_for("026", lambda: "026 (" in grid.log())
            await asyncio.sleep(1.0)
            assert grid.ad(job)["JobStatus"] == JobStatus.IDLE
            assert remote.requests("CONDOR_JOB_SUBMIT") == []
            remote.flag("down", on=False)
            await wait_for("025", lambda: "025 (" in grid.log())
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))

    run(main())
    assert _events(grid.log())[:3] == ["026", "025", "027"]


def test_the_lease_of_a_job_submitted_after_a_down_time_counts_from_its_submit(
    grid: Grid, remote: Remote
) -> None:
    # The remote ad is built while the first ping is under way; not kept past a "down".
    remote.flag("down")
    [job] = _submit(grid, extra="JobLeaseDuration = 600\n")

    async def main() -> None:
        async with running(grid, remote):
            await wait_for("026", lambda: "026 (" in grid.log())
            await asyncio.sleep(2.5)
            back = int(time.time())
            remote.flag("down", on=False)
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            rid = _remote_of(grid, job)
            assert rid is not None
            assert remote.ad(rid)["JobLeaseExpiration"] >= back + 600

    run(main())


def test_refused_submit_and_failed_stage_out_hold_the_job(grid: Grid, remote: Remote) -> None:
    remote.flag("submit-refused")
    [refused] = _submit(grid)

    async def main() -> None:
        async with running(grid, remote):
            await wait_for("held", lambda: grid.ad(refused)["JobStatus"] == JobStatus.HELD)
            remote.flag("submit-refused", on=False)
            remote.flag("stage-out-fail")
            [job] = _submit(grid)
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            rid = _remote_of(grid, job)
            assert rid is not None
            remote.run(rid, "x", 0)
            await wait_for("held", lambda: grid.ad(job)["JobStatus"] == JobStatus.HELD)
            assert grid.ad(job)["HoldReasonCode"] == 12
            assert "disk full" in grid.ad(job)["HoldReason"]
            assert remote.ad(rid) is not None  # kept there: a release fetches it again
            remote.flag("stage-out-fail", on=False)
            await wait_for("handed back", lambda: grid.ad(job).get("Managed") == "Schedd")
            grid.queue.act(JobAction.Release, job, ROOT)
            await wait_for("done", lambda: not grid.in_queue(job))

    run(main())
    assert grid.ad(refused)["HoldReason"] == "Attempts to submit failed: Permission denied"


def test_one_status_and_one_lease_request_for_all_jobs(grid: Grid, remote: Remote) -> None:
    jobs = _submit(grid, 20, extra="job_lease_duration = 6\n")

    async def main() -> None:
        async with running(grid, remote) as manager:
            resource = await _all_staged(manager, grid, remote, jobs)
            await wait_for(
                "full polls", lambda: 20 in remote.requests("CONDOR_JOB_STATUS_CONSTRAINED")
            )
            before = (resource.stats.polls, resource.stats.status_commands)
            await wait_for(
                "a lease renewal", lambda: 20 in remote.requests("CONDOR_JOB_UPDATE_LEASE")
            )
            # One shared expiration, the same on both sides (checked while the manager
            # runs: stopped in the middle of a renewal, the local side lags behind).
            await wait_for(
                "the renewal recorded",
                lambda: (
                    _leases(grid, remote, jobs)
                    and len({grid.ad(job)["GridJobLeaseExpiration"] for job in jobs}) == 1
                ),
            )
            await wait_for("more polls", lambda: resource.stats.polls >= before[0] + 3)
            polls = resource.stats.polls - before[0]
            assert resource.stats.status_commands - before[1] == polls  # one request each

    run(main())


def test_jobs_just_submitted_are_not_renewed_before_a_third_of_their_lease(
    grid: Grid, remote: Remote
) -> None:
    # Their remote copies were born with a lease: renewing it at once costs the remote
    # schedd an edit of every job for nothing.
    jobs = _submit(grid, 5, extra="job_lease_duration = 600\n")

    async def main() -> None:
        async with running(grid, remote) as manager:
            resource = await _all_staged(manager, grid, remote, jobs)
            first = resource.stats.polls
            await wait_for("three polls", lambda: resource.stats.polls >= first + 3)
            assert remote.requests("CONDOR_JOB_UPDATE_LEASE") == []
            assert _leases(grid, remote, jobs)  # the local side knows the born lease
            assert await resource.renew_leases(force=True)  # a forced one still goes
            assert remote.requests("CONDOR_JOB_UPDATE_LEASE") == [5]

    run(main())


def test_polls_that_find_nothing_new_write_nothing_here(grid: Grid, remote: Remote) -> None:
    """Jobs staged and idle there: a poll that finds them as they were changes nothing in
    the local queue, whose every change each of its followers reads (the event log
    writer, the grid manager itself)."""
    jobs = _submit(grid, 5)

    async def main() -> None:
        async with running(grid, remote) as manager:
            resource = await _all_staged(manager, grid, remote, jobs)
            await wait_for("the stage-ins recorded", lambda: all(_grid_id(grid, j) for j in jobs))
            seq, first = grid.queue.last_seq, resource.stats.polls
            await wait_for("three polls", lambda: resource.stats.polls >= first + 3)
            assert grid.queue.last_seq == seq
            assert all(grid.ad(job)["JobStatus"] == 1 for job in jobs)

    run(main())


async def _all_staged(
    manager: GridManager, grid: Grid, remote: Remote, jobs: list[JobId]
) -> CondorResource:
    """Once every job is staged in and idle there: the remote schedd's resource."""
    for job in jobs:
        await wait_for("the stage in", lambda j=job: (r := _remote_of(grid, j)) and remote.idle(r))
    resource = manager.resources[RESOURCE]
    assert isinstance(resource, CondorResource)
    return resource


def _leases(grid: Grid, remote: Remote, jobs: list[JobId]) -> bool:
    """Whether each job's GridJobLeaseExpiration is its remote copy's JobLeaseExpiration."""
    for job in jobs:
        there = remote.ad(_remote_of(grid, job) or "")
        if there is None or there["JobLeaseExpiration"] != grid.ad(job)["GridJobLeaseExpiration"]:
            return False
    return True


def test_a_sandbox_too_large_holds_with_codes_32_and_33(grid: Grid, remote: Remote) -> None:
    """The GAHP's "too large" refusals hold at once (no retry fits them), whatever else
    their text says, with HTCondor's MaxTransferInput/OutputSizeExceeded codes."""
    remote.flag("stage-in-too-large")
    [big_in] = _submit(grid)

    async def main() -> None:
        async with running(grid, remote):
            await wait_for("held", lambda: grid.ad(big_in)["JobStatus"] == JobStatus.HELD)
            remote.flag("stage-in-too-large", on=False)
            remote.flag("stage-out-too-large")
            [job] = _submit(grid)
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            rid = _remote_of(grid, job)
            assert rid is not None
            remote.run(rid, "x", 0)
            await wait_for("held", lambda: grid.ad(job)["JobStatus"] == JobStatus.HELD)
            ad = grid.ad(job)
            assert ad["HoldReasonCode"] == 33
            assert "Transfer output too large: " in ad["HoldReason"]
            assert remote.ad(rid) is not None  # kept there, as for any failed stage out

    run(main())
    ad = grid.ad(big_in)
    assert ad["HoldReasonCode"] == 32
    assert "Transfer input too large: " in ad["HoldReason"]
    assert "MAX_TRANSFER_INPUT_MB" in ad["HoldReason"]
    assert len(remote.requests("CONDOR_JOB_STAGE_IN")) == 2  # one per job: never retried


def test_no_status_answers_make_the_status_unknown_then_known(grid: Grid, remote: Remote) -> None:
    [job] = _submit(grid)

    async def main() -> None:
        async with running(grid, remote, status_unknown_after=1.5) as manager:
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            resource = manager.resources[RESOURCE]
            remote.flag("status-busy")
            await wait_for("029", lambda: "029" in _events(grid.log()))
            assert grid.ad(job)["CurrentStatusUnknown"] is True
            assert resource.up  # the schedd answers pings: only the statuses are missing
            polls = resource.stats.polls
            await wait_for("5 more polls", lambda: resource.stats.polls >= polls + 5)
            remote.flag("status-busy", on=False)
            await wait_for("030", lambda: "030" in _events(grid.log()))
            assert grid.ad(job)["CurrentStatusUnknown"] is False

    run(main())
    assert _events(grid.log()) == ["027", "029", "030"]


def test_each_token_file_a_job_names_has_a_gahp_server_of_its_own(
    grid: Grid, remote: Remote
) -> None:
    """ScitokensFile: the job's server presents that token (--token-file), and is not
    shared with jobs naming another file, or none (HTCondor keys both by it)."""
    plain = _submit(grid)
    named = _submit(grid, 2, "scitokens_file = tokens/$(Process).token\n")
    (grid.work / "tokens").mkdir()
    for proc in (0, 1):
        (grid.work / "tokens" / f"{proc}.token").write_text("a token\n")
    jobs = [*plain, *named]
    servers: dict[str, tuple[str, ...]] = {}
    resources: set[str] = set()

    async def main() -> None:
        async with running(grid, remote) as manager:
            await wait_for("the submits", lambda: all(_remote_of(grid, j) for j in jobs))
            servers.update((key, handle.argv) for key, handle in manager.gahps.items())
            resources.update(manager.resources)

    run(main())
    files = [f"{grid.work}/tokens/{proc}.token" for proc in (0, 1)]
    assert [grid.ad(job)["ScitokensFile"] for job in named] == files
    base = "CONDOR/127.0.0.1:9999/remote@test"
    assert set(servers) == {base, *(f"{base}#{path}" for path in files)}
    assert "--token-file" not in servers[base]
    for path in files:
        assert servers[f"{base}#{path}"][-2:] == ("--token-file", path)
    assert resources == {RESOURCE, *(f"{RESOURCE}#{path}" for path in files)}
    assert remote.requests("CONDOR_JOB_SUBMIT") == [1, 1, 1]


def test_a_job_naming_a_token_file_that_cannot_be_read_is_held_saying_so(
    grid: Grid, remote: Remote
) -> None:
    """Its server would present no token and B refuse it for ever: held at once, with
    the file and the reason, and no server started for it; the other job goes on."""
    (missing,) = _submit(grid, 1, "scitokens_file = nosuch.token\n")
    (plain,) = _submit(grid)
    servers: list[str] = []

    async def main() -> None:
        async with running(grid, remote) as manager:
            await wait_for("the hold", lambda: grid.ad(missing)["JobStatus"] == 5)
            await wait_for("the other job", lambda: bool(_remote_of(grid, plain)))
            servers.extend(manager.gahps)

    run(main())
    ad = grid.ad(missing)
    path = f"{grid.work}/nosuch.token"
    assert ad["HoldReason"] == f"cannot read the credential {path}: No such file or directory"
    assert ad["HoldReasonCode"] == 4
    assert servers == ["CONDOR/127.0.0.1:9999/remote@test"]


def test_a_failed_removal_of_the_remote_copy_is_tried_again_across_a_restart(
    grid: Grid, remote: Remote, caplog: pytest.LogCaptureFixture
) -> None:
    """The remote schedd cannot be reached to let the finished job's copy go: the grid
    manager tries again with a growing pause, keeps what it owes on disk, and a restarted
    one lets the copy (and its sandbox) go once the schedd answers."""
    [job] = _submit(grid)
    owed = grid.home / "spool" / "gridmanager" / "leftovers"

    async def main() -> None:
        remote.flag("update-down")
        async with running(grid, remote) as manager:
            await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
            rid = _remote_of(grid, job)
            assert rid is not None
            remote.run(rid, "hello from B\n", 0)
            await wait_for("the local job to finish", lambda: not grid.in_queue(job))
            updates = lambda: len(remote.requests("CONDOR_JOB_UPDATE"))  # noqa: E731
            await wait_for("two more tries", lambda: updates() >= 3)
            await wait_for("a record of the third", lambda: manager.leftovers.owed()[0].tries >= 3)
            [left] = manager.leftovers.owed()
            assert (left.job, left.remote) == (job, rid)
            assert "connection refused" in left.last_error
        assert (remote.state / "spool" / rid.replace(".", "/")).exists()
        assert remote.ad(rid) is not None and [p.name for p in owed.iterdir()] == ["1.0.json"]
        remote.flag("update-down", on=False)
        async with running(grid, remote) as manager:
            await wait_for("the remote copy to go", lambda: remote.ad(rid) is None)
            await wait_for("nothing owed", lambda: not manager.leftovers.owed())
        assert not (remote.state / "spool" / rid.replace(".", "/")).exists()
        assert list(owed.iterdir()) == []

    caplog.set_level("INFO", "htgrid.grid")
    run(main())
    assert (grid.work / "out.0.txt").read_text() == "hello from B\n"
    where = "its copy at the remote schedd remote@test (pool 127.0.0.1:9999) as job 1.0"
    assert f"job 1.0: could not remove {where} (LeaveJobInQueue = false): Failed" in caplog.text
    assert "removing its copy at the remote schedd remote@test" in caplog.text
    assert f"job 1.0: removed {where}" in caplog.text


def test_a_kill_between_the_exit_and_the_release_of_the_remote_copy_loses_no_release(
    grid: Grid, remote: Remote
) -> None:
    """kill -9 of the grid manager (and its GAHP) after the local job's exit is committed
    but before the remote copy was let go: the next grid manager lets it go."""
    [job] = _submit(grid)
    owed = grid.home / "spool" / "gridmanager" / "leftovers"
    hung = remote.state / "control" / "hung.pid"

    async def main() -> None:
        remote.flag("update-hang")
        gahp = (sys.executable, str(FAKE), "--state", str(remote.state))
        manager = GridManager(grid.home, config=FAST, grid_types={"condor": condor_type(gahp)})
        task = asyncio.create_task(manager.run(asyncio.Event()))
        await wait_for("the stage in", lambda: (r := _remote_of(grid, job)) and remote.idle(r))
        rid = _remote_of(grid, job)
        assert rid is not None
        remote.run(rid, "hello from B\n", 0)
        await wait_for("the local job to finish", lambda: not grid.in_queue(job))
        await wait_for("the release under way", hung.exists)
        os.kill(int(hung.read_text()), signal.SIGKILL)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert remote.ad(rid) is not None
        assert [p.name for p in owed.iterdir()] == ["1.0.json"]
        remote.flag("update-hang", on=False)
        async with running(grid, remote) as manager:
            await wait_for("the remote copy to go", lambda: remote.ad(rid) is None)
            await wait_for("nothing owed", lambda: not manager.leftovers.owed())
        assert not (remote.state / "spool" / rid.replace(".", "/")).exists()
        assert list(owed.iterdir()) == []

    run(main())
    assert (grid.work / "out.0.txt").read_text() == "hello from B\n"


def test_a_release_expected_for_a_job_still_in_the_queue_is_left_to_its_flow(
    tmp_path: Path,
) -> None:
    """A crash after the release was recorded but before the exit was committed: the job,
    still in the queue, fetches its output and lets the copy go itself; the sweep must not
    let it go first (the remote schedd would drop the job and its output)."""
    from htgrid.gahp import SystemClock
    from htgrid.grid._leftovers import Leftovers, LeftoverSweep

    store = Leftovers(tmp_path / "leftovers")
    tried: list[str] = []

    async def resource_of(attrs: object) -> object:
        tried.append("resource")
        raise AssertionError("the sweep reached for the resource")

    asked: list[JobId] = []

    async def in_queue(job: JobId) -> bool:
        asked.append(job)
        return job == JobId(1, 0)

    async def main() -> None:
        sweep = LeftoverSweep(store, SystemClock(), lambda: FAST, resource_of, in_queue)  # type: ignore[arg-type]
        await sweep.expect(JobId(1, 0), "5.0", {"GridResource": RESOURCE}, what="its copy")
        task = asyncio.create_task(sweep.run())
        await wait_for("the sweep to look at the record", lambda: asked)
        assert sweep.owed() == []
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert [item.job for item in store.load()] == [JobId(1, 0)]
        await sweep.settled(JobId(1, 0))

    run(main())
    assert tried == []
    assert store.load() == []


def test_a_record_of_a_removal_owed_that_cannot_be_read_is_set_aside(tmp_path: Path) -> None:
    from htgrid.grid._leftovers import Leftover, Leftovers

    store = Leftovers(tmp_path / "leftovers")
    kept = Leftover(JobId(3, 1), "7.0", {"GridResource": RESOURCE}, 2, 10.0, "down", "its copy")
    store.keep(kept)
    (tmp_path / "leftovers" / "4.0.json").write_text("{not json")
    assert store.load() == [kept]
    assert sorted(p.name for p in store.directory.iterdir()) == ["3.1.json", "4.0.json.bad"]
    assert stat.S_IMODE((store.directory / "3.1.json").stat().st_mode) == 0o600
    store.drop(JobId(3, 1))
    assert store.load() == []
