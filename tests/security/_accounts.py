"""A second local user for the security tests, made with useradd and removed after.

The tests need root (to make the user, and because a pool run by root is what runs jobs
as their owners). Elsewhere they are skipped, except under CI=true (CI runs as root),
where a missing second user is a failure: the attacks must be tried, not skipped.

The fixtures are this directory's (conftest.py).
"""

from __future__ import annotations

import contextlib
import fcntl
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

__all__ = ["LocalUser", "need_root", "second_user", "shared_dir", "user_runs_python", "workdir"]


@dataclass(frozen=True, slots=True)
class LocalUser:
    """The second user (its primary group its own), an extra group it is in, its home."""

    name: str
    uid: int
    gid: int
    extra_group: str
    extra_gid: int
    home: Path


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
def second_user(shared_tmp_factory: Callable[[str], Path]) -> Iterator[LocalUser]:
    """A fresh local user (its own primary group, and one extra group), removed after.
    Its home (0700, its own) is in a directory others pass through, as users' homes are:
    its GAHP servers look for its tokens there."""
    need_root("a second local user is made with useradd")
    if shutil.which("useradd") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("useradd is required under CI=true")
        pytest.skip("useradd is not installed")
    name = f"htgsec{secrets.token_hex(3)}"
    extra = f"{name}x"
    home = shared_tmp_factory("homes") / name
    _run("groupadd", extra)
    try:
        _run("useradd", "-M", "-U", "-d", str(home), "-s", "/bin/sh", "-G", extra, name)
        try:
            entry = pwd.getpwnam(name)
            home.mkdir(mode=0o700)
            os.chown(home, entry.pw_uid, entry.pw_gid)
            yield LocalUser(
                name, entry.pw_uid, entry.pw_gid, extra, grp.getgrnam(extra).gr_gid, home
            )
        finally:
            _run("userdel", name)
    finally:
        subprocess.run(["groupdel", extra], capture_output=True, check=False)


@pytest.fixture
def shared_dir(shared_tmp_factory: Callable[[str], Path]) -> Path:
    """A scratch directory other local users can pass through (0711, in /tmp: pytest's
    own temporary directories are root's alone)."""
    return shared_tmp_factory("security")


@pytest.fixture
def workdir(shared_dir: Path, second_user: LocalUser) -> Path:
    """A directory of the second user's, where its job runs."""
    work = shared_dir / "work"
    work.mkdir()
    os.chown(work, second_user.uid, second_user.gid)
    return work


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


_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = 1, 2, 4, 8, 16, 32
_NO_ID = 0xFFFFFFFF
# pytest-xdist runs one session per worker, each with its own second user, all opening the
# same directories: the ACL is read, changed and written under this lock, entry by entry.
_ACL_LOCK = Path("/tmp/htgrid-tests-acl.lock")


def _acl_entries(directory: Path) -> list[tuple[int, int, int]]:
    """The directory's access ACL as (tag, perm, id) entries; its mode as one if it has none."""
    try:
        raw = os.getxattr(directory, _ACL)
    except OSError:
        mode = stat.S_IMODE(os.stat(directory).st_mode)
        return [
            (_ACL_USER_OBJ, (mode >> 6) & 7, _NO_ID),
            (_ACL_GROUP_OBJ, (mode >> 3) & 7, _NO_ID),
            (_ACL_OTHER, mode & 7, _NO_ID),
        ]
    return [tuple(e) for e in struct.iter_unpack("<HHI", raw[4:])]  # type: ignore[misc]


def _write_acl(directory: Path, entries: list[tuple[int, int, int]]) -> None:
    """Write `entries` back (with a mask covering the named ones), or, when no named entry is
    left, no ACL at all and the mode it stands for."""
    plain = [e for e in entries if e[0] != _ACL_MASK]
    named = [e for e in plain if e[0] in (_ACL_USER, _ACL_GROUP)]
    perm = {tag: p for tag, p, _ in plain}
    if not named:
        with contextlib.suppress(OSError):
            os.removexattr(directory, _ACL)
        mode = perm[_ACL_USER_OBJ] << 6 | perm[_ACL_GROUP_OBJ] << 3 | perm[_ACL_OTHER]
        os.chmod(directory, mode | (os.stat(directory).st_mode & 0o7000))
        return
    mask = perm[_ACL_GROUP_OBJ]
    for _, p, _ in named:
        mask |= p
    # The kernel wants the entries sorted by tag, then by id.
    full = sorted([*plain, (_ACL_MASK, mask, _NO_ID)], key=lambda e: (e[0], e[2]))
    os.setxattr(
        directory, _ACL, struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in full)
    )


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _change_acl(directory: Path, uid: int, *, add: bool) -> None:
    """Give `uid` search (x) on `directory`, or take that entry away again."""
    with open(_ACL_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # An entry for a uid with no account is one a killed run left behind: dropped too.
        entries = [
            e
            for e in _acl_entries(directory)
            if not (e[0] == _ACL_USER and (e[2] == uid or not _has_account(e[2])))
        ]
        if add:
            entries.append((_ACL_USER, 1, uid))
        _write_acl(directory, entries)


@pytest.fixture(scope="session")
def user_runs_python(second_user: LocalUser) -> Iterator[None]:
    """The second user may run this Python and import htgrid, as the GAHP servers of its
    jobs do (they run as the job's owner). Where a directory above them is closed to it
    (CI keeps pyenv's Pythons under /root, mode 0700), that directory alone lets it
    through, by a POSIX ACL entry naming it, taken away after (other entries, another
    worker's or the admin's, are kept)."""
    needed = [Path(os.path.realpath(sys.executable)), Path(sys.base_prefix) / "lib"]
    needed += [Path(htgrid.__file__).parent]
    needed += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    closed = {d for path in needed if (d := _closed_to(second_user, path)) is not None}
    opened: list[Path] = []
    try:
        for directory in sorted(closed):
            _change_acl(directory, second_user.uid, add=True)
            opened.append(directory)
        yield
    finally:
        for directory in opened:
            _change_acl(directory, second_user.uid, add=False)
