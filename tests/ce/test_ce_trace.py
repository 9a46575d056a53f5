"""`htgrid ce trace` (condor_ce_trace) from a submitter's home: every step of a CE that
works passes, and each failure names its step and what to do."""

from __future__ import annotations

import asyncio
import getpass
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.collector import CollectorClient
from htgrid.testing import PersonalPool, run_cli, wait_for

from ._ce import CE_FORK, SPECIAL, ce_pool, submitter_pool


def schedd_ads(ce: PersonalPool) -> list[ClassAd]:
    """The CE's schedd ads in its collector (none until its first update)."""

    async def query() -> list[ClassAd]:
        async with CollectorClient(ce.collector, home=ce.home, daemon=True) as pool:
            return list(await pool.query("Scheduler", "true"))

    return asyncio.run(query())


def trace(home: Path, *argv: str) -> tuple[int, str, str]:
    return run_cli(home, "ce", "trace", *argv)


@pytest.mark.timeout(300)
def test_ce_trace_passes_each_step_of_a_working_ce(tmp_path: Path) -> None:
    with ce_pool(tmp_path / "ce", CE_FORK) as ce:
        sub = submitter_pool(tmp_path / "submit")  # its home: CA trust and token, no daemon
        sub.trust(ce, user=getpass.getuser())
        # A CE up for a while: its schedd in its collector (its first update, slow at load).
        wait_for(lambda: schedd_ads(ce), timeout=60, what="the CE's schedd advertised")
        status, out, err = trace(sub.home, ce.collector, "--timeout", "120")
        assert status == 0, out + err
        for step in ("reach:", "authenticate:", "submit:", "route:", "run:", "output:"):
            assert step in out
        assert f"map: the CE maps you to the local account {getpass.getuser()!r}" in out
        assert "All steps passed" in out and "FAILED" not in out
        # The test job is gone from the CE's queue once its output came back.
        with ce.client() as schedd:
            assert not schedd.query("RoutedFromJobId is undefined && JobStatus != 3")


@pytest.mark.timeout(300)
def test_ce_trace_says_which_step_failed_and_what_to_do(tmp_path: Path) -> None:
    sub = submitter_pool(tmp_path / "submit")
    status, out, _ = trace(sub.home, "127.0.0.1:1")
    assert status == 1 and "reach: FAILED" in out and "htgrid ce up" in out
    with ce_pool(tmp_path / "ce", SPECIAL) as ce:
        status, out, _ = trace(sub.home, ce.collector)  # no trust, no token yet
        assert status == 1 and ("reach: FAILED" in out or "authenticate: FAILED" in out)
        sub.trust(ce, user=getpass.getuser())
        # The steps after reach need the CE's schedd in its collector (its first update).
        wait_for(lambda: schedd_ads(ce), timeout=60, what="the CE's schedd advertised")
        status, out, _ = trace(sub.home, ce.collector, "--timeout", "5", "-a", "queue=short")
        assert status == 1, out
        assert "route: FAILED: the CE's job router did not route the job within 5 s" in out
        assert 'route Special: no: REQUIREMENTS false: queue == "special" is false' in out
        assert 'queue = "short"' in out and "What to do:" in out
        assert "run:" not in out
