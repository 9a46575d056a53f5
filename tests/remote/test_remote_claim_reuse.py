"""Short jobs on one claim of a node of another host: the claim runs one job after
another, and nothing the schedd does per job scales with the idle jobs or the cycles."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.node import CENTRAL_MANAGER, ExecuteNode

from .conftest import FAST
from .test_remote_jobs import _submit

JOBS = 12


@pytest.fixture(scope="module")
def quiet_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    """A pool whose negotiator cycles on news alone (its interval is long)."""
    config = {**FAST, "NEGOTIATOR_INTERVAL": 600}
    home = tmp_path_factory.mktemp("quiet")
    with PersonalPool(
        home, kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=config
    ) as running:
        yield running


def _cycles(pool: PersonalPool) -> int:
    log = (pool.home / "log" / "SchedLog").read_text()
    return len(re.findall(r" cycle \d+: ", log))


def _left(pool: PersonalPool, cluster: int) -> list[ClassAd]:
    with pool.client() as schedd:
        return schedd.query(f"ClusterId == {cluster}", ["JobStatus"])


def test_jobs_that_end_on_a_reused_claim_start_no_negotiation_cycle(
    quiet_pool: PersonalPool, tmp_path: Path
) -> None:
    pool = quiet_pool
    with ExecuteNode(
        pool, tmp_path / "node5", "node5", "127.0.0.5", config={"NUM_CPUS": 1}
    ) as node:
        node.joined()
        before = _cycles(pool)
        cluster = _submit(
            pool,
            tmp_path / "work",
            "executable = /bin/true\nshould_transfer_files = YES\n"
            f"output = out.$(Process)\nrequest_memory = 16\nqueue {JOBS}\n",
        )
        wait_for(lambda: not _left(pool, cluster), timeout=120, what="the jobs to finish")
        with pool.client() as schedd:
            done = schedd.history(f"ClusterId == {cluster}")
        assert len(done) == JOBS and {ad["JobStatus"] for ad in done} == {4}
        # One slot, one claim: every job ran on it, the next one without a new match.
        assert {ad["RemoteHost"] for ad in done} == {"slot1_1@node5"}
        # Each job's input size and usage came with its exit.
        for ad in done:
            assert ad["BytesSent"] > 0 and "RemoteWallClockTime" in ad, ad
        # The submit was news, and the claim given back at the end; the jobs that
        # ended on the claim in between freed no slot, and were none.
        wait_for(lambda: _cycles(pool) - before >= 2, what="the cycle after the release")
        assert _cycles(pool) - before <= 3, _cycles(pool) - before
