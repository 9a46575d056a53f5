"""Fixtures: the fake ARM over TLS, auth files pointing at it, the GAHP as a child process."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._wire import AzureWire
from .arm_server import CLIENT_ID, CLIENT_SECRET, TENANT, ArmServer

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHtgridtestkeyhtgridtestkeyhtgridtestkey test@htgrid"


def gahp_argv(*options: str) -> list[str]:
    """How the tests start `htgrid gahp azure`: fast polling, two quick retries."""
    return [
        sys.executable,
        "-m",
        "htgrid.cli",
        "gahp",
        "azure",
        "--retries",
        "2",
        "--retry-backoff",
        "0.01",
        "--polling-interval",
        "0",
        *options,
    ]


def gahp_env(arm: ArmServer) -> dict[str, str]:
    """The environment the grid manager gives a GAHP, with the test CA; no proxies."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.upper().startswith(("AZURE_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"))
    }
    env["GAHP_SSL_CAFILE"] = str(arm.ca_file)
    env["NO_PROXY"] = "127.0.0.1,localhost"
    return env


def write_auth_file(path: Path, arm: ArmServer, secret: str = CLIENT_SECRET) -> Path:
    """HTCondor's text form, with htgrid's endpoint keys pointing at the fake ARM."""
    path.write_text(
        f"client_id {CLIENT_ID}\n"
        f"secret {secret}\n"
        f"tenant_id {TENANT}\n"
        f"authority {arm.url}\n"
        f"resource_manager_url {arm.url}\n"
    )
    return path


@pytest.fixture(scope="module")
def arm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArmServer]:
    server = ArmServer(tmp_path_factory.mktemp("arm")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def auth_file(arm: ArmServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_auth_file(tmp_path_factory.mktemp("auth") / "azure.auth", arm)


@pytest.fixture(scope="module")
def ssh_key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "id_ed25519.pub"
    path.write_text(SSH_KEY + "\n")
    return path


@pytest.fixture(scope="module")
def wire(arm: ArmServer) -> Iterator[AzureWire]:
    gahp = AzureWire(gahp_argv(), gahp_env(arm))
    try:
        yield gahp
    finally:
        gahp.close()
