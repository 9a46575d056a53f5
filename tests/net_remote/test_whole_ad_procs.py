"""Jobs submitted as HTCondor-C's GAHP batches them: an empty cluster ad, each proc its
job's whole ad. Each job keeps its own attributes and gets the queue's usual rules."""

from __future__ import annotations

from htgrid.classad import ClassAd
from htgrid.schedd.testing import PersonalPool

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
