"""A collector on a loopback port, and an execute node run in the test's event loop."""

from __future__ import annotations

import asyncio
import os
import pwd
import secrets
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd, ExprTree
from htgrid.startd import ClaimState, ClaimStatus, Resources, StartdClient, StartdConfig
from htgrid.startd._daemon import ExitReason, Startd
from htgrid.startd._machine import Gpu, MachineInfo
from htgrid.startd._transfer import input_entries, pack
from htgrid.testing.collector import collector_thread, pool_home

GPUS = (Gpu("GPU-aaaa1111", 0, "Test GPU", 1024), Gpu("GPU-bbbb2222", 1, "Test GPU", 1024))
MACHINE = MachineInfo(
    hostname="node.test",
    arch="X86_64",
    opsys="LINUX",
    opsys_name="Ubuntu",
    opsys_major_ver=22,
    opsys_ver=2204,
    opsys_long_name="Ubuntu 22.04",
    detected=Resources(4, 4000, 1_000_000, tuple(g.id for g in GPUS)),
    offered=Resources(4, 4000, 1_000_000, tuple(g.id for g in GPUS)),
    gpus=GPUS,
)

Scenario = Callable[[StartdClient, Startd], Awaitable[None]]
DOMAIN = "startd.test"
#: The jobs' owner: the user running the tests (root, whose jobs the nodes here allow).
OWNER = pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def collector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """host:port of a collector running in a thread, for the pool in tmp_path/home (the
    node's home too, so the node presents that pool's daemon token)."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    home = pool_home(tmp_path / "home", DOMAIN)
    monkeypatch.setenv("HTGRID_HOME", str(home))
    with collector_thread(home) as address:
        yield address


def run_startd(
    home: Path, scenario: Scenario, *, conf: str = "", pool: str = "127.0.0.1:1"
) -> ExitReason:
    """Run an execute node for `home` while `scenario` talks to it; why it stopped."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "htgrid.conf").write_text(
        f"TRUST_DOMAIN = {DOMAIN}\nJOB_MAX_VACATE_TIME = 1\nALLOW_ROOT_JOBS = true\n" + conf
    )
    config = StartdConfig.load(home)

    async def main() -> ExitReason:
        startd = Startd(config, pool=pool, machine=MACHINE)
        task = asyncio.create_task(startd.run())
        async with StartdClient(config.socket) as client:
            for _ in range(500):
                if task.done() or config.socket.exists():
                    break
                await asyncio.sleep(0.01)
            try:
                await scenario(client, startd)
            finally:
                startd.request_stop()
        return await task

    return asyncio.run(main())


def job_ad(iwd: Path, cmd: str = "run.sh", **attrs: object) -> ClassAd:
    """A vanilla job as `htgrid submit` writes one (files travel unless told)."""
    ad = ClassAd(
        {
            "ClusterId": 1,
            "ProcId": 0,
            "Owner": OWNER,
            "User": f"{OWNER}@test",
            "JobUniverse": 5,
            "Iwd": str(iwd),
            "Cmd": cmd,
            "Out": "job.out",
            "Err": "job.err",
            "ShouldTransferFiles": "YES",
            "WhenToTransferOutput": "ON_EXIT",
            "RequestCpus": 1,
            "RequestMemory": 100,
            "RequestDisk": 1000,
        }
    )
    ad["Requirements"] = ExprTree("TARGET.HasFileTransfer && TARGET.Memory >= RequestMemory")
    for name, value in attrs.items():
        ad[name] = value
    return ad


def script(iwd: Path, text: str, name: str = "run.sh") -> Path:
    iwd.mkdir(parents=True, exist_ok=True)
    path = iwd / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def claim_id() -> str:
    return secrets.token_urlsafe(24)


async def until(
    client: StartdClient, cid: str, state: ClaimState, status: ClaimStatus
) -> ClaimStatus:
    """Long-poll the claim until it reaches `state`."""
    for _ in range(100):
        if status.state is state:
            return status
        status = await client.status(cid, wait=5, version=status.version)
    raise AssertionError(f"claim {cid} never became {state.value}: {status}")


async def run_job(
    client: StartdClient, job: ClassAd, *, lease: float = 60
) -> tuple[str, ClaimStatus]:
    """Claim, activate, send the input, and wait for the job's end."""
    cid = claim_id()
    await client.request_claim(cid, job, "schedd@test", lease)
    status = await client.activate(cid, job)
    if status.transfer_input:
        tar = Path(str(job["Iwd"])) / ".input.tar"
        await asyncio.to_thread(pack, input_entries(job), tar, dereference=True)
        status = await client.send_input(cid, tar)
    return cid, await until(client, cid, ClaimState.ENDED, status)
