"""The router's care of the sources it manages beyond their status: a release of a source
held with its copy's hold, the copy's run attributes, and the sources' periodic policy
(their own and the pool's SYSTEM_PERIODIC_*), which the schedd leaves to the router."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.queue import HoldReasonCode, JobAction, JobId, JobQueue, JobStatus
from htgrid.router import JobRouter, RouterConfig, RouterError

from .test_router import ADMIN, ALICE, ROUTES, Clock, only_routed, status_of, submit


def router(queue: JobQueue, clock: Clock | None = None, **knobs: str) -> JobRouter:
    return JobRouter(queue, RouterConfig.from_knobs({**ROUTES, **knobs}), clock=clock or Clock())


def test_releasing_a_source_held_with_its_copys_hold_releases_the_copy(queue: JobQueue) -> None:
    src = submit(queue)
    r = router(queue)
    r.cycle()
    copy = only_routed(queue, src)
    queue.job_started(copy)
    queue.act(JobAction.Hold, str(copy), ADMIN, "the batch system lost it", code=0)
    r.cycle()
    assert queue.get(src)["HoldCopiedFromTargetJob"] is True
    queue.act(JobAction.Release, str(src), ALICE)  # condor_release of the source
    r.cycle()
    assert queue.get(copy)["JobStatus"] == JobStatus.IDLE  # the copy released with it
    source = queue.get(src)
    assert source["JobStatus"] == JobStatus.IDLE and source["HoldCopiedFromTargetJob"] is False
    r.cycle()  # and not held again from the copy, nor routed a second time
    assert queue.get(src)["JobStatus"] == JobStatus.IDLE and only_routed(queue, src) == copy


def test_the_source_takes_the_copys_run_attributes(queue: JobQueue) -> None:
    src = submit(queue)
    r = router(queue)
    r.cycle()
    copy = only_routed(queue, src)
    queue.job_started(copy)
    queue.update(
        copy,
        {
            "JobCurrentStartDate": 1234,
            "ImageSize": 4096,
            "RemoteWallClockTime": 7.0,
            "CpusProvisioned": 2,
            "NotCopied": 1,
        },
    )
    r.cycle()
    source = queue.get(src)
    assert source["JobStatus"] == JobStatus.RUNNING
    assert source["JobCurrentStartDate"] == 1234 and source["ImageSize"] == 4096
    assert source["RemoteWallClockTime"] == 7.0 and source["CpusProvisioned"] == 2
    assert source["NumJobStarts"] == queue.get(copy)["NumJobStarts"]
    assert "NotCopied" not in source


def test_a_managed_sources_own_periodic_remove_removes_it_and_its_copy(queue: JobQueue) -> None:
    src = submit(queue, PeriodicRemove=ClassAd("[x = JobStatus == 2]").lookup("x"))
    clock = Clock()
    r = router(queue, clock, PERIODIC_EXPR_INTERVAL="1")
    r.cycle()
    copy = only_routed(queue, src)
    queue.job_started(copy)
    r.cycle()  # the source mirrors Running
    clock.now += 2
    r.cycle()  # its policy fires: the source is removed, and the copy with it
    assert status_of(queue, src) == JobStatus.REMOVED
    assert status_of(queue, copy) == JobStatus.REMOVED


def test_the_pools_system_policy_holds_a_managed_source_with_its_reason(queue: JobQueue) -> None:
    src = submit(queue, maxWallTime=1)
    clock = Clock()
    r = router(
        queue,
        clock,
        PERIODIC_EXPR_INTERVAL="1",
        SYSTEM_PERIODIC_HOLD="JobStatus == 2 && NumJobStarts >= $(LIMIT:1)",
        SYSTEM_PERIODIC_HOLD_REASON='strcat("ran ", NumJobStarts, " times")',
        SYSTEM_PERIODIC_HOLD_SUBCODE="42",
    )
    r.cycle()
    copy = only_routed(queue, src)
    queue.job_started(copy)
    r.cycle()
    clock.now += 2
    r.cycle()
    source = queue.get(src)
    assert source["JobStatus"] == JobStatus.HELD and source["HoldReason"] == "ran 1 times"
    assert source["HoldReasonCode"] == HoldReasonCode.SystemPolicy
    assert source["HoldReasonSubCode"] == 42
    assert status_of(queue, copy) == JobStatus.REMOVED  # a source held by policy: copy gone


def test_a_system_policy_that_is_no_expression_is_refused_by_name() -> None:
    with pytest.raises(RouterError, match="SYSTEM_PERIODIC_REMOVE is not a ClassAd expression"):
        RouterConfig.from_knobs({**ROUTES, "SYSTEM_PERIODIC_REMOVE": "JobStatus == == 2"})


def test_an_unrouted_job_is_held_by_the_schedds_system_policy(tmp_path: Path) -> None:
    """The schedd's periodic pass runs SYSTEM_PERIODIC_HOLD on the jobs it manages."""
    from htgrid.pool import ConfigFile

    conf = tmp_path / "htgrid.conf"
    conf.write_text(
        "HOLD_CLAUSE_2 = JobStatus == 1 && RoutedToJobId is null\n"
        'HOLD_REASON_2 = "no route"\n'
        "SYSTEM_PERIODIC_HOLD = $(HOLD_CLAUSE_2)\n"
        'SYSTEM_PERIODIC_HOLD_REASON = strcat("CE held it: ", $(HOLD_REASON_2))\n'
    )
    policy = ConfigFile.read(tmp_path).system_policy()
    with JobQueue.open(tmp_path / "q", fsync=False) as q:
        job = JobId(q.submit(ALICE, ClassAd({"Cmd": "/bin/true", "JobUniverse": 5})), 0)
        routed = JobId(
            q.submit(
                ALICE, ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "RoutedToJobId": "9.0"})
            ),
            0,
        )
        q.periodic_pass()
        assert q.get(job)["JobStatus"] == JobStatus.IDLE  # without the pool's policy
        applied, _ = q.periodic_pass(system=policy)
        assert [jid for jid, _ in applied] == [job]
        held = q.get(job)
        assert held["HoldReason"] == "CE held it: no route"
        assert held["HoldReasonCode"] == HoldReasonCode.SystemPolicy
        assert q.get(routed)["JobStatus"] == JobStatus.IDLE


def test_htcondor_ces_source_constraint_reads_the_job_as_target(queue: JobQueue) -> None:
    vanilla, local = submit(queue), submit(queue, JobUniverse=12)
    r = router(queue, JOB_ROUTER_SOURCE_JOB_CONSTRAINT="target.JobUniverse =?= 5")
    r.cycle()
    only_routed(queue, vanilla)
    assert queue.get(local)["JobStatus"] == JobStatus.IDLE and "RoutedToJobId" not in queue.get(
        local
    )


def test_a_route_without_target_universe_still_gives_it_to_the_transforms(queue: JobQueue) -> None:
    """HTCondor-CE's WholeNode transform reads $(TargetUniverse): grid unless set."""
    src = submit(queue)
    r = router(
        queue,
        JOB_ROUTER_POST_ROUTE_TRANSFORM_NAMES="Universe",
        JOB_ROUTER_TRANSFORM_Universe="EVALMACRO grid $(TargetUniverse)==9\nSET WasGrid $(grid)",
    )
    r.cycle()
    assert queue.get(only_routed(queue, src))["WasGrid"] is True
