"""A pool's own job router (JOB_ROUTER in DAEMON_LIST) routing a local vanilla job to the
batch system: the job's user log tells its story as HTCondor's router writes it, the
routed copy's own grid events staying out of it."""

from __future__ import annotations

from pathlib import Path

import htcondor2
import pytest

from htgrid.testing import PersonalPool, run_cli, wait_for

ROUTE = """
JOB_ROUTER_ROUTE_NAMES = Fork
JOB_ROUTER_ROUTE_Fork @=jrt
  GridResource = "batch fork"
@jrt
"""


@pytest.mark.timeout(300)
def test_the_routed_jobs_events_are_in_its_user_log(tmp_path: Path) -> None:
    pool = PersonalPool(
        tmp_path / "pool",
        periodic_interval=1.0,
        daemons=("MASTER", "SCHEDD", "GRIDMANAGER", "JOB_ROUTER"),
        config={"GRIDMANAGER_JOB_PROBE_INTERVAL": 1, "JOB_ROUTER_POLLING_PERIOD": 1},
    )
    with (pool.home / "htgrid.conf").open("a") as f:
        f.write(ROUTE)
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.sub").write_text(
        f"executable = /bin/sh\narguments = \"-c 'echo routed; exit 7'\"\ninitialdir = {work}\n"
        "output = out.txt\nlog = job.log\nqueue\n"
    )
    with pool:
        status, _, err = run_cli(pool.home, "submit", str(work / "job.sub"))
        assert status == 0, err
        log = work / "job.log"

        def codes() -> list[int]:
            if not log.exists():
                return []
            return [int(e.type) for e in htcondor2.JobEventLog(str(log)).events(stop_after=0)]

        seen = wait_for(lambda: 5 in codes() and codes(), timeout=180, what="terminated event")
        assert seen == [0, 1, 5], seen
        (terminated,) = [
            e for e in htcondor2.JobEventLog(str(log)).events(stop_after=0) if int(e.type) == 5
        ]
        assert terminated["ReturnValue"] == 7 and terminated.cluster == 1
        assert (work / "out.txt").read_text() == "routed\n"
