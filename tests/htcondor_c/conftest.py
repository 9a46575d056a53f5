from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.schedd.testing import PersonalPool

from ._pools import two_pools


@pytest.fixture
def pools(tmp_path: Path) -> Iterator[tuple[PersonalPool, PersonalPool]]:
    """Pools A (queue + grid manager) and B (queue + collector), A trusting B."""
    with two_pools(tmp_path) as both:
        yield both
