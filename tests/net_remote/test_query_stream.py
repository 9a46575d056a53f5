"""A listing streamed a page at a time (`query_iter`: NDJSON, 1000 ads a line) is the
listing `query` gives whole, and a summary counts what the listing holds."""

from __future__ import annotations

import pytest

from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.net import Jobs, ScheddClient
from htgrid.queue import JobAction
from htgrid.testing import PersonalPool

from ._support import VANILLA


@pytest.fixture(scope="module")
def cluster(pool: PersonalPool) -> int:
    """2,500 procs of alice's, every fifth held."""
    with pool.remote(pool.token("alice@pool-a.test")) as alice:
        cluster = alice.reserve_cluster()
        ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": VANILLA, "Iwd": "/submit/dir"})
        procs = [ClassAd({"Args": str(n)} if n % 2 else {}) for n in range(2500)]
        alice.submit(cluster, ad, procs)
        held = Jobs.matching(f"ClusterId == {cluster} && ProcId % 5 == 0")
        alice.act(JobAction.Hold, held)
    return cluster


@pytest.mark.parametrize(
    ("constraint", "projection", "limit"),
    [
        ("ClusterId == {c}", None, None),
        ("ClusterId == {c}", ["Args"], 1500),
        ("ClusterId == {c} && JobStatus == 5", ["JobStatus"], None),
        ("ClusterId == {c} && ProcId > 999 && ProcId < 2001", ["ProcId"], 1000),
        ("ClusterId == {c} && Args =?= undefined", ["Args"], None),  # not SQL's: evaluated
    ],
)
def test_a_streamed_listing_is_the_whole_one(
    alice: ScheddClient,
    cluster: int,
    constraint: str,
    projection: list[str] | None,
    limit: int | None,
) -> None:
    constraint = constraint.format(c=cluster)
    streamed = list(alice.query_iter(constraint, projection, limit=limit))
    whole = alice.query(constraint, projection, limit=limit)
    assert [ad.printOld() for ad in streamed] == [ad.printOld() for ad in whole]
    assert streamed


def test_a_bad_constraint_is_refused_before_the_stream(alice: ScheddClient) -> None:
    with pytest.raises(HTGridError) as streamed:
        list(alice.query_iter("ClusterId == = 3"))
    with pytest.raises(HTGridError) as whole:
        alice.query("ClusterId == = 3")
    assert str(streamed.value) == str(whole.value)
    assert type(streamed.value) is type(whole.value)


def test_the_summary_counts_what_is_listed(alice: ScheddClient, cluster: int) -> None:
    batches, owners, factories = alice.summary(f"ClusterId == {cluster}")
    (batch,) = batches
    assert (batch.cluster, batch.owner, batch.first_proc, batch.last_proc) == (
        cluster,
        "alice",
        0,
        2499,
    )
    assert batch.counts == {1: 2000, 5: 500}
    assert batch.total_submit_procs == 2500
    assert owners["alice"][5] >= 500
    assert factories == []
