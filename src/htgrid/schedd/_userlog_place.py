"""Where the user-log writer is in the change feed, kept so that a kill -9 at any moment
neither loses an event nor writes one twice.

Two files in the spool: `userlog.seq`, the last change whose events are all written, and,
while a batch of events is being appended, `userlog.pending`: the batch's last change and
the size of each log it writes to, saved before the first append. A restart that finds
a pending batch makes its events again and appends only those that are not in the log
past its recorded size. Nothing is cut from a log: the grid manager appends its own
events to the same files, and those stay.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from htgrid._files import write_atomic
from htgrid._privsep import Account, as_owner
from htgrid.eventlog import UserLogEvent, format_event

__all__ = ["Batch", "Place", "event_key", "keys_after", "size_of"]

_log = logging.getLogger("htgrid.schedd.userlog")

Log = tuple[str, str]  # the log's path, the job's owner
_TERMINATOR = "..."


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch of events being appended: the changes after `after` up to `last`, and
    each log's size before its first event (`sizes`)."""

    after: int
    last: int
    sizes: dict[Log, int]

    def to_json(self) -> bytes:
        logs = [[path, owner, size] for (path, owner), size in self.sizes.items()]
        return json.dumps({"after": self.after, "last": self.last, "logs": logs}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Batch:
        raw = json.loads(data)
        sizes = {(str(p), str(o)): int(s) for p, o, s in raw["logs"]}
        return cls(int(raw["after"]), int(raw["last"]), sizes)


class Place:
    """The writer's saved place: the last change written, and the batch under way."""

    def __init__(self, seq_file: Path) -> None:
        self.seq_file = seq_file
        self.pending_file = seq_file.with_suffix(".pending")

    def load(self) -> tuple[int, Batch | None]:
        """The last change written (0: from the start) and the batch that may be half
        written (None when there is none)."""
        try:
            seq = int(self.seq_file.read_text().strip() or 0)
        except FileNotFoundError:
            seq = 0
        except (OSError, ValueError) as exc:
            _log.error(
                "%s unreadable (%s): writing events from the start again", self.seq_file, exc
            )
            seq = 0
        try:
            batch: Batch | None = Batch.from_json(self.pending_file.read_bytes())
        except FileNotFoundError:
            batch = None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            # Written whole or not at all (renamed into place): not expected, but then
            # the batch is written again as it would have been before this file existed.
            _log.error(
                "%s unreadable (%s): its events may be written twice", self.pending_file, exc
            )
            batch = None
        if batch is not None and batch.last <= seq:
            batch = None  # the batch was finished; only its file was left
        if batch is not None:
            seq = batch.after  # the changes between made no events
        return seq, batch

    def begin(self, batch: Batch) -> None:
        """Record `batch` before its first event is appended."""
        try:
            write_atomic(self.pending_file, batch.to_json(), mode=0o600)
        except OSError as exc:  # the events still go out; only a kill now repeats them
            _log.error("cannot record the batch of events in %s: %s", self.pending_file, exc)

    def done(self, last: int, *, finished: bool = True) -> None:
        """Record that the events of every change up to `last` are written, and, if
        `finished`, that the batch begun last is."""
        try:
            write_atomic(self.seq_file, f"{last}\n".encode(), mode=0o600)
        except OSError as exc:
            # The events are written; the pending batch (if any) keeps them from being
            # written twice, but without it, after a restart they would be.
            _log.error("cannot record the event log position in %s: %s", self.seq_file, exc)
            return
        if not finished:
            return
        try:
            self.pending_file.unlink(missing_ok=True)
        except OSError as exc:  # harmless: a batch at or before the saved place is ignored
            _log.warning("cannot remove %s: %s", self.pending_file, exc)


def size_of(path: str, account: Account | None) -> int:
    """The log's size now (0 when it is missing or cannot be looked at)."""
    try:
        with as_owner(account):
            return os.stat(path).st_size
    except OSError:
        return 0


def event_key(event: UserLogEvent) -> str:
    """What tells one written event from another: its number, job and time."""
    return _key(format_event(event).partition("\n")[0])


def keys_after(path: str, offset: int, account: Account | None) -> Counter[str]:
    """The keys of the events in the log past `offset` (the whole log if it is now
    shorter: a new file in its place), whoever wrote them."""
    try:
        with as_owner(account), open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size >= offset:
                f.seek(offset)
            text = f.read().decode("utf-8", "surrogateescape")
    except OSError:
        return Counter()
    keys: Counter[str] = Counter()
    starts = True  # the offset is where an event starts: each is written whole
    for line in text.split("\n"):
        if starts and line:
            keys[_key(line)] += 1
        starts = line.rstrip() == _TERMINATOR
    return keys


def _key(header: str) -> str:
    # `005 (012.003.000) 2026-11-28 12:00:00 Job terminated.`: the first four words.
    return " ".join(header.split(" ", 4)[:4])
