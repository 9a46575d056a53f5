"""A job's owner: which local account it is, and file work done with its rights.

The security model: an identity comes only from authentication (a token, TLS, the Unix
socket's peer); the map file turns it into a local account; jobs and every file access
on their behalf run as that account, so nothing a user submits can make a daemon read,
write or run as anyone else.

- `OwnerPolicy.account(owner)`: the local account of a job's Owner, or OwnerRefused:
  there is no such account; it is root (uid 0) and ALLOW_ROOT_JOBS is not set (HTCondor
  never lets a job be root's); or the daemons run as an ordinary user (a personal pool)
  and the owner is someone else.
- `as_owner(account)`: the calling thread's file-system identity is the account's
  (fsuid, fsgid and supplementary groups) for the block. Only that thread changes:
  glibc does not broadcast setfsuid/setfsgid to the process's other threads (it does
  setresuid and setgroups), and the groups are set with the raw system call for that
  reason. While its fsuid is not 0 the kernel takes CAP_DAC_OVERRIDE,
  CAP_DAC_READ_SEARCH, CAP_FOWNER... out of the thread's effective capabilities, so it
  opens, makes and lists files exactly as the owner would, and what it makes is the
  owner's. A handful of system calls: no process per job or per file. Use it in worker
  threads (asyncio.to_thread), never on an event loop's thread. A process forked by the
  switched thread starts with its identity, so a job's working directory is entered
  with the owner's rights too.
- `spawn_identity(account)`: the `user`, `group` and `extra_groups` for Popen that make
  a job's process the owner's.

A daemon not run by root neither can nor needs to switch: its jobs are its own user's,
and both functions then change nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import platform
import pwd
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from htgrid.errors import HTGridError

__all__ = [
    "ALLOW_ROOT_JOBS",
    "JOB_UMASK",
    "USER_FILE_MODE",
    "Account",
    "OwnerPolicy",
    "OwnerRefused",
    "PrivilegeError",
    "as_owner",
    "closed_to_others",
    "daemon_umask",
    "new_owned_dir",
    "owned_dir",
    "spawn_identity",
    "switching",
]

_log = logging.getLogger("htgrid.privsep")

#: The knob that lets jobs run as root (false by default: root's jobs are refused).
ALLOW_ROOT_JOBS: Final = "ALLOW_ROOT_JOBS"
#: The exit status of a process whose thread could not get its own identity back.
EXIT_IDENTITY_LOST: Final = 70
#: The umask of the daemons: what they make is theirs alone unless they say otherwise.
DAEMON_UMASK: Final = 0o077
#: The umask of what runs for a job's owner (HTCondor's daemons set 022; jobs inherit it).
JOB_UMASK: Final = 0o022
#: The mode of a file a daemon makes for a job's owner (its standard files, its log).
USER_FILE_MODE: Final = 0o666 & ~JOB_UMASK
#: How long a looked-up account is believed (accounts change rarely; a job's owner's
#: groups are read again after this).
ACCOUNT_TTL: Final = 60.0
_NO_CHANGE: Final = 0xFFFFFFFF  # (uid_t)-1: setfsuid/setfsgid only report the current id
# setgroups(2)'s number: glibc's setgroups() would change every thread of the process.
_SYS_SETGROUPS: Final = {"x86_64": 116, "aarch64": 159}


class PrivilegeError(HTGridError):
    """The daemon could not act with a job owner's rights."""


class OwnerRefused(PrivilegeError):
    """A job's owner may not run jobs here (no such account, root, or another user)."""


@dataclass(frozen=True, slots=True)
class Account:
    """A local account, as a job's processes and files get it."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups, the primary one included
    home: str

    @classmethod
    def lookup(cls, name: str) -> Account:
        """The account named `name` (KeyError when the host has none)."""
        entry = pwd.getpwnam(name)
        try:
            groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
        except OSError:
            groups = [entry.pw_gid]
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, tuple(groups), entry.pw_dir)

    @classmethod
    def of_uid(cls, uid: int) -> Account:
        """The account of `uid` (KeyError when the host has none)."""
        return cls.lookup(pwd.getpwuid(uid).pw_name)


def _account_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


@dataclass(slots=True)
class _Cache:
    entries: dict[str, tuple[float, Account]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, slots=True)
class OwnerPolicy:
    """Whose jobs this daemon runs, and as whom.

    `daemon_uid`: the daemons' user (root: a shared pool, jobs run as their owners;
    anyone else: a personal pool, only that user's jobs). `allow_root`: ALLOW_ROOT_JOBS.
    """

    daemon_uid: int = field(default_factory=os.geteuid)
    allow_root: bool = False
    clock: Callable[[], float] = time.monotonic
    _cache: _Cache = field(default_factory=_Cache, compare=False, repr=False)

    @property
    def shared(self) -> bool:
        """Whether the daemons run as root, and so jobs as their owners."""
        return self.daemon_uid == 0

    def account(self, owner: object) -> Account:
        """The account a job of `owner` runs as; OwnerRefused saying why it may not."""
        if not isinstance(owner, str) or not owner:
            raise OwnerRefused("the job has no Owner: it names no account to run as")
        account = self._lookup(owner)
        if not self.shared:
            if account.uid != self.daemon_uid:
                me = _account_name(self.daemon_uid)
                raise OwnerRefused(
                    f"this pool's daemons run as {me}, not as root: they run {me}'s jobs "
                    f"only, not {owner}'s"
                )
            return account
        if account.uid == 0 and not self.allow_root:
            raise OwnerRefused(
                f"the job's owner {owner} is root (uid 0): jobs do not run as root unless "
                f"{ALLOW_ROOT_JOBS} = true"
            )
        return account

    def _lookup(self, owner: str) -> Account:
        now = self.clock()
        with self._cache.lock:
            hit = self._cache.entries.get(owner)
        if hit is not None and now - hit[0] < ACCOUNT_TTL:
            return hit[1]
        try:
            account = Account.lookup(owner)
        except KeyError:
            raise OwnerRefused(f"the job's owner {owner} is not an account on this host") from None
        with self._cache.lock:
            if len(self._cache.entries) > 10_000:
                self._cache.entries.clear()
            self._cache.entries[owner] = (now, account)
        return account


def switching() -> bool:
    """Whether this process changes identity for its jobs (it runs as root)."""
    return os.geteuid() == 0


def _needs_switch(account: Account | None) -> bool:
    return account is not None and account.uid != 0 and switching()


def spawn_identity(account: Account | None) -> dict[str, Any]:
    """Popen's keyword arguments that start a process as `account` (none when the
    process is not root, or the account is root's)."""
    if not _needs_switch(account):
        return {}
    assert account is not None
    return {"user": account.uid, "group": account.gid, "extra_groups": list(account.groups)}


class _Libc:
    """The C library calls that change one thread's identity (loaded on first use)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.setfsuid = libc.setfsuid
        self.setfsgid = libc.setfsgid
        for fn in (self.setfsuid, self.setfsgid):
            fn.argtypes = [ctypes.c_uint]
            fn.restype = ctypes.c_int
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long
        machine = platform.machine()
        self.sys_setgroups = _SYS_SETGROUPS.get(machine)

    def setgroups(self, groups: tuple[int, ...]) -> None:
        """The calling thread's supplementary groups (the raw call: this thread only)."""
        if self.sys_setgroups is None:
            raise PrivilegeError(
                f"cannot change a thread's groups on {platform.machine()}: htgrid knows "
                f"the setgroups system call of {', '.join(sorted(_SYS_SETGROUPS))} only"
            )
        array = (ctypes.c_uint * max(1, len(groups)))(*groups)
        if self.syscall(ctypes.c_long(self.sys_setgroups), ctypes.c_size_t(len(groups)), array):
            err = ctypes.get_errno()
            raise PrivilegeError(f"setgroups({list(groups)}): {os.strerror(err)}")

    def fsids(self) -> tuple[int, int]:
        """The calling thread's (fsuid, fsgid)."""
        return self.setfsuid(_NO_CHANGE) & _NO_CHANGE, self.setfsgid(_NO_CHANGE) & _NO_CHANGE


_libc: _Libc | None = None
_libc_lock = threading.Lock()


def _calls() -> _Libc:
    global _libc
    if _libc is None:
        with _libc_lock:
            if _libc is None:
                _libc = _Libc()
    return _libc


def _become(libc: _Libc, uid: int, gid: int, groups: tuple[int, ...]) -> bool:
    """Set the thread's groups, fsgid and fsuid; whether it now has exactly them."""
    libc.setgroups(groups)
    libc.setfsgid(gid)
    libc.setfsuid(uid)
    return libc.fsids() == (uid, gid) and set(os.getgroups()) == set(groups)


def _fatal(message: str) -> None:
    """The thread's identity is not what it must be: the process ends now, as a thread
    with a job owner's rights must never do the daemon's work or another owner's."""
    _log.critical("%s: exiting", message)
    with contextlib.suppress(Exception):
        sys.stderr.write(f"htgrid: {message}: exiting\n")
        sys.stderr.flush()
    os._exit(EXIT_IDENTITY_LOST)


@contextlib.contextmanager
def as_owner(account: Account | None) -> Iterator[None]:
    """Run the block with `account`'s file-system identity in this thread only (nothing
    changes for None, a root account, or a process not run by root).

    PrivilegeError when the switch does not take (nothing was done as anyone). The
    thread's own identity comes back after the block, error or not, and is checked: a
    thread that cannot get it back ends the process (`_fatal`).
    """
    if not _needs_switch(account):
        yield
        return
    assert account is not None
    libc = _calls()
    uid, gid = libc.fsids()
    groups = tuple(os.getgroups())
    try:
        switched = _become(libc, account.uid, account.gid, account.groups)
    except PrivilegeError:
        switched = False
    try:
        if not switched:
            raise PrivilegeError(
                f"cannot take the identity of {account.name} (uid {account.uid}) in this thread"
            )
        yield
    finally:
        try:
            restored = _become(libc, uid, gid, groups)
        except PrivilegeError:
            restored = False
        if not restored:
            _fatal(
                f"a thread that acted as {account.name} could not get its identity back "
                f"(uid {uid}, gid {gid})"
            )


def daemon_umask() -> None:
    """Set the daemon process's umask: what it makes is its own unless it says otherwise
    (the files it makes for a job's owner are given their modes explicitly)."""
    os.umask(DAEMON_UMASK)


def owned_dir(path: Path, account: Account | None, mode: int = 0o700) -> None:
    """The directory `path` (its parent must exist) made by the daemon if missing, with
    `mode`, and given to `account` (a directory its owner's jobs work in, which the
    owner could not make in the daemon's own); OSError when something else (a link, a
    file) is there."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory (nor made one)", str(path))
    if _needs_switch(account):
        assert account is not None
        if (st.st_uid, st.st_gid) != (account.uid, account.gid):
            os.chown(path, account.uid, account.gid, follow_symlinks=False)
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode, follow_symlinks=False)


def new_owned_dir(path: Path, account: Account | None) -> None:
    """The directory `path` made anew, mode 0700 (which no umask of a daemon's takes
    from), and given to `account` as `owned_dir` gives it; FileExistsError when anything
    is there (a link is not followed). Two calls, not `owned_dir`'s four: a job's
    sandbox is made for every job."""
    os.mkdir(path, 0o700)
    if _needs_switch(account):
        assert account is not None
        os.chown(path, account.uid, account.gid, follow_symlinks=False)


def closed_to_others(path: Path) -> Path | None:
    """The first directory from / down to `path` that other users cannot pass (no x for
    others), if any: jobs of the host's users cannot reach what is below it."""
    here = Path("/")
    for part in path.absolute().parts[1:]:
        here = here / part
        try:
            st = os.stat(here)
        except OSError:
            return None  # not there yet: made by the daemon with its own mode
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return here
    return None
