"""Small file helpers the daemons share."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "open_beneath",
    "open_with_mode",
    "parts_beneath",
    "private_file",
    "single_instance",
    "write_all",
    "write_atomic",
]


def write_all(fd: int, data: bytes) -> None:
    """All of `data` written to the descriptor `fd` (a write may take only part)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_atomic(path: Path, data: bytes, *, sync: bool = False, mode: int = 0o666) -> None:
    """`data` written whole beside `path` (`mode`, less the umask), then renamed over it:
    a reader sees the old file or the new, never part of one, and a link at `path` is
    replaced, not followed. `sync`: on disk before the rename. The temporary file
    (`.<name>.<random>`) is removed if the write fails."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
            out.write(data)
            out.flush()
            if sync:
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_DIR_STEP = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parts_beneath(rel: str) -> list[str]:
    """The components of `rel`, a path that must stay inside its directory (ValueError
    for an absolute path, `..` or nothing at all)."""
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if rel.startswith("/") or not parts or ".." in parts or "\0" in rel:
        raise ValueError(f"{rel!r} is not a path inside the directory")
    return parts


def open_beneath(root: str | os.PathLike[str], rel: str, flags: int, mode: int = 0o600) -> int:
    """Open `root/rel` without following a link anywhere below `root` (no `..`, no
    absolute `rel`): a link inside, to a file or a directory, is ELOOP/ENOTDIR, so what
    is opened is inside `root`. Each directory on the way is its own openat()."""
    parts = parts_beneath(rel)
    fd = os.open(root, _DIR_STEP & ~os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            step = os.open(part, _DIR_STEP, dir_fd=fd)
            os.close(fd)
            fd = step
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)


def open_with_mode(path: str | os.PathLike[str], flags: int, mode: int) -> int:
    """os.open(path, flags | O_CREAT) whose new file gets `mode` whatever the process's
    umask (the daemons' keeps their own files private); a file already there keeps its
    own mode."""
    for _ in range(3):  # a file removed or made between the two opens: look again
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        except FileExistsError:
            try:
                return os.open(path, (flags & ~os.O_CREAT) | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
        try:
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd
    return os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, mode)


def private_file(path: Path) -> BinaryIO:
    """`path` made anew (what was there removed, a link not followed), this process's
    user's alone (0600), open for writing and reading (a transfer tar a daemon hands to
    a job owner's thread)."""
    path.unlink(missing_ok=True)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, 0o600), "w+b")


@contextlib.contextmanager
def single_instance(path: Path, busy: Callable[[], Exception]) -> Iterator[None]:
    """Hold an exclusive lock on `path` (its pid written in it) while the block runs;
    `busy()` is raised when another process holds it: two such daemons would act twice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy() from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)
