"""A second local user for the security tests, made with useradd and removed after.

The tests need root (to make the user, and because a pool run by root is what runs jobs
as their owners). Elsewhere they are skipped, except under CI=true (CI runs as root),
where a missing second user is a failure: the attacks must be tried, not skipped.

The fixtures are this directory's (conftest.py).
"""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import stat
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import htgrid

__all__ = ["LocalUser", "need_root", "second_user", "shared_dir", "user_runs_python"]


@dataclass(frozen=True, slots=True)
class LocalUser:
    """The second user (its primary group its own) and an extra group it is in."""

    name: str
    uid: int
    gid: int
    extra_group: str
    extra_gid: int


def need_root(why: str) -> None:
    """Skip unless root; under CI=true, fail instead."""
    if os.geteuid() == 0:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"this test needs root under CI=true: {why}")
    pytest.skip(f"needs root: {why}")


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")


@pytest.fixture(scope="session")
def second_user() -> Iterator[LocalUser]:
    """A fresh local user (its own primary group, and one extra group), removed after."""
    need_root("a second local user is made with useradd")
    if shutil.which("useradd") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("useradd is required under CI=true")
        pytest.skip("useradd is not installed")
    name = f"htgsec{secrets.token_hex(3)}"
    extra = f"{name}x"
    _run("groupadd", extra)
    try:
        _run("useradd", "-M", "-U", "-d", "/nonexistent", "-s", "/bin/sh", "-G", extra, name)
        try:
            entry = pwd.getpwnam(name)
            yield LocalUser(name, entry.pw_uid, entry.pw_gid, extra, grp.getgrnam(extra).gr_gid)
        finally:
            _run("userdel", name)
    finally:
        subprocess.run(["groupdel", extra], capture_output=True, check=False)


@pytest.fixture
def shared_dir(shared_tmp_factory: Callable[[str], Path]) -> Path:
    """A scratch directory other local users can pass through (0711, in /tmp: pytest's
    own temporary directories are root's alone)."""
    return shared_tmp_factory("security")


_ACL = "system.posix_acl_access"


def _closed_to(user: LocalUser, path: Path) -> Path | None:
    """The first directory above `path` that `user` cannot pass, if any."""
    here = Path("/")
    for part in path.parts[1:-1]:
        here = here / part
        st = os.stat(here)
        if st.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif st.st_gid in (user.gid, user.extra_gid):
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return here
    return None


def _acl_letting_through(mode: int, uid: int) -> bytes:
    """A POSIX access ACL (the kernel's xattr form) equal to `mode`, plus search (x) for
    `uid`."""

    def entry(tag: int, perm: int, who: int = 0xFFFFFFFF) -> bytes:
        return struct.pack("<HHI", tag, perm, who)

    user_obj, user, group_obj, mask, other = 0x01, 0x02, 0x04, 0x10, 0x20
    group = (mode >> 3) & 7
    return (
        struct.pack("<I", 2)
        + entry(user_obj, (mode >> 6) & 7)
        + entry(user, 1, uid)
        + entry(group_obj, group)
        + entry(mask, group | 1)
        + entry(other, mode & 7)
    )


@pytest.fixture(scope="session")
def user_runs_python(second_user: LocalUser) -> Iterator[None]:
    """The second user may run this Python and import htgrid, as the GAHP servers of its
    jobs do (they run as the job's owner). Where a directory above them is closed to it
    (CI keeps pyenv's Pythons under /root, mode 0700), that directory alone lets it
    through, by a POSIX ACL entry naming it, taken away after."""
    needed = [Path(os.path.realpath(sys.executable)), Path(sys.base_prefix) / "lib"]
    needed += [Path(htgrid.__file__).parent]
    needed += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    closed = {d for path in needed if (d := _closed_to(second_user, path)) is not None}
    opened: list[tuple[Path, int]] = []
    try:
        for directory in sorted(closed):
            mode = stat.S_IMODE(os.stat(directory).st_mode)
            try:
                os.getxattr(directory, _ACL)
            except OSError:
                pass
            else:
                pytest.fail(f"{directory} has an ACL already: the tests leave it alone")
            os.setxattr(directory, _ACL, _acl_letting_through(mode, second_user.uid))
            opened.append((directory, mode))
        yield
    finally:
        for directory, mode in opened:
            os.removexattr(directory, _ACL)
            os.chmod(directory, mode)
