"""The master keeps the ads of its pool's annexes current (ANNEX_UPDATE_INTERVAL), with
no `htgrid annex` command run: an instance the cloud terminates shows in the ad, and an
annex the cloud ended has its ad removed and is refreshed no more."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.annex import Annexes, AnnexSpec, AwsAnnexes
from htgrid.annex import lease_function as lf
from htgrid.annex.keep import records
from htgrid.classad import ClassAd
from htgrid.collector import CollectorClient
from htgrid.net.security import SecurityConfig
from htgrid.testing import PersonalPool, run_cli, wait_for

from .conftest import IMAGE, REGION, boto, keeping_pool


@pytest.fixture
def pool(aws: str, tmp_path: Path) -> Iterator[PersonalPool]:
    # After `aws`: the master (and the refreshes it runs) see moto's endpoint.
    with keeping_pool(tmp_path / "pool") as running:
        yield running


def _annex_ads(pool: PersonalPool) -> list[ClassAd]:
    async def query() -> list[ClassAd]:
        async with CollectorClient(pool.collector, home=pool.home, daemon=True) as c:
            return await c.query("Annex")

    return asyncio.run(query())


@pytest.mark.timeout(120)
def test_the_pool_keeps_its_annex_ads_current_until_the_annex_is_gone(
    pool: PersonalPool,
) -> None:
    annexes = Annexes(AwsAnnexes(REGION), pool.home, pool=pool.collector)
    made = annexes.create(AnnexSpec("kept", count=2, lifetime=3600, image_ids=(IMAGE,), join=False))
    assert [r.name for r in records(pool.home)] == ["kept"]
    wait_for(lambda: [a["InstanceIds"] for a in _annex_ads(pool)] == [list(made.ids)], 30)
    # The cloud ends an instance: the ad says so, with no `htgrid annex` command.
    boto("ec2").terminate_instances(InstanceIds=[made.ids[0]])  # type: ignore[attr-defined]
    wait_for(lambda: [a["Terminated"] for a in _annex_ads(pool)] == [1], 30)
    # The lease function ends the annex: its ad goes, and so does its record.
    lf.enforce(boto, "kept", float("-inf"), time.time())  # type: ignore[arg-type]
    wait_for(lambda: _annex_ads(pool) == [] and records(pool.home) == [], 30)


@pytest.mark.timeout(300)
def test_the_pool_keeps_an_ordinary_users_annex_ad_current(
    pool: PersonalPool, tmp_path: Path
) -> None:
    """Alice may not write the pool's home: the schedd that grants her annex's token
    records the annex for the master, which keeps its ad current (`htgrid status
    -annex`) with no command of hers, and removes it once she shuts it down."""
    domain = SecurityConfig.load(pool.home).trust_domain
    mine = tmp_path / "alice"
    mine.mkdir()
    with pool.remote(pool.token(f"alice@{domain}")) as alice:
        ann = Annexes(AwsAnnexes(REGION), mine, pool=pool.collector, schedd=lambda: alice)
        spec = AnnexSpec("ua", count=2, lifetime=3600, image_ids=(IMAGE,), owners=("alice",))
        made = ann.create(spec)
        assert made.warnings == ()
        (record,) = records(pool.home)
        assert (record.name, record.region, record.pool) == ("ua", REGION, "")
        wait_for(lambda: [a["InstanceIds"] for a in _annex_ads(pool)] == [list(made.ids)], 90)
        status, out, err = run_cli(pool.home, "status", "-annex")
        assert status == 0, err
        assert "ua" in out.split()
        # The cloud ends an instance: the ad says so, with no command of Alice's.
        boto("ec2").terminate_instances(InstanceIds=[made.ids[0]])  # type: ignore[attr-defined]
        wait_for(lambda: [a["Terminated"] for a in _annex_ads(pool)] == [1], 90)
        ann.shutdown("ua")
    wait_for(lambda: _annex_ads(pool) == [] and records(pool.home) == [], 90)
    # A record the schedd made keeps its grace while the annex's lease is not yet in
    # the cloud; one older is dropped.
    from htgrid.annex.keep import RECORD_GRACE, Record, refresh, remember

    remember(pool.home, Record("soon", REGION, "", since=time.time()))
    assert refresh(pool.home) == [] and [r.name for r in records(pool.home)] == ["soon"]
    later = time.time() + RECORD_GRACE + 1
    assert refresh(pool.home, clock=lambda: later) == ["soon"] and records(pool.home) == []
