"""The user-log writer writes each event exactly once, whenever the daemon is killed -9:
before a batch's first event, between two of its events, after the last one but before
the writer saved its place, and again while it finishes that batch after the restart.
The log is read by htcondor2.JobEventLog; what the grid manager wrote to the same log in
between stays."""

from __future__ import annotations

import asyncio
import getpass
import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import htcondor2
import pytest

import htgrid.schedd._userlog as userlog
from htgrid.classad import ClassAd
from htgrid.eventlog import GridSubmitEvent, UserLog, UserLogEvent
from htgrid.queue import Identity, JobAction, JobId, JobQueue
from htgrid.schedd._userlog import UserLogWriter
from htgrid.schedd._worker import QueueWorker

# The writer in a process of its own that kills itself (SIGKILL, as kill -9) once it has
# appended `argv[2]` events: at the next append, or at the first file renamed into place
# after that many (its saved place) when that was the batch's last event.
_CHILD = """
import asyncio, os, signal, sys
from pathlib import Path
import htgrid.schedd._userlog as userlog
from htgrid.queue import JobQueue
from htgrid.schedd._worker import QueueWorker

home, stop_after, total = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
appended = 0

class Dying(userlog.UserLog):
    def append(self, event):
        global appended
        if appended == stop_after:
            os.kill(os.getpid(), signal.SIGKILL)
        appended += 1
        super().append(event)

replace = os.replace
def dying_replace(src, dst, *args, **kwargs):
    if appended == stop_after == total:
        os.kill(os.getpid(), signal.SIGKILL)
    replace(src, dst, *args, **kwargs)

userlog.UserLog = Dying
os.replace = dying_replace
worker = QueueWorker(JobQueue.open(home / "spool", fsync=False))
writer = userlog.UserLogWriter(worker, home / "spool" / "userlog.seq", "<host>")
writer.load()
asyncio.run(writer.catch_up())
"""

USER = getpass.getuser()
ME = Identity(USER)
# What the queue's changes below write: submitted (3), executing (2), terminated, held.
EXPECTED = Counter({(0, 0): 1, (0, 1): 1, (0, 2): 1, (1, 0): 1, (1, 1): 1, (5, 0): 1, (12, 2): 1})
TOTAL = sum(EXPECTED.values())


def _queue(home: Path) -> int:
    (home / "spool").mkdir(parents=True)
    with JobQueue.open(home / "spool", fsync=False) as q:
        ad = ClassAd({"Cmd": "/bin/true", "UserLog": "job.log", "Iwd": str(home), "Owner": USER})
        cluster = q.submit(ME, ad, 3)
        q.job_started(JobId(cluster, 0))
        q.job_started(JobId(cluster, 1))
        q.job_exited(JobId(cluster, 0), 0)
        q.act(JobAction.Hold, JobId(cluster, 2), ME, "by the test")
    return cluster


def _die_after(home: Path, appended: int) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(home), str(appended), str(TOTAL)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr


def _restart(home: Path) -> None:
    worker = QueueWorker(JobQueue.open(home / "spool", fsync=False))
    try:
        writer = UserLogWriter(worker, home / "spool" / "userlog.seq", "<host>")
        writer.load()
        asyncio.run(writer.catch_up())
    finally:
        worker.close()


def _logged(log: Path) -> Counter[tuple[int, int]]:
    events = htcondor2.JobEventLog(str(log)).events(stop_after=0)
    return Counter((int(e.type), e.proc) for e in events)


@pytest.mark.parametrize(
    "kills",
    [[0], [1], [3], [TOTAL - 1], [TOTAL], [2, 1], [5, 0], [4, 2]],
    ids=lambda kills: "-".join(map(str, kills)),
)
def test_a_kill_9_anywhere_in_a_batch_writes_each_event_once(
    tmp_path: Path, kills: list[int]
) -> None:
    """`kills`: each run is killed after appending that many of the events still to
    write; then a run that is not killed."""
    home = tmp_path / "home"
    cluster = _queue(home)
    log = home / "job.log"
    grid = GridSubmitEvent(
        cluster=cluster, proc=1, timestamp=1.0, grid_resource="batch slurm", grid_job_id="7"
    )
    for appended in kills:
        _die_after(home, appended)
        # The grid manager writes to the same log meanwhile.
        UserLog(log).append(grid)
    _restart(home)
    _restart(home)  # nothing more: its place is saved
    logged = _logged(log)
    assert logged.pop((27, 1)) == len(kills)  # the grid manager's events are all kept
    assert logged == EXPECTED
    assert not (home / "spool" / "userlog.pending").exists()


def test_an_unfinished_batch_whose_changes_now_make_no_event_is_closed(tmp_path: Path) -> None:
    # A batch cut short whose changes, made again, give no event (its jobs' logs since
    # dropped, say): the writer closes it and goes on, rather than stop at it.
    home = tmp_path / "home"
    (home / "spool").mkdir(parents=True)
    log = home / "job.log"
    with JobQueue.open(home / "spool", fsync=False) as q:
        ad = ClassAd({"Cmd": "/bin/true", "UserLog": str(log), "Iwd": str(home), "Owner": USER})
        cluster = q.submit(ME, ad, 1)
    _restart(home)  # its 000 written
    with JobQueue.open(home / "spool", fsync=False) as q:
        after = q.last_seq
        q.edit([JobId(cluster, 0)], {"Note": '"a"'}, ME)
        q.edit([JobId(cluster, 0)], {"Note": '"b"'}, ME)
        last = q.last_seq
        q.act(JobAction.Hold, JobId(cluster, 0), ME, "later")
    spool = home / "spool"
    (spool / "userlog.seq").write_text(f"{after}\n")
    batch = {"after": after, "last": last, "logs": [[str(log), USER, log.stat().st_size]]}
    (spool / "userlog.pending").write_text(json.dumps(batch))
    _restart(home)
    assert _logged(log) == Counter({(0, 0): 1, (12, 0): 1})
    assert not (spool / "userlog.pending").exists()


def test_a_catch_up_whose_caller_is_cancelled_writes_each_event_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A submit's or a history read's wait for the writer, cancelled (the daemon stopping)
    # while a batch is being written: the next catch-up must not write it again.
    _queue(tmp_path)
    entered, go = threading.Event(), threading.Event()

    class Slow(userlog.UserLog):
        def append(self, event: UserLogEvent) -> None:
            entered.set()
            go.wait(30)  # the disk, slow: the caller gives up meanwhile
            super().append(event)

    monkeypatch.setattr(userlog, "UserLog", Slow)
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))

    async def scenario() -> None:
        writer = UserLogWriter(worker, tmp_path / "spool" / "userlog.seq", "<host>")
        writer.load()
        waiting = asyncio.ensure_future(writer.catch_up(client=True))
        assert await asyncio.to_thread(entered.wait, 30)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        go.set()
        await writer.catch_up()

    try:
        asyncio.run(scenario())
    finally:
        worker.close()
    assert _logged(tmp_path / "job.log") == EXPECTED
