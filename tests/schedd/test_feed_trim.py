"""The change feed is trimmed once every follower has read it, so the queue does not grow
forever; nothing a follower still needs is trimmed."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from htgrid.schedd import Daemon, ScheddConfig

from ._harness import FAST, PersonalPool, event_types, finished, submit, wait_for

JOBS = """universe = local
executable = /bin/true
log = job.log
queue 20
"""


def _feed_rows(pool: PersonalPool) -> int:
    db = sqlite3.connect(f"file:{pool.home / 'spool' / 'queue.db'}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM changes").fetchone()[0])
    finally:
        db.close()


def test_the_feed_is_trimmed_after_every_follower_has_read_it(tmp_path: Path) -> None:
    with PersonalPool(tmp_path / "pool", **FAST) as pool:
        cluster = submit(pool, tmp_path / "work", JOBS)
        with pool.client() as schedd:
            wait_for(lambda: finished(schedd, cluster, 20), timeout=60, what="20 jobs done")
        # Every job's events reached the log: the writer read the feed first.
        log = tmp_path / "work" / "job.log"
        wait_for(lambda: event_types(log).count(5) == 20, what="20 terminated events")
        # 20 jobs made well over 60 changes (submit, start, exit, leave); the periodic
        # pass forgets them once read.
        wait_for(lambda: _feed_rows(pool) <= 1, timeout=20, what="the feed trimmed")
        assert event_types(log).count(0) == 20


def test_what_the_grid_manager_has_not_read_is_kept(tmp_path: Path) -> None:
    home = tmp_path / "pool"
    PersonalPool(home, daemons=("MASTER", "SCHEDD", "GRIDMANAGER"))  # writes htgrid.conf
    daemon = Daemon(ScheddConfig.load(home))
    # Listed but not started yet (no position saved): it would have to rescan the queue
    # for whatever was trimmed, so nothing is.
    assert daemon._feed_read_upto() == 0
    seq_file = home / "spool" / "gridmanager" / "feed.seq"
    seq_file.parent.mkdir(parents=True)
    seq_file.write_text("42\n")
    assert daemon._feed_read_upto() == 42
    seq_file.write_text("garbage\n")
    assert daemon._feed_read_upto() == 0


def test_what_the_job_router_has_not_read_is_kept(tmp_path: Path) -> None:
    home = tmp_path / "pool"
    PersonalPool(home, daemons=("MASTER", "SCHEDD", "GRIDMANAGER", "JOB_ROUTER"))
    daemon = Daemon(ScheddConfig.load(home))
    (home / "spool" / "gridmanager").mkdir(parents=True)
    (home / "spool" / "gridmanager" / "feed.seq").write_text("42\n")
    # Not started yet: a router that lost changes would read every routed job again.
    assert daemon._feed_read_upto() == 0
    seq_file = home / "spool" / "jobrouter" / "feed.seq"
    seq_file.parent.mkdir(parents=True)
    seq_file.write_text("17\n")
    assert daemon._feed_read_upto() == 17


def test_without_a_grid_manager_its_position_does_not_count(tmp_path: Path) -> None:
    home = tmp_path / "pool"
    PersonalPool(home)  # the queue alone
    daemon = Daemon(ScheddConfig.load(home))
    seq_file = home / "spool" / "gridmanager" / "feed.seq"
    seq_file.parent.mkdir(parents=True)
    seq_file.write_text("42\n")
    assert daemon._feed_read_upto() == 0  # no follower has started: keep everything


def _first_kept(pool: PersonalPool) -> int | None:
    db = sqlite3.connect(f"file:{pool.home / 'spool' / 'queue.db'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT min(seq) FROM changes").fetchone()[0]  # type: ignore[no-any-return]
    finally:
        db.close()


def test_a_grid_manager_started_by_hand_counts_while_it_listens(tmp_path: Path) -> None:
    # GRIDMANAGER is not in DAEMON_LIST: this grid manager was started by hand. It
    # listens on the doorbell and has read the feed up to change 5.
    with PersonalPool(tmp_path / "pool", **FAST) as pool:
        state = pool.home / "spool" / "gridmanager"
        state.mkdir(parents=True, exist_ok=True)
        (state / "feed.seq").write_text("5\n")
        os.mkfifo(state / "wake")
        listener = os.open(state / "wake", os.O_RDONLY | os.O_NONBLOCK)
        try:
            cluster = submit(pool, tmp_path / "work", JOBS)
            with pool.client() as schedd:
                wait_for(lambda: finished(schedd, cluster, 20), timeout=60, what="20 jobs done")
            # The daemon's own followers have read it all; what the grid manager has
            # not read stays.
            wait_for(lambda: _first_kept(pool) == 6, timeout=20, what="changes 1-5 trimmed")
        finally:
            os.close(listener)
        # Gone (the next ring finds no one): its position no longer holds the feed back.
        more = submit(pool, tmp_path / "more", JOBS.replace("queue 20", "queue 1"))
        with pool.client() as schedd:
            wait_for(lambda: finished(schedd, more, 1), timeout=60, what="the last job done")
        wait_for(lambda: _feed_rows(pool) <= 1, timeout=20, what="the feed trimmed")
