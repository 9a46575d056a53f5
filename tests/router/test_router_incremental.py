"""A full pass reads only the pairs that changed since the last one (the queue's change
feed says which), so that its cost follows the changes, not the number of routed jobs;
what it does to them is the same as reading every pair (bench/ce_route.py at 10,000
jobs: a pass over every pair stopped the routing for seconds every polling period)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from htgrid.queue import Identity, JobAction, JobId, JobQueue, JobStatus
from htgrid.queue._store import Store  # counted: the ads a pass decodes
from htgrid.router import JobRouter, RouterConfig

from .test_router_batches import ROUTES, submit

ADMIN = Identity("admin", admin=True)
PAIRS = 120


def count_reads(queue: JobQueue) -> list[int]:
    """Counts the ads the queue's reads return from now on (in the list's one item)."""
    count = [0]

    def counting(call: Callable[..., Any], many: bool) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = call(*args, **kwargs)
            count[0] += len(out) if many else 1
            return out

        return wrapper

    queue.query = counting(queue.query, True)  # type: ignore[method-assign]
    queue.get = counting(queue.get, False)  # type: ignore[method-assign]
    return count


def copy_of(queue: JobQueue, source: JobId) -> JobId:
    return JobId.parse(str(queue.get(source)["RoutedToJobId"]))


@pytest.fixture
def paired(tmp_path: Any) -> Any:
    """PAIRS big jobs routed and their pairs in step, and their router."""
    with JobQueue.open(tmp_path, fsync=False) as queue:
        sources = submit(queue, PAIRS, cpus=8)
        router = JobRouter(queue, RouterConfig.from_knobs(ROUTES))
        for _ in range(3):  # routed, in step, and the pass's own writes read back
            router.cycle()
        yield queue, router, sources


def test_a_pass_reads_the_pairs_that_changed_not_every_pair(paired: Any) -> None:
    queue, router, sources = paired
    reads = count_reads(queue)
    assert router.cycle() == 0
    assert reads[0] < 10, reads  # a pass over every pair read 2 x PAIRS ads
    # The grid manager's news of one copy reaches its source, and only that pair is read.
    copy = copy_of(queue, sources[7])
    queue.job_started(copy)
    queue.update(copy, {"RemoteWallClockTime": 42.0})
    reads[0] = 0
    assert router.cycle() > 0
    assert reads[0] < 10, reads
    source = queue.get(sources[7])
    assert source["JobStatus"] == JobStatus.RUNNING and source["RemoteWallClockTime"] == 42.0
    assert queue.get(sources[8])["JobStatus"] == JobStatus.IDLE


def test_a_source_that_left_the_queue_has_its_copy_removed(paired: Any) -> None:
    queue, router, sources = paired
    copy = copy_of(queue, sources[3])
    # Gone without the router (an administrator's forced removal): its copy is an orphan.
    queue.act(JobAction.Remove, str(sources[3]), ADMIN, "forced")
    queue.update(sources[3], {"Managed": "ScheddDone"})
    queue.destroy(sources[3])
    router.cycle()
    assert queue.query(f"ClusterId == {copy.cluster}") == []
    assert queue.history(f"ClusterId == {copy.cluster}")[0]["JobStatus"] == JobStatus.REMOVED
    assert queue.get(copy_of(queue, sources[4]))["JobStatus"] == JobStatus.IDLE


def test_a_copy_removed_from_below_sends_its_source_back_and_it_is_routed_again(
    paired: Any,
) -> None:
    queue, router, sources = paired
    first = copy_of(queue, sources[5])
    queue.act(JobAction.Remove, str(first), ADMIN, "removed by hand")
    router.cycle()
    again = copy_of(queue, sources[5])
    assert again != first
    assert queue.get(again)["JobStatus"] == JobStatus.IDLE


def test_changes_the_feed_lost_are_found_by_reading_every_pair(paired: Any) -> None:
    queue, router, sources = paired
    copy = copy_of(queue, sources[2])
    queue.update(copy, {"ImageSize": 900})
    queue.trim_changes(queue.last_seq)  # forgotten before the router read them
    router.cycle()
    assert queue.get(sources[2])["ImageSize"] == 900


def test_the_routes_counts_follow_the_pairs_that_changed(tmp_path: Any) -> None:
    with JobQueue.open(tmp_path, fsync=False) as queue:
        router = JobRouter(queue, RouterConfig.from_knobs(ROUTES))
        small = submit(queue, 3, cpus=1)
        router.cycle()
        router.cycle()
        assert queue.get(small[2]).get("RoutedToJobId") is None  # MaxIdleJobs = 2
        queue.job_started(copy_of(queue, small[0]))
        router.cycle()  # one idle copy left on the route: the third job is routed
        assert queue.get(small[2]).get("RoutedToJobId") is not None
        assert router.counts_of(router.config.routes[1]) == (3, 2)


def test_new_jobs_are_found_without_reading_every_idle_job(
    paired: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, router, _ = paired
    # The claimed sources and their copies are idle jobs too: a pass read them all.
    decoded = [0]
    job_ad = Store.job_ad

    def counting(self: Store, *args: Any, **kwargs: Any) -> Any:
        decoded[0] += 1
        return job_ad(self, *args, **kwargs)

    monkeypatch.setattr(Store, "job_ad", counting)
    (new,) = submit(queue, 1, cpus=8)
    assert router.route_new() == 1
    assert queue.get(new)["RoutedToJobId"] is not None
    assert decoded[0] < 10, decoded
