"""One daemon per test module: starting one costs about a second."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from htgrid.net import ScheddClient

from ._harness import FAST, PersonalPool


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    with PersonalPool(tmp_path_factory.mktemp("pool"), **FAST) as running:
        yield running


@pytest.fixture
def schedd(pool: PersonalPool) -> Iterator[ScheddClient]:
    with pool.client() as client:
        yield client
