"""The 027 (grid submit) event of a job whose submit was saved reaches its log once, also
when the grid manager died between saving the remote id and writing the event."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from htgrid.eventlog import ExecuteEvent, GridSubmitEvent, UserLog
from htgrid.grid import _userlog
from htgrid.grid._userlog import EventLogs

RESOURCE = "ec2 http://127.0.0.1:1"


def _submitted(log: Path, cluster: int, proc: int) -> int:
    return log.read_text().count(f"027 ({cluster:03d}.{proc:03d}.000)")


def test_the_event_is_written_when_missing_and_only_then(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    UserLog(log).append(ExecuteEvent(cluster=7, proc=0, timestamp=1.0, execute_host="<h>"))
    UserLog(log).append(
        GridSubmitEvent(
            cluster=7, proc=1, timestamp=1.0, grid_resource=RESOURCE, grid_job_id="ec2 x i-1"
        )
    )
    logs = EventLogs()

    async def found_again(proc: int) -> None:
        await logs.grid_submit_once(str(log), 7, proc, 2.0, RESOURCE, f"ec2 x i-{proc}")

    asyncio.run(found_again(0))  # its event was lost: written now
    asyncio.run(found_again(1))  # written before the restart: not again
    asyncio.run(found_again(0))  # written just now: not again
    assert (_submitted(log, 7, 0), _submitted(log, 7, 1)) == (1, 1)

    # Another writer's 027 after the last look is seen; so is a log written anew.
    UserLog(log).append(
        GridSubmitEvent(
            cluster=7, proc=2, timestamp=3.0, grid_resource=RESOURCE, grid_job_id="ec2 x i-2"
        )
    )
    asyncio.run(found_again(2))
    assert _submitted(log, 7, 2) == 1
    log.write_text("")
    asyncio.run(found_again(1))
    assert _submitted(log, 7, 1) == 1


def test_an_event_being_written_is_read_whole_later(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    UserLog(log).append(
        GridSubmitEvent(
            cluster=7, proc=5, timestamp=1.0, grid_resource=RESOURCE, grid_job_id="ec2 x i-5"
        )
    )
    with log.open("ab") as f:
        f.write(b"027 (007.003.000) 2026-11-26 10:00:00 Job sub")  # its writer is not done
    logs = EventLogs()
    asyncio.run(logs.grid_submit_once(str(log), 7, 5, 2.0, RESOURCE, "ec2 x i-5"))
    with log.open("ab") as f:
        f.write(b"mitted to grid resource\n...\n")
    # The half line was left for the next look, which reads it whole.
    asyncio.run(logs.grid_submit_once(str(log), 7, 3, 2.0, RESOURCE, "ec2 x i-3"))
    assert (_submitted(log, 7, 5), _submitted(log, 7, 3)) == (1, 1)


def test_a_log_longer_than_a_read_is_read_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_userlog, "_CHUNK", 100)  # an event is ~200 bytes
    log = tmp_path / "job.log"
    for proc in range(20):
        UserLog(log).append(
            GridSubmitEvent(
                cluster=7,
                proc=proc,
                timestamp=1.0,
                grid_resource=RESOURCE,
                grid_job_id=f"ec2 x i-{proc}",
            )
        )
    logs = EventLogs()
    for proc in (0, 19, 10, 20):
        asyncio.run(logs.grid_submit_once(str(log), 7, proc, 2.0, RESOURCE, f"ec2 x i-{proc}"))
    assert [_submitted(log, 7, proc) for proc in range(21)] == [1] * 21
