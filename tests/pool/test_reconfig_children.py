"""`htgrid reconfig` (condor_reconfig) reaches the execute node and the grid manager the
master runs: each reads htgrid.conf again and takes what can change, with no restart."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.net import ScheddClient
from htgrid.testing import WHOLE_POOL, PersonalPool, run_cli, wait_for

from .conftest import FAST, submit

#: What the tests edit: the node takes jobs tagged "old" only, the grid manager submits
#: one job at a time and polls their status once an hour.
KNOBS: dict[str, object] = {
    **FAST,
    "START": 'TARGET.Tag == "old"',
    "GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE": 1,
    "GRIDMANAGER_JOB_PROBE_INTERVAL": 3600,
}


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("pool")
    with PersonalPool(home, kill_grace=2, fsync=False, daemons=WHOLE_POOL, config=KNOBS) as p:
        yield p


def _reconfig(pool: PersonalPool, **knobs: object) -> None:
    """Set `knobs` in htgrid.conf (in place of their lines) and run `htgrid reconfig`."""
    conf = pool.home / "htgrid.conf"
    lines = [line for line in conf.read_text().splitlines() if line.split(" = ")[0] not in knobs]
    lines += [f"{name} = {value}" for name, value in knobs.items()]
    conf.write_text("\n".join(lines) + "\n")
    status, _, err = run_cli(pool.home, "reconfig")
    assert status == 0, err


def _log_has(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text()


def _tagged(pool: PersonalPool, work: Path, tag: str) -> int:
    return submit(
        pool.home,
        work,
        "executable = /bin/true\nshould_transfer_files = YES\nrequest_memory = 16\n"
        f'+Tag = "{tag}"\nqueue\n',
    )


def _done(schedd: ScheddClient, cluster: int) -> bool:
    return len(schedd.history(f"ClusterId == {cluster}", ["ExitCode"])) == 1


def _idle(schedd: ScheddClient, cluster: int) -> bool:
    (ad,) = schedd.query(f"ClusterId == {cluster}", ["JobStatus", "NumJobStarts"])
    return ad["JobStatus"] == 1 and not ad.get("NumJobStarts")


@pytest.mark.timeout(240)
def test_a_reconfig_makes_the_execute_node_take_a_new_start(
    pool: PersonalPool, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    startd = pool.child_pid("startd")
    with pool.client() as schedd:
        refused = _tagged(pool, work, "new")
        witness = _tagged(pool, work, "old")
        # The node ran the job submitted after it: the first was matched against it, and
        # START said no.
        wait_for(lambda: _done(schedd, witness), timeout=90, interval=0.2, what="the old job")
        assert _idle(schedd, refused)

        _reconfig(
            pool, START='TARGET.Tag == "new"', NUM_CPUS=4, STARTD_ATTRS="Site", Site='"attic"'
        )
        wait_for(lambda: _done(schedd, refused), timeout=90, interval=0.2, what="the new job")
        wait_for(
            lambda: "attic" in run_cli(pool.home, "status", "-af", "Site")[1],
            timeout=30,
            interval=0.2,
            what="STARTD_ATTRS in the slot's ad",
        )
        # ... and the other way round: START now refuses what it took before.
        refused = _tagged(pool, work, "old")
        witness = _tagged(pool, work, "new")
        wait_for(lambda: _done(schedd, witness), timeout=90, interval=0.2, what="the new job")
        assert _idle(schedd, refused)
        assert run_cli(pool.home, "rm", str(refused))[0] == 0
    assert pool.child_pid("startd") == startd  # taken live, not by a restart
    log = pool.home / "log" / "StartLog"
    assert _log_has(log, "reconfig: START, STARTD_ATTRS taken")
    assert _log_has(log, "reconfig: NUM_CPUS changed, which needs a restart")


def _grid_job(pool: PersonalPool, work: Path) -> int:
    return submit(
        pool.home,
        work,
        "universe = grid\ngrid_resource = batch fork\nexecutable = /bin/true\nqueue\n",
    )


@pytest.mark.timeout(240)
def test_a_reconfig_changes_the_grid_managers_limit_and_poll_interval(
    pool: PersonalPool, tmp_path: Path
) -> None:
    work = tmp_path / "grid"
    gridmanager = pool.child_pid("gridmanager")
    log = pool.home / "log" / "GridmanagerLog"
    with pool.client() as schedd:

        def ad(cluster: int) -> dict[str, object]:
            (job,) = schedd.query(f"ClusterId == {cluster}", ["GridJobId", "GridWaitReason"])
            return dict(job)

        first, second = _grid_job(pool, work), _grid_job(pool, work)
        wait_for(
            lambda: "submit slot" in str(ad(second).get("GridWaitReason")),
            timeout=60,
            interval=0.2,
            what="the second job waiting for the only submit slot",
        )
        assert ad(first).get("GridJobId")

        _reconfig(pool, GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE=5)
        wait_for(lambda: ad(second).get("GridJobId"), timeout=60, interval=0.2, what="a slot")
        # Their batch jobs ended long ago, but no status poll comes for an hour.
        assert not _done(schedd, first)

        _reconfig(pool, GRIDMANAGER_JOB_PROBE_INTERVAL=1)
        wait_for(
            lambda: _done(schedd, first) and _done(schedd, second),
            timeout=60,
            interval=0.2,
            what="the jobs done",
        )
    assert pool.child_pid("gridmanager") == gridmanager
    assert _log_has(log, "reconfig: GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE 1 -> 5")
    assert _log_has(log, "reconfig: GRIDMANAGER_JOB_PROBE_INTERVAL 3600 -> 1")


def _children(parent: int, word: str) -> list[int]:
    """The pids of `parent`'s children whose command line holds `word`."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = next(x for x in status.read_text().splitlines() if x.startswith("PPid:"))
            argv = (status.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, StopIteration):
            continue
        if int(ppid.split()[1]) == parent and word.encode() in argv:
            found.append(int(status.parent.name))
    return found


@pytest.mark.timeout(240)
def test_a_reconfig_gives_batch_gahp_to_the_next_batch_gahp_server(
    pool: PersonalPool, tmp_path: Path
) -> None:
    """BATCH_GAHP (a wrapper here) is the command of the batch GAHP server started after
    the reconfig; the one running then serves on until it ends (killed here)."""
    started = tmp_path / "started"
    wrapper = tmp_path / "batch_gahp"
    wrapper.write_text(
        f'#!/bin/sh\necho $$ >> {started}\nexec {sys.executable} -m htgrid.cli gahp batch "$@"\n'
    )
    wrapper.chmod(0o755)
    gridmanager = pool.child_pid("gridmanager")
    assert gridmanager is not None
    log = pool.home / "log" / "GridmanagerLog"
    _reconfig(pool, BATCH_GAHP=f"{wrapper} -v", GRIDMANAGER_JOB_PROBE_INTERVAL=1)
    wait_for(lambda: _log_has(log, f"BATCH_GAHP = {wrapper} -v"), timeout=60, what="reconfig")
    for pid in _children(gridmanager, "batch"):
        os.kill(pid, signal.SIGKILL)
    with pool.client() as schedd:
        cluster = _grid_job(pool, tmp_path / "work")
        wait_for(lambda: _done(schedd, cluster), timeout=90, interval=0.2, what="the job")
    assert started.exists()
    assert pool.child_pid("gridmanager") == gridmanager


def test_what_waits_for_a_restart_is_kept_and_named(tmp_path: Path) -> None:
    from htgrid.grid import GridManagerConfig
    from htgrid.startd import StartdConfig

    (tmp_path / "htgrid.conf").write_text("NUM_CPUS = 2\nSTART = false\n")
    old = StartdConfig.load(tmp_path)
    (tmp_path / "htgrid.conf").write_text("NUM_CPUS = 8\nSTART = true\nEXECUTE = /tmp/x\n")
    taken, changed, later = old.reconfigured(StartdConfig.load(tmp_path))
    assert (taken.start, taken.num_cpus, taken.execute_dir) == ("true", 2, old.execute_dir)
    assert (changed, later) == (["START"], ["EXECUTE", "NUM_CPUS"])

    running = GridManagerConfig()
    (tmp_path / "htgrid.conf").write_text(
        "GRIDMANAGER_MAX_PENDING_REQUESTS = 5\nGRIDMANAGER_RESOURCE_PROBE_INTERVAL = 60\n"
    )
    config, lines = running.reconfigured(GridManagerConfig().with_knobs(tmp_path))
    assert (config.max_pending_requests, config.down_ping_interval) == (50, 60)
    assert lines == [
        "GRIDMANAGER_RESOURCE_PROBE_INTERVAL 300 -> 60",
        "GRIDMANAGER_MAX_PENDING_REQUESTS 50 -> 5 needs a restart: 50 kept",
    ]


def test_a_batch_gahp_that_cannot_be_split_is_refused_with_its_line(tmp_path: Path) -> None:
    from htgrid.grid import GridManagerConfig
    from htgrid.pool import PoolError

    (tmp_path / "htgrid.conf").write_text("BATCH_GAHP = /opt/blahp/blahpd --x 'a b' \n")
    assert GridManagerConfig().with_knobs(tmp_path).batch_gahp == (
        "/opt/blahp/blahpd",
        "--x",
        "a b",
    )
    (tmp_path / "htgrid.conf").write_text("UPDATE_INTERVAL = 5\nBATCH_GAHP = /opt/blahpd 'a\n")
    with pytest.raises(PoolError, match=r"htgrid.conf:2: BATCH_GAHP: No closing quotation"):
        GridManagerConfig().with_knobs(tmp_path)
