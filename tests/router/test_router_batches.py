"""The router's writes come in batches, and new jobs are routed between full passes: the
CE's throughput (bench/ce_route.py) rests on both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from htgrid.classad import ClassAd
from htgrid.queue import Identity, JobAction, JobId, JobQueue, JobStatus
from htgrid.router import JobRouter, RouterConfig

ALICE = Identity("alice")
BOB = Identity("bob")
ROUTES = {
    "JOB_ROUTER_ROUTE_NAMES": "Big Small",
    "JOB_ROUTER_ROUTE_Big": 'REQUIREMENTS RequestCpus > 4\nGridResource = "batch slurm"',
    "JOB_ROUTER_ROUTE_Small": 'REQUIREMENTS RequestCpus <= 4\nGridResource = "batch fork"\n'
    "MaxIdleJobs = 2",
    "JOB_ROUTER_DEFAULT_MAX_IDLE_JOBS_PER_ROUTE": "1000",
    "JOB_ROUTER_DEFAULT_MAX_JOBS_PER_ROUTE": "1000",
}
#: JobQueue's calls that write (each its own transaction).
WRITES = (
    "update",
    "update_many",
    "submit",
    "transaction",
    "act",
    "edit",
    "destroy",
    "job_started",
    "job_evicted",
    "job_exited",
)


def count_writes(queue: JobQueue) -> list[int]:
    """Counts the queue's outermost write calls from now on (in the list's one item)."""
    count = [0]
    depth = [0]

    def counting(call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if depth[0] == 0:
                count[0] += 1
            depth[0] += 1
            try:
                return call(*args, **kwargs)
            finally:
                depth[0] -= 1

        return wrapper

    for name in WRITES:
        setattr(queue, name, counting(getattr(queue, name)))
    return count


def submit(queue: JobQueue, count: int, cpus: int, who: Identity = ALICE) -> list[JobId]:
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "RequestCpus": cpus})
    cluster = queue.submit(who, ad, count)
    return [JobId(cluster, proc) for proc in range(count)]


def routed(queue: JobQueue) -> dict[str, ClassAd]:
    """The routed copies by their source's id."""
    return {
        str(ad["RoutedFromJobId"]): ad
        for ad in queue.query("RoutedFromJobId isnt undefined")
        if ad["JobStatus"] != JobStatus.REMOVED
    }


def test_a_pass_routes_any_number_of_jobs_in_the_same_few_transactions(
    tmp_path_factory: Any,
) -> None:
    writes = []
    for count in (3, 150):
        with JobQueue.open(tmp_path_factory.mktemp(f"q{count}"), fsync=False) as queue:
            sources = submit(queue, count, cpus=8) + submit(queue, 2, cpus=8, who=BOB)
            counter = count_writes(queue)
            JobRouter(queue, RouterConfig.from_knobs(ROUTES)).cycle()
            writes.append(counter[0])
            copies = routed(queue)
            assert sorted(copies) == sorted(str(s) for s in sources)
            for source in sources:
                ad = queue.get(source)
                copy = copies[str(source)]
                assert ad["Managed"] == "External" and ad["RouteName"] == "Big"
                assert ad["RoutedToJobId"] == f"{copy['ClusterId']}.0"
                assert copy["Owner"] == ad["Owner"] and copy["GridResource"] == "batch slurm"
    # Claim, submit (one per owner) and link: 4 here, for 5 jobs as for 152.
    assert writes[0] == writes[1] <= 4, writes


def test_more_jobs_than_a_batch_are_all_routed_in_one_pass(tmp_path: Any) -> None:
    with JobQueue.open(tmp_path, fsync=False) as queue:
        sources = submit(queue, 450, cpus=8)
        JobRouter(queue, RouterConfig.from_knobs(ROUTES)).cycle()
        copies = routed(queue)
        assert len(copies) == 450
        assert len({ad["ClusterId"] for ad in copies.values()}) == 450
        assert all(queue.get(s)["RoutedToJobId"] is not None for s in sources)


def test_between_full_passes_new_jobs_are_routed_and_pairs_wait(tmp_path: Any) -> None:
    with JobQueue.open(tmp_path, fsync=False) as queue:
        router = JobRouter(queue, RouterConfig.from_knobs(ROUTES))
        (first,) = submit(queue, 1, cpus=8)
        small = submit(queue, 3, cpus=1)
        router.cycle()
        first_copy = routed(queue)[str(first)]
        assert sum(str(s) in routed(queue) for s in small) == 2  # MaxIdleJobs = 2
        queue.act(JobAction.Remove, str(first), ALICE, "not wanted")
        (later,) = submit(queue, 1, cpus=8)
        more_small = submit(queue, 1, cpus=1)
        assert router.route_new() == 1
        copies = routed(queue)
        assert str(later) in copies
        # The route's idle limit holds between full passes too.
        assert sum(str(s) in copies for s in small + more_small) == 2
        # The removed source's copy is the full pass's to remove.
        copy_id = JobId(first_copy["ClusterId"], 0)
        assert queue.get(copy_id)["JobStatus"] == JobStatus.IDLE
        router.cycle()
        assert str(first) not in routed(queue)
        assert queue.history(f"ClusterId == {copy_id.cluster}")[0]["JobStatus"] == 3


def test_a_full_pass_copies_run_attributes_to_any_number_of_sources_in_few_writes(
    tmp_path_factory: Any,
) -> None:
    writes = []
    for count in (3, 250):
        with JobQueue.open(tmp_path_factory.mktemp(f"q{count}"), fsync=False) as queue:
            sources = submit(queue, count, cpus=8)
            router = JobRouter(queue, RouterConfig.from_knobs(ROUTES))
            router.cycle()
            router.cycle()  # the pairs in step
            copies = routed(queue)
            # The grid manager's news of each running copy (it stays idle here).
            queue.update_many(
                [
                    (JobId(ad["ClusterId"], 0), {"RemoteWallClockTime": 42.0, "ImageSize": 900})
                    for ad in copies.values()
                ]
            )
            counter = count_writes(queue)
            assert router.cycle() > 0
            writes.append(counter[0])
            for source in sources:
                ad = queue.get(source)
                assert ad["RemoteWallClockTime"] == 42.0 and ad["ImageSize"] == 900
            counter[0] = 0
            router.cycle()  # nothing more to copy
            assert counter[0] == 0
    # One transaction per 200 sources (it was one per source).
    assert writes == [1, 2], writes
