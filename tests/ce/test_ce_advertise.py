"""A CE advertises itself to a central collector (CONDOR_VIEW_HOST), as HTCondor-CE's
central collector lists CEs: what a submitter writes to reach it, and each route with its
limits and its routed jobs, so that grid matchmaking can pick CEs."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.collector import CollectorClient
from htgrid.net.security import SecurityConfig, ensure_pool_security, save_token
from htgrid.testing import PersonalPool, run_cli, wait_for

from ._ce import CE_FORK, CE_NAME, ce_pool


def central_ads(central: PersonalPool) -> list[ClassAd]:
    async def query() -> list[ClassAd]:
        async with CollectorClient(central.collector, home=central.home, daemon=True) as pool:
            return list(await pool.query("Scheduler", f'Name == "{CE_NAME}"'))

    return asyncio.run(query())


@pytest.mark.timeout(300)
def test_a_ce_advertises_its_routes_limits_and_counts_to_a_central_collector(
    tmp_path: Path,
) -> None:
    central = PersonalPool(
        tmp_path / "central",
        daemons=("MASTER", "SCHEDD", "COLLECTOR"),
        config={"TRUST_DOMAIN": "htgrid-central", "SCHEDD_NAME": "central@htgrid-ce.test"},
    )
    with central:
        ce = ce_pool(
            tmp_path / "ce", CE_FORK, CONDOR_VIEW_HOST=central.collector, SCHEDD_INTERVAL=1
        )
        # The CE trusts the central collector's CA and holds a token it may advertise with.
        theirs = ensure_pool_security(SecurityConfig.load(central.home))
        mine = SecurityConfig.load(ce.home)
        mine.trusted_ca_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(theirs.ca.cert, mine.trusted_ca_dir / "htgrid-central.crt")
        token = central.token("ce@htgrid-central", authz=["ADVERTISE_SCHEDD"])
        save_token(mine.system_token_dir / "central", token)
        with ce:
            work = tmp_path / "work"
            work.mkdir()
            (work / "job.sub").write_text(
                f"executable = /bin/sleep\narguments = 60\ninitialdir = {work}\nqueue\n"
            )
            status, _, err = run_cli(ce.home, "submit", str(work / "job.sub"))
            assert status == 0, err

            def advertised() -> ClassAd | None:
                ads = central_ads(central)
                if not ads:
                    return None
                (route,) = ads[0]["JobRouterRoutes"]
                return ads[0] if route["RoutedJobs"] == 1 else None

            ad = wait_for(advertised, timeout=120, what="the CE's ad with its routed job")
            assert ad["grid_resource"] == f"condor {CE_NAME} {ce.collector}"
            assert ad["JobRouterName"] == "htcondor-ce"
            (route,) = ad["JobRouterRoutes"]
            assert route["Name"] == "Local_Fork" and route["GridResource"] == "batch fork"
            assert route["MaxJobs"] == 10000 and route["MaxIdleJobs"] == 2000
            assert route["IdleJobs"] + route["RunningJobs"] == 1
            # The routed job's batch job ends with it (none is left running after the test).
            status, _, err = run_cli(ce.home, "rm", "-all")
            assert status == 0, err
            with ce.client() as schedd:
                wait_for(lambda: not schedd.query("true"), timeout=120, what="the queue emptied")
        # A CE that stops takes its ad out of the central collector.
        wait_for(lambda: not central_ads(central), timeout=60, what="the ad invalidated")
