"""A pool's security settings in a temporary home, and a clock the tests move."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.net.security import SecurityConfig, TokenIssuer, TokenVerifier

from ._support import FakeClock

DOMAIN = "pool.test"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def config(tmp_path: Path) -> SecurityConfig:
    return SecurityConfig(tmp_path / "pool", DOMAIN)


@pytest.fixture
def issuer(config: SecurityConfig, clock: FakeClock) -> TokenIssuer:
    return TokenIssuer(config, clock=clock)


@pytest.fixture
def verifier(config: SecurityConfig, clock: FakeClock) -> TokenVerifier:
    return TokenVerifier(config, clock=clock)
