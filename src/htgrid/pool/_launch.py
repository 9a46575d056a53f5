"""Starting, signalling and reaping a local universe job's process.

A job runs as its own session and process group (so a signal reaches everything it
started), with the ad's Environment only (as HTCondor starts jobs) plus HOME (the
owner's, as HTCondor's STARTER_SETS_HOME_ENV) and one marker variable naming the pool
and the job. It runs as its owner (`LaunchSpec.account`, when the daemon runs as root):
its Iwd, executable and standard files are reached with the owner's rights, its process
has the owner's uid, gid and groups, and umask 022 (as HTCondor's daemons give theirs). After a crash of the daemon the marker is how the
next daemon finds the job's processes, even those the job forked, and kills them before
running the job again (HTCondor's procd tracks job families with such a variable too).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import resource
import signal
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from htgrid._files import open_with_mode
from htgrid._privsep import JOB_UMASK, USER_FILE_MODE, Account, as_owner, spawn_identity
from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.queue import HoldReasonCode, JobId
from htgrid.submit import split_v2_raw

__all__ = [
    "Exit",
    "LaunchError",
    "LaunchSpec",
    "family_marker",
    "job_arguments",
    "job_environment",
    "kill_group",
    "kill_leftovers",
    "signal_of",
    "spawn",
    "wait_exit",
]

MARKER: Final = "_HTGRID_JOB_FAMILY"
_WRITE: Final = os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC
_APPEND: Final = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC


class LaunchError(HTGridError):
    """The job could not be started; it is held with `code` and `subcode` (an errno)."""

    def __init__(self, reason: str, code: HoldReasonCode, subcode: int = 0) -> None:
        self.reason = reason
        self.code = code
        self.subcode = subcode
        super().__init__(reason)


def family_marker(home: Path) -> str:
    """The marker value prefix of one pool: a digest of its home directory."""
    return hashlib.sha256(str(home).encode()).hexdigest()[:16]


def signal_of(value: Any, default: signal.Signals) -> signal.Signals:
    """A KillSig value ("SIGTERM", "TERM" or 15) as a signal."""
    if isinstance(value, int) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            return signal.Signals(value)
    if isinstance(value, str):
        name = value.strip().upper()
        with contextlib.suppress(KeyError):
            return signal.Signals[name if name.startswith("SIG") else "SIG" + name]
    return default


def job_environment(ad: ClassAd) -> dict[str, str]:
    """The job's environment: Environment (V2 syntax), else the old Env."""
    env: dict[str, str] = {}
    text = ad.get("Environment")
    if isinstance(text, str):
        words = split_v2_raw(text)
    else:
        old = ad.get("Env")
        words = old.replace("\n", ";").split(";") if isinstance(old, str) else []
    for word in words:
        name, eq, value = word.partition("=")
        if eq and name:
            env[name] = value
    return env


def job_arguments(ad: ClassAd) -> list[str]:
    """The job's arguments: Arguments (V2 syntax), else the old Args."""
    text = ad.get("Arguments")
    if isinstance(text, str):
        return split_v2_raw(text)
    old = ad.get("Args")
    return old.split() if isinstance(old, str) else []


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """How to run one job: command line, environment, directory and standard files."""

    job_id: JobId
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    stdin: str
    stdout: str
    stderr: str
    kill_signal: signal.Signals = signal.SIGTERM
    hold_signal: signal.Signals = signal.SIGTERM
    remove_signal: signal.Signals = signal.SIGTERM
    vacate_time: float = 10.0
    append_output: bool = False  # stdout/stderr kept from an earlier run (a spooled sandbox)
    account: Account | None = None  # who runs it (None: the daemon's own user)

    @classmethod
    def from_ad(
        cls,
        job_id: JobId,
        ad: ClassAd,
        marker: str,
        grace: float,
        account: Account | None = None,
    ) -> LaunchSpec:
        """The spec of a job ad, run as `account` (LaunchError when the ad cannot be run)."""
        iwd = ad.get("Iwd")
        if not isinstance(iwd, str) or not iwd:
            raise LaunchError("the job has no Iwd", HoldReasonCode.IwdError)
        cmd = ad.get("Cmd")
        if not isinstance(cmd, str) or not cmd:
            raise LaunchError("the job has no Cmd", HoldReasonCode.FailedToCreateProcess)

        def path(name: str) -> str:
            value = ad.get(name)
            text = value if isinstance(value, str) and value else os.devnull
            return os.path.join(iwd, text)

        env = job_environment(ad)
        if account is not None:
            env.setdefault("HOME", account.home)
        env[MARKER] = f"{marker}:{job_id}"
        proxy = ad.get("x509userproxy")
        if isinstance(proxy, str) and proxy:  # as HTCondor's starter tells the job
            env["X509_USER_PROXY"] = os.path.join(iwd, proxy)
        kill = signal_of(ad.get("KillSig"), signal.SIGTERM)
        vacate = ad.get("JobMaxVacateTime")
        if not isinstance(vacate, (int, float)) or isinstance(vacate, bool) or vacate < 0:
            vacate = grace
        return cls(
            job_id=job_id,
            argv=(os.path.join(iwd, cmd), *job_arguments(ad)),
            env=env,
            cwd=iwd,
            stdin=path("In"),
            stdout=path("Out"),
            stderr=path("Err"),
            kill_signal=kill,
            hold_signal=signal_of(ad.get("HoldKillSig"), kill),
            remove_signal=signal_of(ad.get("RemoveKillSig"), kill),
            vacate_time=float(vacate),
            account=account,
        )


def _open(path: str, flags: int, what: str, code: HoldReasonCode) -> int:
    try:
        if flags & (os.O_WRONLY | os.O_RDWR) and path != os.devnull:
            return open_with_mode(path, flags, USER_FILE_MODE)  # made, if missing: 0644
        return os.open(path, flags)
    except OSError as exc:
        raise LaunchError(
            f"Failed to open '{path}' as standard {what}: {exc.strerror} (errno {exc.errno})",
            code,
            exc.errno or 0,
        ) from exc


def _refuse_nul(spec: LaunchSpec) -> None:
    """LaunchError when a name, an argument or the environment holds a NUL, which no
    file name or argument can carry (a value that came to one at run time)."""
    fields = (
        ("Iwd", (spec.cwd,), HoldReasonCode.IwdError),
        ("Cmd", spec.argv[:1], HoldReasonCode.FailedToCreateProcess),
        ("Arguments", spec.argv[1:], HoldReasonCode.FailedToCreateProcess),
        ("Environment", [*spec.env, *spec.env.values()], HoldReasonCode.FailedToCreateProcess),
        ("In", (spec.stdin,), HoldReasonCode.UnableToOpenInput),
        ("Out", (spec.stdout,), HoldReasonCode.UnableToOpenOutput),
        ("Err", (spec.stderr,), HoldReasonCode.UnableToOpenOutput),
    )
    for name, values, code in fields:
        if any("\0" in value for value in values):
            raise LaunchError(
                f"the job's {name} holds a NUL character, which no file name or argument can carry",
                code,
            )


def spawn(spec: LaunchSpec) -> subprocess.Popen[bytes]:
    """Start the job's process as its owner (blocking: call off the event loop, in a
    worker thread); LaunchError if it cannot.

    This thread takes the owner's file-system identity while it opens the standard files
    and forks: the child starts with it, so the Iwd is entered with the owner's rights
    too (Popen changes directory before it drops to the owner's uid)."""
    _refuse_nul(spec)
    with as_owner(spec.account):
        return _spawn(spec)


def _spawn(spec: LaunchSpec) -> subprocess.Popen[bytes]:
    try:
        if not stat.S_ISDIR(os.stat(spec.cwd).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
    except OSError as exc:
        why = "No such directory" if exc.errno == errno.ENOENT else exc.strerror
        raise LaunchError(
            f"Failed to change to the job's Iwd '{spec.cwd}': {why}",
            HoldReasonCode.IwdError,
            exc.errno or 0,
        ) from None
    fds: list[int] = []
    try:
        fds.append(
            _open(spec.stdin, os.O_RDONLY | os.O_CLOEXEC, "input", HoldReasonCode.UnableToOpenInput)
        )
        write = _APPEND if spec.append_output else _WRITE
        fds.append(_open(spec.stdout, write, "output", HoldReasonCode.UnableToOpenOutput))
        if spec.stderr == spec.stdout:
            fds.append(fds[1])
        else:
            fds.append(_open(spec.stderr, write, "error", HoldReasonCode.UnableToOpenOutput))
        return _popen(spec, fds)
    finally:
        for fd in set(fds):
            os.close(fd)


# A file just written (a transferred executable) may still be open for writing in a
# child that another thread forked meanwhile and that has not reached its own exec yet:
# exec then fails with ETXTBSY until that child execs. The window is short, so retry
# (as Go's os/exec does) before holding the job.
_TEXT_BUSY_RETRIES: Final = 20
_TEXT_BUSY_PAUSE: Final = 0.05


def _popen(spec: LaunchSpec, fds: list[int]) -> subprocess.Popen[bytes]:
    attempt = 0
    while True:
        try:
            return subprocess.Popen(
                spec.argv,
                cwd=spec.cwd,
                env=dict(spec.env),
                stdin=fds[0],
                stdout=fds[1],
                stderr=fds[2],
                start_new_session=True,
                close_fds=True,
                umask=JOB_UMASK,
                **spawn_identity(spec.account),
            )
        except OSError as exc:
            if exc.errno == errno.ETXTBSY and attempt < _TEXT_BUSY_RETRIES:
                attempt += 1
                time.sleep(_TEXT_BUSY_PAUSE)
                continue
            raise LaunchError(
                f"Failed to execute '{spec.argv[0]}': {exc.strerror} (errno {exc.errno})",
                HoldReasonCode.FailedToCreateProcess,
                exc.errno or 0,
            ) from exc


@dataclass(frozen=True, slots=True)
class Exit:
    """How a process ended: its exit code or the signal that killed it, and its CPU time."""

    code: int | None
    signal: int | None
    user_cpu: float = 0.0
    sys_cpu: float = 0.0
    core_dumped: bool = field(default=False)
    max_rss_kb: int = 0  # the largest resident set of the process and its reaped children


async def wait_exit(proc: subprocess.Popen[bytes]) -> Exit:
    """Wait (without blocking the loop) for the process to end, and reap it with wait4."""
    loop = asyncio.get_running_loop()
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:
        pidfd = -1  # an old kernel: poll instead
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if pidfd < 0:
                await asyncio.sleep(0.05)
                continue
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(pidfd, _resolve, readable)
            try:
                await readable
            finally:
                loop.remove_reader(pidfd)
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    return _reaped(proc, status, usage)


def reap(proc: subprocess.Popen[bytes]) -> Exit:
    """Wait for the process to end and reap it with wait4 (blocking: in a thread of the
    job's own, which has nothing else to do meanwhile)."""
    _, status, usage = os.wait4(proc.pid, 0)
    return _reaped(proc, status, usage)


def _reaped(proc: subprocess.Popen[bytes], status: int, usage: resource.struct_rusage) -> Exit:
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait
    rss = usage.ru_maxrss
    if os.WIFSIGNALED(status):
        return Exit(
            None, os.WTERMSIG(status), usage.ru_utime, usage.ru_stime, os.WCOREDUMP(status), rss
        )
    return Exit(os.WEXITSTATUS(status), None, usage.ru_utime, usage.ru_stime, max_rss_kb=rss)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def kill_group(pgid: int, sig: int) -> None:
    """Signal a job's process group; nothing if it is gone already."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _marked(marker: str) -> Iterator[int]:
    """The processes whose environment carries this pool's job marker."""
    needle = f"{MARKER}={marker}:".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue  # gone, or not ours to read
        for item in environ.split(b"\0"):
            if item.startswith(needle):
                yield int(entry.name)
                break


def kill_leftovers(marker: str, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process left by jobs of a daemon that died; wait until they are gone.

    Blocking: call off the event loop. Returns the pids found. (A zombie's environment
    reads as empty, so a killed process no longer counts once it is dead.)
    """
    found: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        pids = [pid for pid in _marked(marker) if pid != os.getpid()]
        if not pids:
            return found
        for pid in pids:
            if pid not in found:
                found.append(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise HTGridError(f"processes of earlier jobs would not die: {pids}")
        time.sleep(0.02)
