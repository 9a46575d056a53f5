"""The job router's passes over a real queue, the grid manager played by the test:
routing, the source kept in step with its routed copy, limits, restarts, and why a job
is not routed."""

from __future__ import annotations

import pytest

from htgrid.classad import ClassAd
from htgrid.queue import Identity, JobAction, JobId, JobNotFound, JobQueue, JobStatus
from htgrid.router import JobRouter, RouterConfig, explain_routes

ALICE = Identity("alice")
ADMIN = Identity("admin", admin=True)
ROUTES = {
    "JOB_ROUTER_ROUTE_NAMES": "Big Small",
    "JOB_ROUTER_ROUTE_Big": 'REQUIREMENTS RequestCpus > 4\nGridResource = "batch slurm"\n'
    'SET BatchQueue "wide"',
    "JOB_ROUTER_ROUTE_Small": 'REQUIREMENTS RequestCpus <= 4 && queue =!= "none"\n'
    'GridResource = "batch fork"\nMaxIdleJobs = 2\nJobFailureTest = ExitCode =!= 0\n'
    "EVALSET RequestMemory $(MY.maxMemory:2000)",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def router(queue: JobQueue, clock: Clock | None = None, **knobs: str) -> JobRouter:
    return JobRouter(queue, RouterConfig.from_knobs({**ROUTES, **knobs}), clock=clock or Clock())


def submit(queue: JobQueue, cpus: int = 1, **attrs: object) -> JobId:
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "RequestCpus": cpus, **attrs})
    return JobId(queue.submit(ALICE, ad), 0)


def routed_of(queue: JobQueue, source: JobId) -> list[ClassAd]:
    return [
        ad
        for ad in queue.query(f'RoutedFromJobId == "{source}"')
        if ad["JobStatus"] != JobStatus.REMOVED
    ]


def status_of(queue: JobQueue, job: JobId) -> JobStatus:
    """The job's status in the queue, else in the history."""
    try:
        return JobStatus(queue.get(job)["JobStatus"])
    except JobNotFound:
        return JobStatus(queue.history(f"ClusterId == {job.cluster}")[0]["JobStatus"])


def only_routed(queue: JobQueue, source: JobId) -> JobId:
    ads = routed_of(queue, source)
    assert len(ads) == 1, ads
    return JobId(ads[0]["ClusterId"], ads[0]["ProcId"])


def test_the_first_matching_route_takes_the_job_and_makes_its_grid_copy(queue: JobQueue) -> None:
    big, small = submit(queue, cpus=8), submit(queue, cpus=1, maxMemory=4096)
    assert router(queue).cycle() > 0
    big_copy = queue.get(only_routed(queue, big))
    assert big_copy["JobUniverse"] == 9 and big_copy["GridResource"] == "batch slurm"
    assert big_copy["BatchQueue"] == "wide" and big_copy["RouteName"] == "Big"
    assert big_copy["Remote_JobUniverse"] == 5 and big_copy["Owner"] == "alice"
    small_copy = queue.get(only_routed(queue, small))
    assert small_copy["GridResource"] == "batch fork" and small_copy["RequestMemory"] == 4096
    source = queue.get(big)
    assert source["Managed"] == "External" and source["ManagedManager"] == "jobrouter"
    assert source["RoutedToJobId"] == f"{big_copy['ClusterId']}.0"
    assert source["JobStatus"] == JobStatus.IDLE


def test_the_source_mirrors_its_copy_to_the_end(queue: JobQueue) -> None:
    src = submit(queue)
    r = router(queue)
    r.cycle()
    copy = only_routed(queue, src)
    queue.job_started(copy)
    r.cycle()
    assert queue.get(src)["JobStatus"] == JobStatus.RUNNING
    queue.act(JobAction.Hold, str(copy), ADMIN, "the batch system said no", code=0)
    r.cycle()
    held = queue.get(src)
    assert held["JobStatus"] == JobStatus.HELD and held["HoldReason"] == "the batch system said no"
    assert held["HoldCopiedFromTargetJob"] is True
    queue.act(JobAction.Release, str(copy), ADMIN)
    r.cycle()
    assert queue.get(src)["JobStatus"] == JobStatus.IDLE
    queue.job_started(copy)
    queue.job_exited(copy, 0, usage={"RemoteWallClockTime": 12.0})
    r.cycle()
    with pytest.raises(JobNotFound):
        queue.get(src)  # completed, and gone to the history (no LeaveJobInQueue)
    done = queue.history(f"ClusterId == {src.cluster}")[0]
    assert done["JobStatus"] == JobStatus.COMPLETED and done["ExitCode"] == 0
    assert done["RemoteWallClockTime"] == 12.0
    assert not queue.query(f"ClusterId == {copy.cluster}")  # the copy let go too
    assert r.route_stats(r.config.routes[1]).succeeded == 1


def test_removing_or_holding_the_source_removes_its_copy(queue: JobQueue) -> None:
    removed, held = submit(queue), submit(queue)
    r = router(queue)
    r.cycle()
    copies = only_routed(queue, removed), only_routed(queue, held)
    queue.act(JobAction.Remove, str(removed), ALICE)
    queue.act(JobAction.Hold, str(held), ALICE)
    r.cycle()
    for copy in copies:
        assert status_of(queue, copy) == JobStatus.REMOVED
    with pytest.raises(JobNotFound):
        queue.get(removed)  # the source went to the history
    source = queue.get(held)
    assert source["JobStatus"] == JobStatus.HELD and source["Managed"] == "Schedd"
    queue.act(JobAction.Release, str(held), ALICE)
    r.cycle()  # released by its user: routed anew
    assert only_routed(queue, held) not in copies


def test_a_source_removed_with_its_copy_leaves_the_queue(queue: JobQueue) -> None:
    # `rm -all` removes both; the grid manager may let the copy go before the router's
    # next pass, which then finds a removed source with no copy. It was handed back to
    # the schedd (Managed = "Schedd") and stayed Removed in the queue for ever.
    src = submit(queue)
    r = router(queue)
    r.cycle()
    copy = only_routed(queue, src)
    queue.act(JobAction.Remove, str(src), ALICE)
    queue.act(JobAction.Remove, str(copy), ALICE)  # not yet submitted: it leaves at once
    r.cycle()
    with pytest.raises(JobNotFound):
        queue.get(src)
    assert status_of(queue, src) == JobStatus.REMOVED


def test_a_copy_removed_from_below_sends_its_source_back_to_be_routed_again(
    queue: JobQueue,
) -> None:
    src = submit(queue)
    r = router(queue)
    r.cycle()
    first = only_routed(queue, src)
    queue.job_started(first)
    r.cycle()
    queue.act(JobAction.Remove, str(first), ADMIN, "the site's admin")
    r.cycle()
    assert queue.get(src)["JobStatus"] == JobStatus.IDLE
    r.cycle()
    second = only_routed(queue, src)
    assert second != first and queue.get(src)["RoutedToJobId"] == str(second)


def test_a_restarted_router_adopts_its_jobs_without_duplicate_or_orphan(queue: JobQueue) -> None:
    kept, orphaned = submit(queue), submit(queue)
    router(queue).cycle()
    copies = only_routed(queue, kept), only_routed(queue, orphaned)
    # The source of one vanishes while no router runs (removed with -forcex, say).
    queue.update(orphaned, {"Managed": "Schedd", "ManagedManager": ""})
    queue.act(JobAction.Remove, str(orphaned), ALICE)
    # A claimed source whose copy was never submitted (kill -9 between the two).
    lost = submit(queue)
    queue.update(lost, {"Managed": "External", "ManagedManager": "jobrouter"})
    again = router(queue)
    again.cycle()
    assert only_routed(queue, kept) == copies[0]  # adopted, not routed twice
    assert status_of(queue, copies[1]) == JobStatus.REMOVED  # the orphan
    # Let go, then routed as any idle job (in the same pass), once.
    assert queue.get(lost)["RoutedToJobId"] == str(only_routed(queue, lost))
    again.cycle()
    assert len(routed_of(queue, lost)) == 1 and only_routed(queue, kept) == copies[0]


def test_max_idle_jobs_holds_back_the_rest_and_says_why(queue: JobQueue) -> None:
    ids = [submit(queue) for _ in range(4)]
    r = router(queue)
    r.cycle()
    assert [len(routed_of(queue, i)) for i in ids] == [1, 1, 0, 0]
    verdicts, why_not = explain_routes(queue.get(ids[3]), r.config, counts=r.counts_of)
    assert why_not is None
    big, small = verdicts
    assert not big.matched and "RequestCpus > 4 is false" in big.reason
    assert "RequestCpus = 1" in big.reason
    assert not small.matched and "2 idle jobs of MaxIdleJobs 2" in small.reason
    queue.job_started(only_routed(queue, ids[0]))
    r.cycle()
    assert len(routed_of(queue, ids[2])) == 1


def test_why_a_job_is_not_routed_names_the_failing_clause_and_its_values() -> None:
    config = RouterConfig.from_knobs({**ROUTES, "JOB_ROUTER_SOURCE_JOB_CONSTRAINT": "x509 =!= 1"})
    job = ClassAd(
        '[ClusterId = 3; ProcId = 0; JobStatus = 1; Owner = "alice"; RequestCpus = 2;'
        ' queue = "none"; x509 = 1]'
    )
    (big, small), why_not = explain_routes(job, config)
    assert why_not is not None and "x509 isnt 1 is false (x509 = 1)" in why_not
    assert 'queue isnt "none" is false (queue = "none")' in small.reason
    assert not big.matched and not small.matched


def test_a_black_hole_route_is_throttled(queue: JobQueue) -> None:
    clock = Clock()
    r = router(
        queue,
        clock,
        JOB_ROUTER_ROUTE_Small=ROUTES["JOB_ROUTER_ROUTE_Small"].replace(
            "MaxIdleJobs = 2", "MaxIdleJobs = 100\nFailureRateThreshold = 0.001"
        ),
    )
    for _ in range(3):
        submit(queue)
    r.cycle()
    for ad in queue.query("RoutedFromJobId isnt undefined"):
        copy = JobId(ad["ClusterId"], ad["ProcId"])
        queue.job_started(copy)
        queue.job_exited(copy, 1)
    r.cycle()
    small = r.config.routes[1]
    assert r.route_stats(small).failed == 3
    clock.now += 601
    r.cycle()
    # All failed: the route now takes what keeps failures under the threshold, 0.6 jobs
    # in ten minutes (JobRouter.cpp's throttle): one job, then no more.
    assert r.route_stats(small).throttle == pytest.approx(0.6)
    waiting = [submit(queue), submit(queue)]
    r.cycle()
    assert [len(routed_of(queue, j)) for j in waiting] == [1, 0]
    assert r.throttled(small)
    verdicts, _ = explain_routes(queue.get(waiting[1]), r.config, throttled=r.throttled)
    assert "throttled" in verdicts[1].reason


def test_edit_job_in_place_transforms_the_source_itself(queue: JobQueue) -> None:
    src = submit(queue, Overflow=True)
    r = router(
        queue,
        JOB_ROUTER_ROUTE_Small=ROUTES["JOB_ROUTER_ROUTE_Small"]
        + "\nEditJobInPlace = Overflow\nSET Overflowed true\nDELETE Overflow",
    )
    r.cycle()
    ad = queue.get(src)
    # Deleted as the queue unsets (Undefined, HTCondor's AssignExpr(attr, "Undefined")).
    assert ad["Overflowed"] is True and str(ad.lookup("Overflow")) == "undefined"
    assert ad["JobUniverse"] == 5
    assert ad["RouteName"] == "Small" and not routed_of(queue, src)
    r.cycle()
    assert not queue.query("RoutedFromJobId isnt undefined")  # not routed again


def test_old_job_router_entries_are_converted_and_new_routes_of_the_same_name_win() -> None:
    config = RouterConfig.from_knobs(
        {
            "JOB_ROUTER_DEFAULTS": '[ MaxIdleJobs = 7; set_Site = "here"; ]',
            "JOB_ROUTER_ENTRIES": '[ name = "Old"; GridResource = "batch pbs"; '
            'Requirements = target.queue == "old"; eval_set_Mem = target.RequestMemory * 2;'
            ' copy_Cmd = "OrigCmd"; delete_Junk = true ] '
            '[ name = "Replaced"; GridResource = "batch sge" ]',
            "JOB_ROUTER_ROUTE_NAMES": "Replaced",
            "JOB_ROUTER_ROUTE_Replaced": 'GridResource = "batch lsf"',
        }
    )
    replaced, old = config.routes
    assert replaced.name == "Replaced" and replaced.grid_resource == "batch lsf"
    assert old.name == "Old" and old.grid_resource == "batch pbs" and old.max_idle_jobs == 7
    job = ClassAd('[queue = "old"; RequestMemory = 100; Cmd = "/x"; Junk = 1; JobUniverse = 5]')
    assert old.matches(job)
    from htgrid.router import build_routed_ad

    ad = build_routed_ad(job, old, config, "1.0")
    assert ad["Mem"] == 200 and ad["OrigCmd"] == "/x" and "Junk" not in ad
    assert ad["Site"] == "here" and ad["GridResource"] == "batch pbs"


def test_a_bad_route_is_left_out_and_said_so_the_others_still_route() -> None:
    config = RouterConfig.from_knobs(
        {
            **ROUTES,
            "JOB_ROUTER_ROUTE_NAMES": "Broken Small Missing",
            "JOB_ROUTER_ROUTE_Broken": "SET x 1 +",
        }
    )
    assert [r.name for r in config.routes] == ["Small"]
    assert any(
        "route Broken is left out" in p and "invalid expression" in p for p in config.problems
    )
    assert any("Missing" in p and "not defined" in p for p in config.problems)
