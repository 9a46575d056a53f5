"""Late materialization: a cluster whose procs enter the queue as earlier ones leave.

A cluster submitted with JobMaterializeLimit (`max_materialize`) or JobMaterializeMaxIdle
(`max_idle`) is a factory. Its procs are all sent and checked at submit, but only as many
as the limits allow become jobs; the rest wait in `factory_procs` (only those with
attributes or a status of their own: the others are the cluster ad alone), and the
`factories` row holds the next proc id (HTCondor's JobMaterializeNextProcId). Whenever a
transaction changes the status of a factory's job or lets one go, it tops the factory
up before it commits: the new jobs, the row deleted from `factory_procs` and the next
proc id moved on are one commit with the change that made room, so a daemon killed at
any moment never materializes a proc twice or skips one. The limits, as HTCondor's:
at most JobMaterializeLimit jobs of the cluster in the queue, and at most
JobMaterializeMaxIdle of them not running (Idle or Held).

condor_hold of the cluster pauses the factory (JobMaterializePaused), condor_release of
it resumes it, condor_rm of it removes it: no more procs are made. A factory whose last
proc is made is done; a done or removed one is kept (not listed) until its cluster's last
job leaves, and is deleted with the cluster.

The change feed says what happened to a factory, in the transaction it happened in, for
the event log writer (HTCondor's 035 to 038 events): FACTORY_SUBMITTED (before its first
procs' SUBMITTED), FACTORY_PAUSED, FACTORY_RESUMED and FACTORY_REMOVED (its cluster gone,
with JobMaterializeNextProcId and the mode it ended in). These changes are of the cluster,
no job: their `procs` are empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from htgrid.classad import ClassAd
from htgrid.queue._errors import InvalidSubmit, JobNotFound
from htgrid.queue._serial import encode
from htgrid.queue._status import JobStatus

if TYPE_CHECKING:
    import sqlite3

    from htgrid.queue._store import Store, Txn

__all__ = ["PAUSED_BY_USER", "FactoryInfo", "FactoryLimits", "factories", "limits_of"]

_EMPTY: Final = "{}"  # a proc with nothing of its own (_store.EMPTY)
#: JobMaterializePaused: HTCondor's mmRunning (0), mmHold (1, condor_hold of the cluster),
#: mmNoMoreItems (2, every proc made) and mmClusterRemoved (3, condor_rm of the cluster).
RUNNING: Final = 0
PAUSED_BY_USER: Final = 1
DONE: Final = 2
REMOVED: Final = 3
_LIVE: Final = f"paused < {DONE}"  # a factory that may make procs (now or once resumed)
_WAITING: Final = (int(JobStatus.IDLE), int(JobStatus.HELD))  # not running, for max_idle


@dataclass(frozen=True, slots=True)
class FactoryLimits:
    """JobMaterializeLimit and JobMaterializeMaxIdle (None: no such limit)."""

    limit: int | None
    max_idle: int | None

    def room(self, present: int, waiting: int, left: int) -> int:
        """How many procs may be made now."""
        room = left
        if self.limit is not None:
            room = min(room, self.limit - present)
        if self.max_idle is not None:
            room = min(room, self.max_idle - waiting)
        return max(room, 0)


@dataclass(frozen=True, slots=True)
class FactoryInfo:
    """A factory as `condor_q -factory` shows it."""

    cluster: int
    owner: str
    next_proc: int  # JobMaterializeNextProcId
    total: int  # the procs it makes in all
    limit: int | None
    max_idle: int | None
    paused: int  # JobMaterializePaused
    qdate: int | None = None  # the cluster's QDate
    pause_reason: str = ""  # JobMaterializePauseReason: why it is paused (the hold's)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "owner": self.owner,
            "next_proc": self.next_proc,
            "total": self.total,
            "limit": self.limit,
            "max_idle": self.max_idle,
            "paused": self.paused,
            "qdate": self.qdate,
            "pause_reason": self.pause_reason,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FactoryInfo:
        return cls(
            int(doc["cluster"]),
            str(doc["owner"]),
            int(doc["next_proc"]),
            int(doc["total"]),
            doc.get("limit"),
            doc.get("max_idle"),
            int(doc.get("paused", 0)),
            doc.get("qdate"),
            str(doc.get("pause_reason") or ""),
        )


def limits_of(ad: ClassAd, cluster: int) -> FactoryLimits | None:
    """The factory limits a cluster ad asks for; None when it is no factory."""
    found: dict[str, int | None] = {}
    for name in ("JobMaterializeLimit", "JobMaterializeMaxIdle"):
        value = ad.get(name)
        if value is None:
            found[name] = None
        elif type(value) is not int or value < 1:
            raise InvalidSubmit(
                f"cluster {cluster}: {name} must be a whole number of at least 1, not {value!r}"
            )
        else:
            found[name] = value
    if found["JobMaterializeLimit"] is None and found["JobMaterializeMaxIdle"] is None:
        return None
    return FactoryLimits(found["JobMaterializeLimit"], found["JobMaterializeMaxIdle"])


def create(
    txn: Txn,
    cluster: int,
    owner: str,
    status: int,
    limits: FactoryLimits,
    total: int,
    *,
    seq: int,
) -> int:
    """Make a factory of `cluster` (its ad set, none of its procs queued yet) of `total`
    procs submitted in `status`, its FACTORY_SUBMITTED change numbered `seq` (before its
    procs'); how many of them the limits let be queued now (the caller queues those and
    gives the others to `wait`)."""
    first = limits.room(0, 0, total)
    if first == 0:
        raise InvalidSubmit(f"cluster {cluster}: its limits let no proc be materialized")
    conn = txn.conn
    conn.execute(
        "INSERT INTO factories (cluster, owner, status, next_proc, total, max_materialize,"
        " max_idle, paused) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (cluster, owner, status, first, total, limits.limit, limits.max_idle, RUNNING),
    )
    _feed(txn, "factory_submitted", cluster, {}, seq)
    return first


def wait(txn: Txn, cluster: int, status: int, rows: Iterator[tuple[int, int, str]]) -> None:
    """Keep the procs of `rows` that have something of their own until they are made."""
    txn.conn.executemany(
        "INSERT INTO factory_procs (cluster, proc, status, ad) VALUES (?, ?, ?, ?)",
        (
            (cluster, proc, own_status, text)
            for proc, own_status, text in rows
            if text != _EMPTY or own_status != status
        ),
    )


def top_up(txn: Txn, cluster: int) -> None:
    """Materialize what the factory of `cluster` (if it has one) may now make."""
    conn = txn.conn
    row = conn.execute(
        "SELECT owner, status, next_proc, total, max_materialize, max_idle, paused "
        "FROM factories WHERE cluster = ?",
        (cluster,),
    ).fetchone()
    if row is None:
        return
    owner, status, next_proc, total, limit, max_idle, paused = row
    if paused != RUNNING:
        return
    present, waiting = conn.execute(
        "SELECT count(*), ifnull(sum(status IN (?, ?)), 0) FROM jobs WHERE cluster = ?",
        (*_WAITING, cluster),
    ).fetchone()
    room = FactoryLimits(limit, max_idle).room(present, waiting, total - next_proc)
    if room == 0:
        return
    last = next_proc + room - 1
    # A proc enters its status now, not when its cluster was submitted (a periodic
    # expression on `time() - EnteredCurrentStatus` must not see a late proc as old).
    entered = f'"EnteredCurrentStatus":"{txn.now}"'
    default = (status, owner, "{" + entered + "}")
    own = {
        proc: (own_status, owner, _entered(text, entered))
        for proc, own_status, text in conn.execute(
            "SELECT proc, status, ad FROM factory_procs WHERE cluster = ? AND proc BETWEEN ? AND ?",
            (cluster, next_proc, last),
        )
    }
    seq = txn.new_seq()
    conn.executemany(
        "INSERT INTO jobs (cluster, proc, status, owner, ad, seq) VALUES (?, ?, ?, ?, ?, ?)",
        ((cluster, proc, *own.get(proc, default), seq) for proc in range(next_proc, last + 1)),
    )
    conn.execute(
        "DELETE FROM factory_procs WHERE cluster = ? AND proc <= ?",
        (cluster, last),
    )
    conn.execute(
        "UPDATE factories SET next_proc = ?, paused = ? WHERE cluster = ?",
        (last + 1, DONE if last + 1 >= total else RUNNING, cluster),
    )
    txn.submitted(seq, cluster, next_proc, last)


def _entered(text: str, entered: str) -> str:
    """A proc's own stored attributes with EnteredCurrentStatus now, unless it has its
    own (the stored form: a JSON object of name -> expression text)."""
    if '"enteredcurrentstatus"' in text.lower():
        return text
    return "{" + entered + "}" if text == _EMPTY else text[:-1] + "," + entered + "}"


def set_paused(txn: Txn, cluster: int, paused: int, reason: str, code: int) -> bool:
    """Pause (with the hold's `reason` and `code`) or resume (with the release's `reason`)
    the factory of `cluster`; whether it has one that may make procs."""
    row = txn.conn.execute(
        f"SELECT paused FROM factories WHERE cluster = ? AND {_LIVE}", (cluster,)
    ).fetchone()
    if row is None:
        return False
    if row[0] != paused:  # a second hold of a held factory says nothing new
        # Kept on one line, as HTCondor keeps JobMaterializePauseReason; none once resumed.
        kept = " ".join(reason.splitlines()) if paused != RUNNING and reason else None
        txn.conn.execute(
            "UPDATE factories SET paused = ?, pause_reason = ? WHERE cluster = ?",
            (paused, kept, cluster),
        )
        if paused == RUNNING:
            _feed(txn, "factory_resumed", cluster, {"ReleaseReason": reason})
        else:
            attrs = {"JobMaterializePauseReason": reason, "HoldReasonCode": code}
            _feed(txn, "factory_paused", cluster, {"JobMaterializePaused": paused, **attrs})
    return True


def remove(txn: Txn, cluster: int) -> bool:
    """Remove the factory of `cluster`: no more of its procs are made; whether it had one
    that could. It stays, removed, until the cluster's last job leaves (`close`)."""
    cur = txn.conn.execute(
        f"UPDATE factories SET paused = ? WHERE cluster = ? AND {_LIVE}", (REMOVED, cluster)
    )
    txn.conn.execute("DELETE FROM factory_procs WHERE cluster = ?", (cluster,))
    return cur.rowcount > 0


def close(txn: Txn, cluster: int) -> bool:
    """The factory of `cluster` is deleted, and FACTORY_REMOVED said, if it is done or
    removed and no job of the cluster is left (HTCondor's ClusterCleanup); whether it was."""
    conn = txn.conn
    row = conn.execute(
        f"SELECT next_proc, total, paused, pause_reason FROM factories WHERE cluster = ? "
        f"AND NOT ({_LIVE}) AND NOT EXISTS (SELECT 1 FROM jobs WHERE cluster = ?)",
        (cluster, cluster),
    ).fetchone()
    if row is None:
        return False
    conn.execute("DELETE FROM factories WHERE cluster = ?", (cluster,))
    next_proc, total, paused, reason = row
    attrs: dict[str, Any] = {
        "JobMaterializeNextProcId": next_proc,
        "JobMaterializeNextRow": _next_row(txn.store, cluster, next_proc, total),
        "JobMaterializePaused": paused,
    }
    if reason:
        attrs["JobMaterializePauseReason"] = reason
    _feed(txn, "factory_removed", cluster, attrs)
    return True


def _next_row(store: Store, cluster: int, next_proc: int, total: int) -> int:
    """JobMaterializeNextRow as HTCondor's factory leaves it: the item row of the next
    proc to make, -1 once every row is made, 0 (never set) when the cluster has no items.
    JobMaterializeStepSize (the procs a row makes) is set by the submit of items."""
    try:
        step = store.cluster_ad(cluster).get("JobMaterializeStepSize")
    except JobNotFound:
        return 0
    if type(step) is not int or step < 1:
        return 0
    return -1 if next_proc >= total else next_proc // step


def _feed(txn: Txn, kind: str, cluster: int, attrs: dict[str, Any], seq: int = 0) -> None:
    txn.cluster_change(kind, cluster, encode(ClassAd(attrs)), seq)


def owner_of(conn: sqlite3.Connection, cluster: int) -> str | None:
    """The owner of the factory of `cluster`, if it has one that may make procs."""
    row = conn.execute(
        f"SELECT owner FROM factories WHERE cluster = ? AND {_LIVE}", (cluster,)
    ).fetchone()
    return None if row is None else str(row[0])


def factories(store: Store) -> list[FactoryInfo]:
    """Every factory that may make procs, in cluster order."""
    found = []
    for row in store.conn.execute(
        "SELECT cluster, owner, next_proc, total, max_materialize, max_idle, paused, "
        f"pause_reason FROM factories WHERE {_LIVE} ORDER BY cluster"
    ):
        cluster, owner, next_proc, total, limit, max_idle, paused, reason = row
        qdate = store.cluster_ad(cluster).get("QDate")
        found.append(
            FactoryInfo(
                cluster,
                owner,
                next_proc,
                total,
                limit,
                max_idle,
                paused,
                qdate if type(qdate) is int else None,
                reason or "",
            )
        )
    return found
