"""The schedd records an ordinary user's annex for the master when it grants its token
(spool/annexes/NAME.json, read by htgrid.annex.keep): where the annex is, checked, its
owner, and this pool's collector only; the owner's shutdown ends the record's grace."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from htgrid.net import BadRequest
from htgrid.net.security import SecurityConfig, ensure_pool_security
from htgrid.pool import HomeLayout
from htgrid.queue import Identity
from htgrid.schedd._annex_tokens import AnnexTokens


@pytest.fixture
def tokens(tmp_path: Path) -> AnnexTokens:
    ensure_pool_security(SecurityConfig.load(tmp_path))
    return AnnexTokens(tmp_path, HomeLayout(tmp_path).spool, max_lifetime=86400,
                       clock=lambda: 1_800_000_000.0)  # fmt: skip


def test_a_grant_with_a_record_records_the_annex_for_the_master(
    tokens: AnnexTokens, tmp_path: Path
) -> None:
    alice = Identity("alice")
    where = {"cloud": "azure", "region": "eastus", "group": "htgrid-annex", "pool": "evil:9618"}
    asyncio.run(tokens.mint(alice, "ua", 600, record=where))
    path = HomeLayout(tmp_path).annex_dir / "ua.json"
    doc = json.loads(path.read_text())
    # The collector is always this pool's: the user's "pool" is not taken.
    assert doc == {"name": "ua", "pool": "", "cloud": "azure", "region": "eastus",
                   "group": "htgrid-annex", "owner": "alice", "since": 1_800_000_000.0}  # fmt: skip
    # Bad places are refused before anything is minted or recorded.
    for bad, what in (({"cloud": "gcp", "region": "x"}, "record.cloud"),
                      ({"cloud": "ec2", "region": "../../etc"}, "record.region"),
                      ({"cloud": "azure", "region": "eastus", "group": "a/b"}, "record.group"),
                      ("ec2", "record: an object")):  # fmt: skip
        with pytest.raises(BadRequest, match=what):
            asyncio.run(tokens.mint(alice, "ub", 600, record=bad))
    assert not (HomeLayout(tmp_path).annex_dir / "ub.json").exists()
    assert not (HomeLayout(tmp_path).spool / "annex-tokens" / "ub.json").exists()
    # Her shutdown: the next refresh may drop it as soon as the cloud has it no more.
    assert asyncio.run(tokens.revoke(alice, "ua")) == 1
    assert json.loads(path.read_text())["since"] == 0
