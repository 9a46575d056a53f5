"""The change feed: every committed change of a job, in commit order.

The grid manager and the event-log writer follow it: remember the last `seq` handled,
ask for what came after. A change carries the attributes it set (a hold's HoldReason,
HoldReasonCode...), so a follower that reads it later still sees what happened then.
"""

from __future__ import annotations

import enum
import sqlite3
from dataclasses import dataclass, field

from htgrid.classad import ClassAd
from htgrid.queue._ids import JobId
from htgrid.queue._serial import decode
from htgrid.queue._status import JobStatus

__all__ = ["Change", "ChangeKind", "feed_gap", "read_changes"]


class ChangeKind(enum.Enum):
    """What a change did."""

    SUBMITTED = "submitted"  # a whole cluster was queued (procs first..last)
    STATUS = "status"  # the job's status changed (attrs has what came with it)
    ATTRIBUTES = "attributes"  # attributes changed, the status did not
    LEFT_QUEUE = "left_queue"  # the job moved to the history
    # A late materialization factory's (no job's: `procs` is empty; see queue/_factory).
    FACTORY_SUBMITTED = "factory_submitted"  # before its first procs' SUBMITTED
    FACTORY_PAUSED = "factory_paused"  # its cluster held
    FACTORY_RESUMED = "factory_resumed"  # its cluster released
    FACTORY_REMOVED = "factory_removed"  # its cluster left the queue with its last job


@dataclass(frozen=True, slots=True)
class Change:
    """One committed change of a run of procs of one cluster: a submitted cluster, or
    jobs changed alike in one transaction (a batch released, edited, let go), or one job;
    or of a cluster's factory (no procs)."""

    seq: int
    time: int
    kind: ChangeKind
    cluster: int
    procs: range
    status: JobStatus | None
    last_status: JobStatus | None
    #: The attributes as stored (`attrs` decodes them).
    stored: str = field(default="{}", compare=False, hash=False, repr=False)
    deleted: tuple[str, ...] = ()
    _attrs: ClassAd | None = field(default=None, init=False, compare=False, hash=False, repr=False)

    @property
    def attrs(self) -> ClassAd:
        """The attributes the change set, decoded when first asked for: most followers
        (the local-universe runner, the shadows) only look at the kind and the status."""
        ad = self._attrs
        if ad is None:
            ad = decode(self.stored)
            object.__setattr__(self, "_attrs", ad)  # a cache: the change itself is frozen
        return ad

    @property
    def job_ids(self) -> list[JobId]:
        """The jobs this change touched."""
        return [JobId(self.cluster, p) for p in self.procs]


def read_changes(conn: sqlite3.Connection, after: int, limit: int | None) -> list[Change]:
    """The changes with a sequence number greater than `after`, oldest first."""
    rows = conn.execute(
        "SELECT seq, time, kind, cluster, first_proc, last_proc, status, last_status, attrs,"
        " deleted FROM changes WHERE seq > ? ORDER BY seq LIMIT ?",
        (after, -1 if limit is None else limit),
    )
    return [
        Change(
            seq=seq,
            time=time,
            kind=ChangeKind(kind),
            cluster=cluster,
            procs=range(first, last + 1),
            status=None if status is None else JobStatus(status),
            last_status=None if last_status is None else JobStatus(last_status),
            stored=attrs,
            deleted=tuple(deleted.split()),
        )
        for seq, time, kind, cluster, first, last, status, last_status, attrs, deleted in rows
    ]


def feed_gap(changes: list[Change], after: int, top: int) -> bool:
    """Whether changes after `after` were trimmed before a follower read them (`changes`:
    those it read after `after`; `top`: the feed's last change, read before them). Only
    a full scan of the queue is then safe."""
    if changes:
        return changes[0].seq > after + 1
    return top > after
