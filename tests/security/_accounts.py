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
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["LocalUser", "need_root", "second_user", "shared_dir"]


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
