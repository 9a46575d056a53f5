"""One queue daemon per module, reached over TLS with its pool's tokens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from htgrid.net import ScheddClient
from htgrid.schedd.testing import PersonalPool

DOMAIN = "pool-a.test"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    config = {"TRUST_DOMAIN": DOMAIN, "SCHEDD_NAME": "queue@pool-a"}
    home = tmp_path_factory.mktemp("pool")
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
