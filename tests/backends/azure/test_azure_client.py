"""The Azure GAHP driven by htgrid.gahp.client the way the grid manager drives it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from htgrid.gahp import GahpClient

from .arm_server import SUBSCRIPTION, ArmServer
from .conftest import gahp_argv, gahp_env

URN = "Canonical:ubuntu-24_04-lts:server:latest"


def build_vm_params(name: str, key: Path) -> list[str]:
    """What azurejob.cpp's BuildVmParams sends, in its order."""
    return [
        f"name={name}",
        "location=eastus",
        f"image={URN}",
        "size=Standard_D2s_v5",
        "adminUsername=condor",
        f"key={key}",
    ]


def status_map(fields: tuple[str, ...]) -> dict[str, str]:
    assert fields[0] == "NULL", fields
    pairs = dict(zip(fields[2::2], fields[3::2], strict=True))
    assert len(pairs) == int(fields[1])
    return pairs


def test_grid_manager_lifecycle(arm: ArmServer, auth_file: Path, ssh_key_file: Path) -> None:
    auth = (str(auth_file), SUBSCRIPTION)
    names = [f"condorc{cluster}p0" for cluster in range(500, 508)]

    async def scenario() -> None:
        client = await GahpClient.start(gahp_argv(), env=gahp_env(arm), poll_interval=0.05)
        try:
            assert client.supports("AZURE_VM_CREATE") and client.async_mode
            assert await client.call("AZURE_PING", *auth, timeout=60) == ("NULL",)
            created = await asyncio.gather(
                *(
                    client.call("AZURE_VM_CREATE", *auth, *build_vm_params(name, ssh_key_file))
                    for name in names
                )
            )
            for fields in created:
                # The grid manager asserts 4 fields with the id: NULL, vm id, address.
                assert len(fields) == 3 and fields[0] == "NULL" and fields[1], fields
            arm.clear_log()
            statuses = status_map(await client.call("AZURE_VM_LIST", *auth, timeout=60))
            assert len(arm.requests("GET")) == 1
            for name in names:
                # azureresource.cpp keeps what follows the last "/".
                assert statuses[name].rsplit("/", 1)[1] == "running"
            deleted = await asyncio.gather(
                *(client.call("AZURE_VM_DELETE", *auth, name) for name in names[:4])
            )
            assert deleted == [("NULL",)] * 4
            statuses = status_map(await client.call("AZURE_VM_LIST", *auth, timeout=60))
            assert not set(names[:4]) & statuses.keys()
            assert set(names[4:]) <= statuses.keys()
            gone = await client.call("AZURE_VM_DELETE", *auth, names[0])
            assert len(gone) == 1 and "could not be found" in gone[0]
        finally:
            assert await client.close() == 0

    asyncio.run(scenario())
