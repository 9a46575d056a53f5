"""moto's server in this process stands in for AWS (EC2, spot fleets, EventBridge, Lambda,
IAM, SSM), on 127.0.0.1; each test starts from an empty account with the annex set up."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from htgrid.annex import Annexes, AwsAnnexes, setup
from htgrid.net.security import SecurityConfig, ensure_pool_security
from htgrid.testing import PersonalPool

moto_server = pytest.importorskip("moto.server")

logging.getLogger("werkzeug").setLevel(logging.WARNING)

REGION = "us-east-1"
IMAGE = "ami-12c6146b"
#: The IAM user moto's test keys are (an annex's token is under its owner's name).
OWNER = "moto"


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An empty account with the annex's setup done; the endpoint (AWS_ENDPOINT_URL)."""
    httpx.post(f"{moto_endpoint}/moto-api/reset", timeout=120).raise_for_status()
    for key, value in {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    setup(AwsAnnexes(REGION))
    yield moto_endpoint


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pool's home: its keys and CA (no daemon running)."""
    path = tmp_path / "pool"
    path.mkdir()
    ensure_pool_security(SecurityConfig.load(path))
    monkeypatch.setenv("HTGRID_HOME", str(path))
    return path


def annexes(home: Path, clock: object = None) -> Annexes:
    aws = AwsAnnexes(REGION) if clock is None else AwsAnnexes(REGION, clock=clock)  # type: ignore[arg-type]
    return Annexes(aws, home, pool="127.0.0.1:9618")


def boto(service: str) -> object:
    import boto3

    return boto3.session.Session(region_name=REGION).client(service)


SRC = Path(__file__).resolve().parents[2] / "src"


def create_process(home: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    """`htgrid annex create NAME ARGS... --lifetime 1h` as a process of its own."""
    env = {**os.environ, "HTGRID_HOME": str(home), "PYTHONPATH": str(SRC)}
    return subprocess.Popen(
        [sys.executable, "-m", "htgrid", "annex", "create", name, "--lifetime", "1h", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def kill_creates_at_random(home: Path, times: int, args: list[list[str]]) -> str:
    """One whole `create` timed, then `times` more (k0, k1...; args[n % len(args)])
    each killed with SIGKILL at a random moment of that time; what was done, to name
    in an assertion (ANNEX_KILL_SEED repeats a run)."""
    start = time.monotonic()
    assert create_process(home, "whole", *args[0]).wait(120) == 0
    took = time.monotonic() - start
    seed = int(os.environ.get("ANNEX_KILL_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    killed_after = []
    for n in range(times):
        create = create_process(home, f"k{n}", *args[n % len(args)])
        delay = rng.uniform(0.0, took * 1.1)
        try:
            create.wait(delay)
        except subprocess.TimeoutExpired:
            create.send_signal(signal.SIGKILL)
            killed_after.append(round(delay, 2))
        create.wait(60)
    return f"seed {seed}, killed after {killed_after} s of {took:.2f} s"


def keeping_pool(path: Path) -> PersonalPool:
    """A pool whose master refreshes its annexes' ads every half second (start it after
    the cloud's fixture: the refreshes inherit its environment)."""
    from htgrid.testing.node import CENTRAL_MANAGER, FAST_CYCLES

    config = {**FAST_CYCLES, "ANNEX_UPDATE_INTERVAL": 0.5}
    return PersonalPool(path, kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=config)
