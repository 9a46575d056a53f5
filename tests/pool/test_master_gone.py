"""The daemons a master started end when it is killed -9 (they see its pipe close), so
a pool's next `htgrid up` finds no orphan holding its ports, slots or queue."""

from __future__ import annotations

import functools
from pathlib import Path

from htgrid.master import alive
from htgrid.testing import PersonalPool, wait_for


def _gone(pid: int) -> bool:
    return not alive(pid)


def test_the_children_of_a_killed_master_stop_and_say_why(tmp_path: Path) -> None:
    pool = PersonalPool(
        tmp_path / "pool", daemons=("MASTER", "SCHEDD", "COLLECTOR", "STARTD", "JOB_ROUTER")
    )
    with pool:
        children = {
            name: wait_for(functools.partial(pool.child_pid, name), 60, what=f"the {name}")
            for name in ("startd", "job_router")
        }
        pool.kill()
        for name, pid in children.items():
            wait_for(functools.partial(_gone, pid), 60, what=f"the {name} ({pid}) to end")
    logs = pool.home / "log"
    said = {p.name: p.read_text() for p in logs.iterdir() if p.is_file()}
    for daemon in ("startd", "job router"):
        assert any(
            f"the master that started this {daemon} is gone: stopping" in text
            for text in said.values()
        ), (daemon, sorted(said))
