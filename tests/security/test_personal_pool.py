"""A personal pool: daemons run by an ordinary user run that user's jobs, as that user,
and nobody else's; its files and socket are that user's alone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.queue import NotAuthorized
from htgrid.testing import PersonalPool

from ._accounts import LocalUser
from ._pool import DOMAIN, completed, submit


@pytest.fixture
def personal(
    shared_dir: Path, second_user: LocalUser, user_runs_python: None
) -> Iterator[PersonalPool]:
    """The second user's pool, started by that user (`htgrid up`)."""
    home = shared_dir / "pool"
    home.mkdir()
    pool = PersonalPool(home, config={"TRUST_DOMAIN": DOMAIN})
    for path in (home, home / "htgrid.conf"):
        os.chown(path, second_user.uid, second_user.gid)
    env = dict(os.environ, HTGRID_HOME=str(home), HOME=str(home))
    up = subprocess.run(
        [sys.executable, "-m", "htgrid.cli", "up", "-no-execute"],
        env=env,
        user=second_user.uid,
        group=second_user.gid,
        extra_groups=[second_user.extra_gid],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield pool
    finally:
        pool.stop()


def test_it_runs_its_users_jobs_as_that_user_and_nobody_elses(
    personal: PersonalPool, second_user: LocalUser, shared_dir: Path
) -> None:
    work = shared_dir / "work"
    work.mkdir()
    os.chown(work, second_user.uid, second_user.gid)
    with personal.client() as root:  # root reaches any socket, and is an administrator
        with pytest.raises(NotAuthorized, match=f"run as {second_user.name}, not as root"):
            submit(root, Iwd=str(work))
        job = submit(
            root,
            Owner=second_user.name,
            Cmd="/bin/sh",
            Arguments="-c 'id -u; id -g'",
            Iwd=str(work),
            Out="id.out",
            LeaveJobInQueue=True,
        )
        completed(root, job)
    uid, gid = (work / "id.out").read_text().split()
    assert (int(uid), int(gid)) == (second_user.uid, second_user.gid)
    assert (work / "id.out").stat().st_uid == second_user.uid
    other = personal.remote(personal.token(f"nobody@{DOMAIN}"))
    with other, pytest.raises(NotAuthorized, match=f"{second_user.name}'s jobs only, not nobody"):
        submit(other, Iwd="/tmp")


def test_its_files_and_socket_are_its_users_alone(personal: PersonalPool) -> None:
    for path in (personal.home, personal.home / "spool", personal.home / "run"):
        assert path.stat().st_mode & 0o777 == 0o700, path
    assert personal.config.socket.stat().st_mode & 0o777 == 0o600
