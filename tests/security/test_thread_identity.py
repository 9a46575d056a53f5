"""One thread acting with a job owner's rights (htgrid._privsep): only that thread, only
the owner's rights, and the thread's own identity back after."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from htgrid import _privsep
from htgrid._files import open_beneath
from htgrid._privsep import (
    Account,
    OwnerPolicy,
    OwnerRefused,
    PrivilegeError,
    as_owner,
    closed_to_others,
    spawn_identity,
)

from ._accounts import LocalUser

T = TypeVar("T")


def account_of(user: LocalUser) -> Account:
    return Account.lookup(user.name)


def in_thread(fn: Callable[[], T]) -> T:
    """`fn()` run in a new thread; its result, or its exception raised here."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append((True, fn()))
        except BaseException as exc:
            result.append((False, exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    ok, value = result[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


@pytest.fixture
def secret(tmp_path: Path) -> Iterator[Path]:
    """A file only root may read (0600), in a directory only root may enter (0700)."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    path = private / "secret"
    path.write_text("root's\n")
    path.chmod(0o600)
    yield path


def test_a_switched_thread_cannot_read_roots_file_or_write_in_roots_directory(
    second_user: LocalUser, shared_dir: Path
) -> None:
    private = shared_dir / "root-only"
    private.mkdir(mode=0o700)
    (private / "key").write_text("root's key\n")
    (shared_dir / "key").write_text("root's other key\n")
    (shared_dir / "key").chmod(0o600)

    def attempt() -> list[str]:
        refused = []
        with as_owner(account_of(second_user)):
            for what, action in (
                ("read a 0600 file", lambda: (shared_dir / "key").read_text()),
                ("enter a 0700 directory", lambda: (private / "key").read_text()),
                ("write in a 0700 directory", lambda: (private / "new").write_text("x")),
                ("write in /etc", lambda: Path("/etc/htgrid-owner-test").write_text("x")),
            ):
                try:
                    action()
                except PermissionError:
                    refused.append(what)
        return refused

    assert in_thread(attempt) == [
        "read a 0600 file",
        "enter a 0700 directory",
        "write in a 0700 directory",
        "write in /etc",
    ]
    assert not (private / "new").exists()
    # The same thread work as the daemon itself, outside the block: all allowed.
    assert in_thread(lambda: (shared_dir / "key").read_text()) == "root's other key\n"


def test_only_the_switched_thread_changes(second_user: LocalUser, secret: Path) -> None:
    inside, done = threading.Event(), threading.Event()
    seen: dict[str, object] = {}
    root_groups = os.getgroups()

    def switched() -> None:
        with as_owner(account_of(second_user)):
            try:
                secret.read_text()
            except PermissionError:
                seen["switched"] = "refused"
            inside.set()
            done.wait(10)

    thread = threading.Thread(target=switched)
    thread.start()
    try:
        assert inside.wait(10)
        # While the other thread is the second user, this one is still root.
        seen["main"] = secret.read_text()
        seen["main groups"] = os.getgroups()
        probe = secret.parent / "made-by-main"
        probe.write_text("x")
        seen["main owner"] = probe.stat().st_uid
    finally:
        done.set()
        thread.join()
    assert seen == {
        "switched": "refused",
        "main": "root's\n",
        "main groups": root_groups,
        "main owner": 0,
    }


def test_what_a_switched_thread_makes_is_the_owners(
    second_user: LocalUser, shared_dir: Path
) -> None:
    home = shared_dir / "home"
    home.mkdir()
    os.chown(home, second_user.uid, second_user.gid)

    def make() -> os.stat_result:
        with as_owner(account_of(second_user)):
            (home / "out.txt").write_text("mine\n")
        return (home / "out.txt").stat()

    st = in_thread(make)
    assert (st.st_uid, st.st_gid) == (second_user.uid, second_user.gid)


def test_the_owners_supplementary_groups_count(second_user: LocalUser, shared_dir: Path) -> None:
    shared = shared_dir / "group-file"
    shared.write_text("for the group\n")
    os.chown(shared, 0, second_user.extra_gid)
    shared.chmod(0o640)
    before = os.getgroups()

    def read() -> tuple[str, list[int]]:
        with as_owner(account_of(second_user)):
            text = shared.read_text()
        return text, os.getgroups()

    text, after = in_thread(read)
    assert text == "for the group\n"
    assert sorted(after) == sorted(before)


def test_the_identity_comes_back_after_an_error(second_user: LocalUser, secret: Path) -> None:
    def fail_then_read() -> str:
        with pytest.raises(ZeroDivisionError), as_owner(account_of(second_user)):
            _ = 1 / 0
        return secret.read_text()  # root again in this thread

    assert in_thread(fail_then_read) == "root's\n"


def test_a_thread_that_cannot_get_its_identity_back_ends_the_process(
    second_user: LocalUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Ended(Exception):
        pass

    def fatal(message: str) -> None:
        raise Ended(message)

    real = _privsep._become
    calls: list[int] = []

    def become(libc: Any, uid: int, gid: int, groups: tuple[int, ...]) -> bool:
        calls.append(uid)
        if len(calls) == 2:  # the way back
            return False
        return real(libc, uid, gid, groups)

    monkeypatch.setattr(_privsep, "_fatal", fatal)
    monkeypatch.setattr(_privsep, "_become", become)

    def run() -> None:
        try:
            with as_owner(account_of(second_user)):
                pass
        finally:
            real(_privsep._calls(), 0, 0, (0,))  # this test's thread, repaired

    with pytest.raises(Ended, match=f"acted as {second_user.name} could not get its identity"):
        in_thread(run)


def test_a_switch_that_does_not_take_refuses_the_block(
    second_user: LocalUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _privsep._become
    calls: list[int] = []

    def become(libc: Any, uid: int, gid: int, groups: tuple[int, ...]) -> bool:
        calls.append(uid)
        return real(libc, uid, gid, groups) and len(calls) > 1

    monkeypatch.setattr(_privsep, "_become", become)
    ran: list[bool] = []

    def run() -> None:
        with as_owner(account_of(second_user)):
            ran.append(True)

    with pytest.raises(PrivilegeError, match="cannot take the identity"):
        in_thread(run)
    assert ran == []


def test_nothing_switches_in_a_process_not_run_by_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """A personal pool's daemons (an ordinary user's) neither can nor need to switch."""

    def no_libc() -> None:
        raise AssertionError("a process not run by root must not call setfsuid")

    monkeypatch.setattr(_privsep, "_calls", no_libc)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    someone = Account("someone", 1001, 1001, (1001,), "/home/someone")
    with as_owner(someone):
        pass
    assert spawn_identity(someone) == {}


def test_a_process_spawned_with_the_owners_identity_is_the_owners(
    second_user: LocalUser,
) -> None:
    account = account_of(second_user)
    done = subprocess.run(
        ["/bin/sh", "-c", "id -u; id -g; id -G"],
        capture_output=True,
        text=True,
        check=True,
        **spawn_identity(account),
    )
    uid, gid, groups = done.stdout.split("\n")[:3]
    assert (int(uid), int(gid)) == (account.uid, account.gid)
    assert sorted(int(g) for g in groups.split()) == sorted({account.gid, second_user.extra_gid})


# -- the policy --------------------------------------------------------------------------


def test_the_owner_policy_of_a_pool_run_by_root(second_user: LocalUser) -> None:
    policy = OwnerPolicy(daemon_uid=0)
    assert policy.account(second_user.name) == account_of(second_user)
    with pytest.raises(OwnerRefused, match=r"is root \(uid 0\): jobs do not run as root unless"):
        policy.account("root")
    assert OwnerPolicy(daemon_uid=0, allow_root=True).account("root").uid == 0
    with pytest.raises(OwnerRefused, match="no-such-user-here is not an account on this host"):
        policy.account("no-such-user-here")
    with pytest.raises(OwnerRefused, match="has no Owner"):
        policy.account(None)


def test_a_personal_pool_runs_its_users_jobs_only(second_user: LocalUser) -> None:
    policy = OwnerPolicy(daemon_uid=second_user.uid)
    assert policy.account(second_user.name).uid == second_user.uid
    with pytest.raises(OwnerRefused, match=f"run as {second_user.name}, not as root"):
        policy.account("root")
    with pytest.raises(OwnerRefused, match="not an account"):
        policy.account("no-such-user-here")


# -- opening inside a sandbox --------------------------------------------------------------


def test_open_beneath_follows_no_link(tmp_path: Path) -> None:
    box = tmp_path / "box"
    (box / "sub").mkdir(parents=True)
    (box / "sub" / "out.txt").write_text("inside\n")
    (box / "etc").symlink_to("/etc")
    (box / "passwd").symlink_to("/etc/passwd")
    fd = open_beneath(box, "sub/out.txt", os.O_RDONLY)
    with os.fdopen(fd) as f:
        assert f.read() == "inside\n"
    for rel in ("etc/passwd", "passwd", "../box/sub/out.txt", "/etc/passwd", "sub/../../x"):
        with pytest.raises((OSError, ValueError)):
            os.close(open_beneath(box, rel, os.O_RDONLY))


def test_a_directory_closed_to_other_users_is_found(shared_dir: Path) -> None:
    closed = shared_dir / "closed"
    closed.mkdir(mode=0o700)
    (closed / "home").mkdir()
    assert closed_to_others(closed / "home" / "execute") == closed
    assert closed_to_others(shared_dir / "home") is None  # 0711 all the way down
