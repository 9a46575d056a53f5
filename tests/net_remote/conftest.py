"""One queue daemon per module, reached over TLS with its pool's tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from htgrid.net import ScheddClient
from htgrid.testing import PersonalPool

DOMAIN = "pool-a.test"


@pytest.fixture(scope="module")
def pool(
    shared_tmp_factory: Callable[[str], Path], test_users: tuple[str, ...]
) -> Iterator[PersonalPool]:
    """alice's and bob's jobs run as they: the pool's home is one they pass through."""
    config = {"TRUST_DOMAIN": DOMAIN, "SCHEDD_NAME": "queue@pool-a"}
    home = shared_tmp_factory("pool") / "home"
    with PersonalPool(home, periodic_interval=0.5, kill_grace=2.0, fsync=False, config=config) as p:
        yield p


@pytest.fixture
def alice(pool: PersonalPool) -> Iterator[ScheddClient]:
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as client:
        yield client


@pytest.fixture
def bob(pool: PersonalPool) -> Iterator[ScheddClient]:
    with pool.remote(pool.token(f"bob@{DOMAIN}")) as client:
        yield client
