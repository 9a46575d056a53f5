"""A pool with no execute node of its own (a central manager), which nodes of other
"machines" join: each an `ExecuteNode`, its own home on its own loopback address."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from htgrid.testing import PersonalPool
from htgrid.testing.node import CENTRAL_MANAGER, FAST_CYCLES

FAST = FAST_CYCLES


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("pool")
    with PersonalPool(
        home, kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=FAST
    ) as running:
        yield running
