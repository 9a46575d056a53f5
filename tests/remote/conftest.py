"""A pool with no execute node of its own (a central manager), which nodes of other
"machines" join: each an `ExecuteNode`, its own home on its own loopback address."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from htgrid.testing import PersonalPool
from htgrid.testing.node import CENTRAL_MANAGER

# Quick cycles and short leases, so that the tests wait for seconds, not minutes.
FAST: dict[str, object] = {
    "NEGOTIATOR_INTERVAL": 2,
    "NEGOTIATOR_MIN_INTERVAL": 0.1,
    "SCHEDD_INTERVAL": 1,
    "ALIVE_INTERVAL": 2,
    "MAX_CLAIM_ALIVES_MISSED": 3,
    "MASTER_BACKOFF_CONSTANT": 0.5,
}


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("pool")
    with PersonalPool(
        home, kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=FAST
    ) as running:
        yield running
