"""Jobs submitted as HTCondor-C's GAHP batches them: an empty cluster ad, each proc its
job's whole ad. Each job keeps its own attributes and gets the queue's usual rules."""

from __future__ import annotations

import pytest

from htgrid.classad import ClassAd
from htgrid.net import BadRequest
from htgrid.testing import PersonalPool

from ._support import SPOOLING
from .conftest import DOMAIN


def test_procs_carrying_whole_ads_keep_their_own_and_follow_the_rules(
    pool: PersonalPool,
) -> None:
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as alice:
        cluster = alice.reserve_cluster()
        spooling = ClassAd(
            {"Cmd": "a.sh", "JobUniverse": 5, "Iwd": "/submit/a", "Owner": "mallory", **SPOOLING}
        )
        matching = ClassAd({"Cmd": "b.sh", "JobUniverse": 9, "GridResource": "batch $$(GridType)"})
        first, second = alice.submit(cluster, ClassAd(), [spooling, matching])

        a, b = alice.get(first), alice.get(second)
        assert (a["Cmd"], b["Cmd"]) == ("a.sh", "b.sh")
        assert (a["Owner"], b["Owner"]) == ("alice", "alice")  # the token's, not the ad's
        assert (a["JobStatus"], a["HoldReasonCode"]) == (5, 16)  # spooling, in its spool dir
        assert a["SUBMIT_Iwd"] == "/submit/a"
        assert a["Iwd"] == str(pool.home / "spool" / str(cluster) / "0")
        assert b["Matched"] is False  # waits for grid matchmaking, as condor_submit marks it
        assert "Matched" not in a


def test_a_new_cluster_is_reserved_and_filled_in_one_request(pool: PersonalPool) -> None:
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as alice:
        before = alice.reserve_cluster()
        first, second = alice.submit_new(
            ClassAd({"Cmd": "shared.sh", "JobUniverse": 5}),
            [ClassAd({"Owner": "mallory", **SPOOLING}), ClassAd({"Cmd": "own.sh"})],
        )
        assert first.cluster == second.cluster > before  # a cluster of its own, new
        assert (first.proc, second.proc) == (0, 1)
        a, b = alice.get(first), alice.get(second)
        assert (a["Cmd"], b["Cmd"]) == ("shared.sh", "own.sh")
        assert (a["Owner"], b["Owner"]) == ("alice", "alice")
        assert (a["JobStatus"], a["HoldReasonCode"]) == (5, 16)
        with pytest.raises(BadRequest, match='"procs" must be a non-empty list'):
            alice.submit_new(ClassAd(), [])
        assert alice.query(f"ClusterId > {first.cluster}") == []  # nothing half-queued
