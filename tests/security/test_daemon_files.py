"""A pool's own files (its queue, logs, spool, keys and tokens) are not another local
user's to read, whatever the umask its daemons were started with; the socket is every
local user's to reach, and names each caller as the kernel does."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from htgrid.testing import PersonalPool

from ._accounts import LocalUser
from ._pool import DOMAIN, strict_pool, submit


def as_user(user: LocalUser, probe: Callable[[], object]) -> object:
    """`probe()` run by the second user (in a forked child that took its ids); its
    result, or the name of the exception it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only what it needs, then out
        try:
            os.close(read)
            os.setgroups([user.gid, user.extra_gid])
            os.setgid(user.gid)
            os.setuid(user.uid)
            try:
                result: object = probe()
            except OSError as exc:
                result = type(exc).__name__
            os.write(write, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.fixture(scope="module")
def pool(
    shared_tmp_factory: Callable[[str], Path], second_user: LocalUser
) -> Iterator[PersonalPool]:
    """A pool started, and its daemons run, with umask 000."""
    home = shared_tmp_factory("files") / "home"
    old = os.umask(0)
    try:
        with strict_pool(home) as p:
            yield p
    finally:
        os.umask(old)


def test_the_pools_files_are_not_other_users_to_read(
    pool: PersonalPool, second_user: LocalUser
) -> None:
    with pool.remote(pool.token(f"{second_user.name}@{DOMAIN}")) as user:
        submit(user, JobStatus=5, UserLog="x.log")  # a queue with a job in it
    home = pool.home
    secrets = [
        home / "spool" / "queue.db",
        home / "spool" / "userlog.seq",
        home / "log" / "SchedLog",
        home / "etc" / "passwords.d" / "POOL",
        home / "etc" / "tokens.d" / "daemon",
        home / "etc" / "ca" / "ca.key",
        home / "run" / "schedd.pid",
    ]
    assert all(path.exists() for path in secrets)
    for path in secrets:
        assert as_user(second_user, lambda p=path: p.read_bytes().hex()) == "PermissionError", path
    for directory in ("", "spool", "log", "etc", "run"):
        listed = as_user(second_user, lambda d=home / directory: sorted(os.listdir(d)))
        assert listed == "PermissionError", directory


def test_the_socket_is_every_users_and_names_each(
    pool: PersonalPool, second_user: LocalUser
) -> None:
    def health() -> object:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(pool.config.socket))
            conn.sendall(b"GET /v1/health HTTP/1.1\r\nHost: schedd\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        return json.loads(answer.split(b"\r\n\r\n", 1)[1])["you"]

    assert as_user(second_user, health) == {"user": second_user.name, "admin": False}
