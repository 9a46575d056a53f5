"""A reader for the user job event logs htgrid writes (HTCondor's text format).

`htgrid wait` follows a log with it: `EventLogReader(path).read()` returns the events
completed since the last call. An event is complete once its `...` line is there; a
half-written last event (a writer in the middle of its write, or a crash) is left for
the next call, never returned cut off.

    000 (012.000.000) 2026-11-21 17:01:02 Job submitted from host: <host?sock=schedd>
    ...
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Final

from htgrid.queue import JobId

__all__ = ["EventLogReader", "LoggedEvent"]

# A whole cluster's event (a factory's) has proc -1, printed "-01".
_HEADER: Final = re.compile(r"(\d{3}) \((\d+)\.(-?\d+)\.(\d+)\) (\S+ \S+) ?(.*)")
_RETURN: Final = re.compile(r"\(1\) Normal termination \(return value (-?\d+)\)")
_SIGNAL: Final = re.compile(r"\(0\) Abnormal termination \(signal (\d+)\)")
_END: Final = b"...\n"


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One event as read back: its number, job, time text, and its lines."""

    number: int
    job_id: JobId
    when: str
    title: str  # the rest of the header line: "Job terminated.", "Job was held."...
    body: tuple[str, ...]

    @property
    def return_value(self) -> int | None:
        """A 005 event's exit code (None for a signal, or another event)."""
        for line in self.body:
            if m := _RETURN.search(line):
                return int(m.group(1))
        return None

    @property
    def signal(self) -> int | None:
        """The signal that ended the job, for a 005 event ended by one."""
        for line in self.body:
            if m := _SIGNAL.search(line):
                return int(m.group(1))
        return None

    @property
    def reason(self) -> str:
        """The first body line of a 009, 012 or 013 event: the reason given."""
        return self.body[0].strip() if self.body else ""


class EventLogReader:
    """Reads one event log incrementally."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._offset = 0
        self._partial = b""

    def read(self) -> list[LoggedEvent]:
        """The events completed since the last call (FileNotFoundError if there is no log).

        A log that shrank (truncated or replaced) is read again from its start.
        """
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < self._offset:
                self._offset, self._partial = 0, b""
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        data = self._partial + data
        end = data.rfind(b"\n" + _END)  # the last complete event ends there
        if end < 0:
            self._partial = data
            return []
        end += 1 + len(_END)
        complete, self._partial = data[:end], data[end:]
        return _parse(complete.decode("utf-8", "replace"))


def _parse(text: str) -> list[LoggedEvent]:
    events: list[LoggedEvent] = []
    lines: list[str] = []
    for line in text.splitlines():
        if line != "...":
            lines.append(line)
            continue
        if lines and (m := _HEADER.fullmatch(lines[0])):
            number, cluster, proc, _sub, when, title = m.groups()
            events.append(
                LoggedEvent(
                    int(number),
                    JobId(int(cluster), int(proc)),
                    when,
                    title.strip(),
                    tuple(lines[1:]),
                )
            )
        lines = []  # an event that does not parse is skipped, as HTCondor's reader does
    return events
