"""The EC2 GAHP through htgrid's own GAHP client, as htgrid's grid manager will drive it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from htgrid.gahp import GahpClient

from ._wire import ec2_gahp_argv
from .conftest import all_instances, start_args


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def test_a_job_life_through_the_client(
    aws: Any, ami: str, target: tuple[str, str, str], tmp_path: Path
) -> None:
    async def main() -> None:
        client = await GahpClient.start(ec2_gahp_argv(), poll_interval=0.05)
        try:
            assert client.async_mode
            assert client.supports("ec2_vm_start") and client.supports("EC2_BULK_QUERY")
            assert await client.call("EC2_VM_SERVER_TYPE", *target) == ("0", "OpenStack")
            key_file = tmp_path / "key.pem"
            assert await client.call(
                "EC2_VM_CREATE_KEYPAIR", *target, "SSH_job_1", str(key_file)
            ) == ("0",)
            tokens = [f"client-token-{n}" for n in range(8)]
            answers = await asyncio.gather(
                *(
                    client.call(
                        "EC2_VM_START",
                        *start_args(target, ami, token=token, keypair="SSH_job_1", user_data="x y"),
                    )
                    for token in tokens
                )
            )
            assert all(answer[0] == "0" and len(answer) == 2 for answer in answers)
            ids = [answer[1] for answer in answers]

            status = await client.call("EC2_VM_STATUS_ALL", *target)
            rows = {status[i]: status[i : i + 8] for i in range(1, len(status), 8)}
            assert set(rows) == set(ids)
            for vm_id, token in zip(ids, tokens, strict=True):
                assert rows[vm_id][1:4] == ("running", token, "SSH_job_1")

            assert await client.call("EC2_VM_STOP", *target, ids[0]) == ("0",)
            after = await client.call("EC2_VM_STATUS_ALL", *target, "client-token", tokens[0])
            assert after[:3] == ("0", ids[0], "terminated")
            assert await client.call("EC2_VM_DESTROY_KEYPAIR", *target, "SSH_job_1") == ("0",)
            failed = await client.call("EC2_VM_STOP", *target, "i-0000000000000dead")
            assert failed[:2] == ("1", "InvalidInstanceID.NotFound")
            assert (await client.command("STATISTICS")).args[1] != "0"
        finally:
            await client.close()

        # The grid manager restarts: a new client and server find the VMs by token.
        again = await GahpClient.start(ec2_gahp_argv(), poll_interval=0.05)
        try:
            repeat = await again.call(
                "EC2_VM_START", *start_args(target, ami, token=tokens[3], keypair="SSH_job_1")
            )
            assert repeat == ("0", ids[3])
        finally:
            await again.close()
        assert len(all_instances(aws)) == 8

    run(main())
