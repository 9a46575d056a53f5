from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.testing import PersonalPool

from ._pools import two_pools

B_WHOLE_POOL = ("MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR", "STARTD")
# Quick negotiation cycles and ad updates: the tests wait for seconds, not minutes.
FAST: dict[str, object] = {
    "NEGOTIATOR_INTERVAL": 2,
    "NEGOTIATOR_MIN_INTERVAL": 0.1,
    "NUM_CPUS": 2,
    "UPDATE_INTERVAL": 5,
    "SCHEDD_INTERVAL": 1,
}


@pytest.fixture
def pools(tmp_path: Path) -> Iterator[tuple[PersonalPool, PersonalPool]]:
    """Pools A (queue + grid manager) and B (queue + collector), A trusting B."""
    with two_pools(tmp_path) as both:
        yield both


@pytest.fixture
def pools_with_nodes(tmp_path: Path) -> Iterator[tuple[PersonalPool, PersonalPool]]:
    """Pools A and B, B a whole pool this time (negotiator, an execute node)."""
    with two_pools(tmp_path, b_daemons=B_WHOLE_POOL, b_config=FAST) as both:
        yield both
