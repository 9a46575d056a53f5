"""A schedd killed (kill -9) while a job runs on a node behind NAT (HTCondor's CCB): the
job runs on there, and the restarted schedd reconnects to it through the broker, over a
connection the node makes back to it, as it did before the restart."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.nat import Gateway, can_isolate
from htgrid.testing.node import CENTRAL_MANAGER, ExecuteNode
from htgrid.testing.ports import free_port

from .conftest import FAST
from .test_remote_jobs import _history, _script, _submit
from .test_restart import _events, _job, _lines, _runs


@pytest.fixture(scope="module")
def isolated() -> None:
    if not can_isolate():
        if os.environ.get("CI") == "true":
            raise RuntimeError("CI runs as root: the NAT tests must run")
        pytest.skip("a node behind NAT needs a network namespace (root)")


@pytest.fixture()
def pool(isolated: None, tmp_path: Path) -> Iterator[PersonalPool]:
    # A fixed collector port: the node finds its broker again after the restart.
    config = {**FAST, "COLLECTOR_HOST": f"127.0.0.1:{free_port()}"}
    with PersonalPool(
        tmp_path / "pool", kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=config
    ) as running:
        yield running


def _port(address: str) -> int:
    return int(address.strip("<>").rpartition(":")[2])


_JOB = """echo "start $$" >> {starts}
while [ ! -e {go} ]; do sleep 0.1; done
echo "done $$"
"""


def test_a_restarted_schedd_reconnects_to_a_job_behind_nat_through_the_broker(
    pool: PersonalPool, tmp_path: Path
) -> None:
    with pool.client() as schedd:
        back = str(schedd.health()["ccb_return_address"])
    # The NAT lets the node out to the collector and the schedd's return port alone.
    gateway = Gateway(tmp_path / "nat", [_port(pool.collector), _port(back)])
    node = ExecuteNode(
        pool,
        tmp_path / "node5",
        "node5",
        "127.0.0.5",
        config={"PRIVATE_NETWORK_NAME": "cloud", "UPDATE_INTERVAL": 2},
        behind=gateway,
    )
    try:
        with node:
            node.joined()
            work = tmp_path / "work"
            starts, go = work / "starts", work / "go"
            _script(work / "nat_a.sh", _JOB.format(starts=starts, go=go))
            cluster = _submit(
                pool,
                work,
                "executable = nat_a.sh\nshould_transfer_files = YES\nlog = job.log\n"
                'output = job.out\nrequirements = Machine == "node5"\nrequest_memory = 16\n'
                "job_max_vacate_time = 1\njob_lease_duration = 300\nqueue\n",
            )
            job = f"{cluster}.0"
            wait_for(lambda: len(_lines(starts)) == 1, timeout=90, what="the job to start")
            # The schedd records the start once the node answered the activation: the
            # job's process may write its line first.
            wait_for(
                lambda: "CCBID=" in str(_job(pool, job).get("StartdIpAddr", "")),
                timeout=30,
                what="the job's start recorded, at the node's address through the broker",
            )
            running = _runs(tmp_path, "nat_a.sh")
            pool.kill()
            pool.start()
            with pool.client() as schedd:
                assert schedd.health()["ccb_return_address"] == back  # the NAT lets it in
            wait_for(
                lambda: _job(pool, job).get("NumJobReconnects") == 1,
                timeout=90,
                what="the schedd to reconnect to the job through the broker",
            )
            assert _runs(tmp_path, "nat_a.sh") == running  # the same run, none started again
            go.touch()
            done = wait_for(lambda: _history(pool, cluster), timeout=90, what="the job's end")
            assert done["JobStatus"] == 4 and done["ExitCode"] == 0
            assert done["NumJobStarts"] == 1
            assert [line.split()[0] for line in _lines(starts)] == ["start"]
            assert (work / "job.out").read_text().startswith("done ")
            assert _events(work / "job.log", job) == [0, 1, 22, 23, 5]
    finally:
        gateway.close()
