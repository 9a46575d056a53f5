"""Appending events to a user log file."""

from __future__ import annotations

import os

from htgrid.eventlog._events import EventLogError, UserLogEvent
from htgrid.eventlog._format import LogFormat, format_event

__all__ = ["UserLog"]

_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class UserLog:
    """Appends events to one user log file.

    Each event goes out in a single `write()` on a descriptor opened with O_APPEND,
    so writers sharing the file (two schedds, a schedd and a shadow) never interleave
    their events, and a crash leaves at worst a cut-off last event, which readers
    skip. The file is created (mode 0664 less the umask) if missing; its directory
    must exist. The file is opened per event, as HTCondor does, so a log that is
    moved or deleted between events is simply started anew.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fmt: LogFormat | None = None,
        fsync: bool = False,
    ) -> None:
        """`fmt` sets the header time format; `fsync` syncs each event to disk.

        fsync is off by default, as in HTCondor since 10.x (ENABLE_USERLOG_FSYNC).
        """
        self.path = os.fspath(path)
        self.fmt = fmt if fmt is not None else LogFormat()
        self.fsync = fsync

    def __repr__(self) -> str:
        return f"UserLog({self.path!r}, fmt={self.fmt!r}, fsync={self.fsync!r})"

    def append(self, event: UserLogEvent) -> None:
        """Write `event` at the end of the log; EventLogError if it cannot."""
        data = format_event(event, self.fmt).encode("utf-8", "surrogateescape")
        try:
            fd = os.open(self.path, _OPEN_FLAGS, 0o664)
        except OSError as exc:
            raise EventLogError(f"cannot open user log {self.path}: {exc.strerror}") from exc
        except ValueError as exc:  # a NUL in the name: no file has one
            raise EventLogError(f"cannot open user log {self.path!r}: {exc}") from exc
        try:
            written = os.write(fd, data)
            # A regular file takes the whole buffer unless the disk fills up or a
            # signal lands mid-write; finish the event rather than leave it cut off.
            while written < len(data):
                written += os.write(fd, data[written:])
            if self.fsync:
                os.fsync(fd)
        except OSError as exc:
            raise EventLogError(f"cannot write user log {self.path}: {exc.strerror}") from exc
        finally:
            os.close(fd)
