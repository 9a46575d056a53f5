"""The grid manager's pieces on their own: ids, the submit ad, status ads, throttles, explain."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

import htgrid.classad as classad
from htgrid.gahp import GahpProtocolError
from htgrid.gahp.commands.blah import StatusAd
from htgrid.grid import (
    GridManagerConfig,
    Resource,
    ResourceState,
    UnsupportedGridJob,
    explain_grid_job,
    grid_type_of,
)
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._gridids import new_tag
from htgrid.grid._task import Services
from htgrid.grid.batch import BatchJobId, BatchResourceName, build_submit_ad, remote_attrs
from htgrid.queue import JobAction, JobId

# ---- ids ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gtype"),
    [("batch slurm", "batch"), ("PBS", "batch"), ("sge", "batch"), ("condor a b", "condor"),
     ("ec2 https://x", "ec2"), ("", "")],
)  # fmt: skip
def test_grid_type_of(text: str, gtype: str) -> None:
    assert grid_type_of(text) == gtype


def test_batch_resource_names() -> None:
    assert BatchResourceName.parse("batch SLURM").key == "batch slurm"
    assert BatchResourceName.parse("pbs").key == "batch pbs"
    assert BatchResourceName.parse("blah lsf").lrms == "lsf"
    with pytest.raises(UnsupportedGridJob, match="names no batch system"):
        BatchResourceName.parse("batch")
    # A batch system on another host (over ssh, as BOSCO): see test_bosco.py.
    assert BatchResourceName.parse("batch slurm alice@login.example.org").remote is not None
    with pytest.raises(UnsupportedGridJob, match="is not \\[user@\\]host"):
        BatchResourceName.parse("batch slurm alice@login.example.org bob@elsewhere")
    with pytest.raises(UnsupportedGridJob, match="not a batch resource"):
        BatchResourceName.parse("condor schedd pool")


def test_batch_job_ids_round_trip() -> None:
    phase1 = BatchJobId("slurm", "htgrid_1_0_abc")
    phase2 = BatchJobId("slurm", "htgrid_1_0_abc", "slurm/20261121/77")
    assert str(phase1) == "batch slurm htgrid_1_0_abc"
    assert str(phase2) == "batch slurm htgrid_1_0_abc slurm/20261121/77"
    assert BatchJobId.parse(str(phase1)) == phase1
    assert BatchJobId.parse(str(phase2)) == phase2
    for bad in (None, 3, classad.Value.Undefined, "", "batch slurm", "ec2 x y z"):
        assert BatchJobId.parse(bad) is None


def test_tags_are_fresh() -> None:
    tags = {new_tag(4, 2) for _ in range(1000)}
    assert len(tags) == 1000
    assert all(tag.startswith("htgrid_4_2_") for tag in tags)


# ---- the submit ad -------------------------------------------------------------------------


def _ad(**attrs: Any) -> classad.ClassAd:
    ad = classad.ClassAd()
    for name, value in attrs.items():
        ad[name] = classad.ExprTree(value) if isinstance(value, Expr) else value
    return ad


class Expr(str):
    """An attribute given as expression text."""


def test_submit_ad_holds_literals_and_the_tag() -> None:
    ad = _ad(
        Cmd="prog.sh",
        Iwd="/home/alice/run",
        Arguments="a 'b c'",
        Environment="X=1",
        Out="out",
        Err="err",
        In="/dev/null",
        TransferInput="data.txt",
        RequestMemory=Expr("1024 * 2"),
        BatchQueue="short",
        BatchProject="physics",
        BatchRuntime=Expr("60 * 60"),
        RequestGPUs=2,
        x509userproxy="proxy.pem",
        GridResource="batch slurm",
        Rank=0.0,
    )
    sent = classad.ClassAd(build_submit_ad(ad, "slurm", "htgrid_1_0_abc"))
    assert sent["gridtype"] == "slurm"
    assert sent["ClientJobId"] == "htgrid_1_0_abc"
    assert sent["Cmd"] == "/home/alice/run/prog.sh"
    assert sent["x509UserProxy"] == "/home/alice/run/proxy.pem"
    assert sent["RequestMemory"] == 2048
    assert sent["BatchRuntime"] == 3600
    assert sent["Queue"] == "short"
    assert sent["BatchProject"] == "physics"
    assert sent["GPUNumber"] == 2
    assert sent["Arguments"] == "a 'b c'"
    assert "Rank" not in sent
    assert "\n" not in build_submit_ad(ad, "slurm", "t")


def test_submit_ad_remote_overrides_and_no_staging() -> None:
    ad = _ad(
        Cmd="/bin/prog",
        Iwd="/data",
        Arguments="local args",
        Env="A=1",
        REMOTE_Environment="B=2",
        REMOTE_Iwd="/scratch/run",
        TransferExecutable=False,
        NotThere=Expr("undefined"),
    )
    sent = classad.ClassAd(build_submit_ad(ad, "pbs", "t"))
    assert sent["Environment"] == "B=2"
    assert "Env" not in sent  # a remote environment replaces the whole group
    assert sent["Iwd"] == "/scratch/run"
    assert sent["StageCmd"] is False
    assert sent["Arguments"] == "local args"
    assert "NotThere" not in sent


# ---- status ads ----------------------------------------------------------------------------


def test_status_ads() -> None:
    done = StatusAd.of(
        '[BatchJobId = "7"; BlahJobId = "slurm/x/7"; JobStatus = 4; ExitBySignal = false; '
        "ExitCode = 3; RemoteWallClockTime = 12.5]"
    )
    assert (done.job_status, done.exit_code, done.exit_signal) == (4, 3, None)
    assert done.blah_id == "slurm/x/7"
    assert remote_attrs(done) == {"RemoteWallClockTime": 12.5}
    killed = StatusAd.of("[JobStatus = 4; ExitBySignal = true; ExitSignal = 9]")
    assert killed.exit_signal == 9
    held = StatusAd.of(
        '[JobStatus = 5; HoldReason = "no output"; HoldReasonCode = 12; HoldReasonSubCode = 2]'
    )
    assert (held.hold_reason, held.hold_code, held.hold_subcode) == ("no output", 12, 2)
    missing = StatusAd.of('[JobStatus = 0; BlahError = "Job slurm/x/8 not found"]')
    assert missing.not_found
    unasked = StatusAd.of('[JobStatus = 0; BlahError = "squeue timed out"]')
    assert not unasked.not_found
    assert StatusAd.of("[BatchJobId = 1]", job_status=2).job_status == 2
    for bad in ("[", "[BatchJobId = 1]", "[JobStatus = undefined]"):
        with pytest.raises(GahpProtocolError, match="status ad"):
            StatusAd.of(bad)


# ---- the resource's throttles ----------------------------------------------------------------


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)


class _Resource(Resource):
    async def ping(self) -> str | None:
        return None

    async def poll(self, jobs: list[Any]) -> None:
        return None


@dataclass
class _Job:
    job_id: JobId
    woken: list[int] = field(default_factory=list)

    def wake(self) -> None:
        self.woken.append(1)


def _resource(**config: Any) -> tuple[_Resource, ManualClock]:
    clock = ManualClock()
    settings = GridManagerConfig(**config)
    services = Services(settings, clock, cast(Any, None), cast(Any, None))
    gahp = GahpHandle("batch", ["true"], {}, clock=clock, config=settings)

    async def build() -> _Resource:
        return _Resource(BatchResourceName("test"), gahp, services)

    return asyncio.run(build()), clock


def test_submit_slots_are_first_come_first_served() -> None:
    resource, _ = _resource(max_submitted_per_resource=2)
    jobs = [_Job(JobId(1, i)) for i in range(4)]
    take = lambda job: resource.try_acquire(cast(Any, job))  # noqa: E731
    assert take(jobs[0]) and take(jobs[1])
    assert not take(jobs[2]) and not take(jobs[3])
    assert resource.slots() == (2, 2, 2)
    resource.release(cast(Any, jobs[0]))
    assert jobs[2].woken and not jobs[3].woken  # the first waiting job is told
    assert not take(jobs[3])  # a later job may not jump the queue
    assert take(jobs[2])
    assert take(jobs[2])  # holding a slot already
    resource.hold_slot(cast(Any, jobs[3]))  # a recovered job counts at once
    assert resource.slots() == (3, 2, 0)


def test_transient_submit_failures_pause_the_resource() -> None:
    resource, clock = _resource(failure_threshold=3, retry_initial=10.0, retry_max=60.0)
    resource.submit_failed(transient=False)  # a job's own fault: no pause
    for _ in range(2):
        resource.submit_failed(transient=True)
    assert resource.submit_pause() == 0
    resource.submit_failed(transient=True)
    assert resource.submit_pause() == 10.0
    resource.submit_failed(transient=True)
    assert resource.submit_pause() == 20.0
    clock.now += 15
    assert resource.submit_pause() == 5.0
    resource.submit_succeeded()
    assert resource.submit_pause() == 0
    assert resource.failures == 0


def test_failures_of_submits_in_flight_together_count_once() -> None:
    # A batch system that stalls fails every submit in flight at once: those 50 are one
    # outage, not 50 failures in a row (which paused the resource's submits for 300 s).
    resource, clock = _resource(failure_threshold=3, retry_initial=5.0, retry_max=300.0)
    for _ in range(50):
        resource.submit_failed(transient=True, sent_at=clock.now - 1)
    assert resource.failures == 1 and resource.submit_pause() == 0
    assert resource.stats.submit_failures == 50
    for attempt in (2, 3):  # the retries, each sent after the failure before it counted
        clock.now += 5
        sent = clock.now
        clock.now += 1
        for _ in range(50):
            resource.submit_failed(transient=True, sent_at=sent)
        assert resource.failures == attempt
    assert resource.submit_pause() == 5.0  # the threshold's first wait, not the longest
    resource.submit_failed(transient=True)  # when it was sent is not known: counted
    assert resource.failures == 4 and resource.submit_pause() == 10.0


def test_a_resource_back_up_lifts_the_submit_pause() -> None:
    resource, _ = _resource(failure_threshold=1, retry_initial=300.0, retry_max=300.0)
    resource.submit_failed(transient=True)
    assert resource.submit_pause() == 300.0

    async def down_then_up() -> None:
        await resource._set_state(ResourceState.UP, None)
        assert resource.submit_pause() == 300.0  # up all along: the pause stands
        await resource._set_state(ResourceState.DOWN, "slurmctld does not answer")
        await resource._set_state(ResourceState.UP, None)

    asyncio.run(down_then_up())
    assert resource.submit_pause() == 0


class _SteppingClock(ManualClock):
    """Each sleep moves time on by its length at once, and is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def test_a_down_resource_is_pinged_again_sooner_at_first() -> None:
    # A stall of a minute must not keep the resource down for the whole
    # down_ping_interval: the pings back off from retry_initial up to it.
    clock = _SteppingClock()
    settings = GridManagerConfig(retry_initial=5.0, retry_max=300.0, down_ping_interval=60.0)
    services = Services(settings, clock, cast(Any, None), cast(Any, None))
    gahp = GahpHandle("batch", ["true"], {}, clock=clock, config=settings)
    answers = ["down"] * 6 + [None]

    class Stalled(_Resource):
        async def ping(self) -> str | None:
            return answers.pop(0)

    async def run() -> list[float]:
        resource = Stalled(BatchResourceName("test"), gahp, services)
        loop = asyncio.create_task(resource._ping_loop())
        while answers:
            await asyncio.sleep(0)
        for _ in range(5):
            await asyncio.sleep(0)
        assert resource.up
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        return clock.sleeps

    assert asyncio.run(run()) == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]


def test_backoff_doubles_up_to_the_limit() -> None:
    config = GridManagerConfig(retry_initial=5.0, retry_max=300.0)
    assert [config.backoff(n) for n in (1, 2, 3, 7, 20)] == [5.0, 10.0, 20.0, 300.0, 300.0]


# ---- explain ---------------------------------------------------------------------------------


def _grid_ad(**attrs: Any) -> classad.ClassAd:
    base: dict[str, Any] = {"JobUniverse": 9, "GridResource": "batch slurm", "JobStatus": 1}
    base.update(attrs)
    return _ad(**base)


def test_explain_every_stage() -> None:
    assert explain_grid_job(_ad(JobUniverse=5)) == ["This is not a grid universe job."]
    assert "cannot run grid type 'cream'" in explain_grid_job(_grid_ad(GridResource="cream x"))[0]
    fresh = explain_grid_job(_grid_ad())
    assert fresh[1].startswith("Not submitted yet")
    throttled = explain_grid_job(_grid_ad(GridWaitReason="waiting for a submit slot since X"))
    assert throttled[1] == "Waiting: waiting for a submit slot since X."
    down = explain_grid_job(_grid_ad(GridResourceUnavailableTime=1_700_000_000))
    assert down[1].startswith("Resource 'batch slurm' has been down since 2023-11-")
    tagged = explain_grid_job(_grid_ad(GridJobId="batch slurm htgrid_1_0_ab"))
    assert tagged[1].startswith("Being submitted with tag htgrid_1_0_ab")
    running = explain_grid_job(
        _grid_ad(
            JobStatus=2,
            Managed="External",
            GridJobId="batch slurm htgrid_1_0_ab slurm/20261121/9",
            GridJobSubmitTime=1_700_000_000,
            GridJobStatus="RUNNING",
            LastRemoteStatusUpdate=1_700_000_100,
        )
    )
    assert running[1].startswith(
        "Submitted to 'batch slurm' as batch job slurm/20261121/9 at 2023-11-"
    )
    assert running[2].startswith("The batch system last reported it RUNNING (at 2023-11-")
    held = explain_grid_job(
        _grid_ad(JobStatus=5, HoldReason="bad", HoldReasonCode=0, HoldReasonSubCode=7)
    )
    assert held[1] == "Held: bad (HoldReasonCode 0 Unspecified, HoldReasonSubCode 7)."
    removing = explain_grid_job(
        _grid_ad(JobStatus=3, Managed="External", GridJobId="batch slurm t slurm/1/2")
    )
    assert "cancels batch job slurm/1/2" in removing[1]


# ---- the queue thread's group commit ---------------------------------------------------------


def test_durable_writes_are_group_committed(tmp_path: Any) -> None:
    from htgrid.grid._queueio import QueueIO
    from htgrid.queue import Identity, JobNotFound, JobQueue

    root = Identity("root")
    setup = JobQueue.open(tmp_path, fsync=False)
    cluster = setup.submit(root, _ad(Cmd="/bin/true", JobUniverse=9), 50)
    gone = setup.submit(root, _ad(Cmd="/bin/true", JobUniverse=9), 1)
    setup.act(JobAction.Remove, f"{gone}.0", root)  # leaves the queue at once
    setup.close()

    async def main() -> tuple[int, list[Any]]:
        io = QueueIO(JobQueue.open(tmp_path, fsync=False), JobQueue.open(tmp_path, fsync=True))
        ids = [JobId(cluster, proc) for proc in range(50)] + [JobId(gone, 0)]
        results = await asyncio.gather(
            *(io.update(i, {"GridJobId": f"batch fork t{i.proc}"}, durable=True) for i in ids),
            return_exceptions=True,
        )
        syncs = io.syncs
        await io.close()
        return syncs, results

    syncs, results = asyncio.run(main())
    assert results[:50] == [None] * 50
    assert isinstance(results[50], JobNotFound)
    assert syncs < 10  # batches, not one fsync per job
    check = JobQueue.open(tmp_path, fsync=False)
    assert [ad["GridJobId"] for ad in check.query(f"ClusterId == {cluster}")] == [
        f"batch fork t{proc}" for proc in range(50)
    ]
    check.close()


def test_updates_waiting_together_go_in_one_transaction(tmp_path: Any) -> None:
    from htgrid.grid._queueio import QueueIO
    from htgrid.queue import Identity, JobNotFound, JobQueue, ProtectedAttribute

    root = Identity("root")
    setup = JobQueue.open(tmp_path, fsync=False)
    cluster = setup.submit(root, _ad(Cmd="/bin/true", JobUniverse=9), 100)
    setup.close()

    async def main() -> tuple[int, list[Any]]:
        io = QueueIO(JobQueue.open(tmp_path, fsync=False))
        updates = [(JobId(cluster, proc), {"GridJobStatus": f"s{proc}"}) for proc in range(100)]
        updates += [(JobId(cluster + 1, 0), {"GridJobStatus": "x"})]
        updates += [(JobId(cluster, 7), {"Owner": "bob"})]
        results = await asyncio.gather(
            *(io.update(job, attrs) for job, attrs in updates), return_exceptions=True
        )
        transactions = io.transactions
        await io.close()
        return transactions, results

    transactions, results = asyncio.run(main())
    assert results[:100] == [None] * 100
    assert isinstance(results[100], JobNotFound) and isinstance(results[101], ProtectedAttribute)
    assert transactions < 10  # batches, not a transaction per job
    check = JobQueue.open(tmp_path, fsync=False)
    found = check.query(f"ClusterId == {cluster}")
    assert [ad["GridJobStatus"] for ad in found] == [f"s{proc}" for proc in range(100)]
    assert {ad["Owner"] for ad in found} == {"root"}
    check.close()


# ---- the 001 event of a grid job ---------------------------------------------------------------


def test_a_grid_jobs_execute_event_names_its_grid_resource() -> None:
    """HTCondor's gridmanager (WriteExecuteEventToUserLog) sets the execute host of a grid
    job's 001 to its GridResource; a vanilla job's names the host it ran on."""
    from htgrid.eventlog import ExecuteEvent
    from htgrid.queue import Change, ChangeKind, JobStatus
    from htgrid.schedd._userlog import events_for

    started = Change(
        seq=1,
        time=1_700_000_000,
        kind=ChangeKind.STATUS,
        cluster=7,
        procs=range(1),
        status=JobStatus.RUNNING,
        last_status=JobStatus.IDLE,
    )
    resource = "condor remote@site.example.org site.example.org:9618"
    grid = _ad(JobUniverse=9, GridResource=resource, RemoteHost="slot1@execute.b")
    vanilla = _ad(JobUniverse=5)
    for ad, host in ((grid, resource), (vanilla, "<127.0.0.1:9618>")):
        event = events_for(started, JobId(7, 0), ad, "<127.0.0.1:9618>")
        assert isinstance(event, ExecuteEvent)
        assert event.execute_host == host
