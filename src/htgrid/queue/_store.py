"""The SQLite layer: connection, transactions, job rows, the change feed and the history.

One `Store` owns one connection. `JobQueue` serialises all use with a lock; every write
runs inside `BEGIN IMMEDIATE ... COMMIT`, so a crash at any moment leaves either all of a
transaction or none of it (SQLite's WAL guarantees that; `fsync` makes commits survive a
power cut too, not only a killed process).
"""

from __future__ import annotations

import copy
import gc
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from htgrid.classad import ClassAd
from htgrid.queue._errors import JobNotFound, StoreError
from htgrid.queue._factory import close, top_up
from htgrid.queue._ids import JobId
from htgrid.queue._query import Filter
from htgrid.queue._serial import (
    decode,
    decode_shared,
    encode,
    encode_names,
    forget,
    overlay,
    remember,
    with_proc_id,
)
from htgrid.queue._status import JobStatus

__all__ = ["EMPTY", "JobEdit", "Store", "Txn", "gc_paused", "sql_errors"]

EMPTY = "{}"
SCHEMA_VERSION = 1
_DB_NAME = "queue.db"
_HISTORY_CACHE_MAX = 10_000  # history clusters are read rarely; bound what they pin


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for one queue operation.

    Reading or writing 100,000 jobs allocates millions of objects, which triggers full
    collections that re-scan every live object (ours and the caller's); measured, that
    cost more than the work itself. Nothing here makes reference cycles.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def sql_errors(path: Path) -> Iterator[None]:
    """Translate sqlite3's errors into StoreError at the one boundary where they occur."""
    try:
        yield
    except sqlite3.Error as e:
        raise StoreError(f"job queue database {path}: {e}") from e


class Store:
    """The database of one state directory, and the parsed cluster ads (never changed)."""

    def __init__(self, state_dir: Path, *, fsync: bool) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / _DB_NAME
        with sql_errors(self.path):
            self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            with sql_errors(self.path):
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
                self.conn.execute("PRAGMA busy_timeout=30000")
                schema = resources.files("htgrid.queue").joinpath("_schema.sql").read_text()
                self.conn.executescript(schema)
                _add_columns(self.conn)
                version = self.meta("schema_version")
            if version != SCHEMA_VERSION:
                raise StoreError(
                    f"job queue database {self.path} has schema version {version}; "
                    f"this htgrid reads version {SCHEMA_VERSION}"
                )
        except BaseException:
            self.conn.close()
            raise
        self.in_txn = False
        self._clusters: dict[int, ClassAd] = {}
        self._history_clusters: dict[int, ClassAd] = {}

    def close(self) -> None:
        with sql_errors(self.path):
            self.conn.close()

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several SELECTs (or the write transaction in progress)."""
        if self.in_txn:
            yield self.conn
            return
        with sql_errors(self.path):
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                self.conn.execute("COMMIT")

    @contextmanager
    def writing(self, now: int) -> Iterator[Txn]:
        """One write transaction: committed when the block ends, rolled back if it raises."""
        with sql_errors(self.path):
            self.conn.execute("BEGIN IMMEDIATE")
            self.in_txn = True
            try:
                txn = Txn(self, now)
                yield txn
                txn.finish()
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            finally:
                self.in_txn = False

    def meta(self, key: str) -> int:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0])

    def cluster_ad(self, cluster: int, *, history: bool = False) -> ClassAd:
        """The parsed ad of a cluster (cached: cluster ads never change once committed)."""
        cache = self._history_clusters if history else self._clusters
        ad = cache.get(cluster)
        if ad is None:
            table = "history_clusters" if history else "clusters"
            row = self.conn.execute(f"SELECT ad FROM {table} WHERE cluster = ?", (cluster,))
            found = row.fetchone()
            if found is None:
                raise JobNotFound(f"cluster {cluster} is not in the queue")
            ad = decode(found[0])
            if history and len(cache) >= _HISTORY_CACHE_MAX:
                cache.clear()
            cache[cluster] = ad
        return ad

    def remember_cluster(self, cluster: int, ad: ClassAd) -> None:
        """Cache the ad of a cluster just committed."""
        self._clusters[cluster] = ad

    def forget_cluster(self, cluster: int) -> None:
        self._clusters.pop(cluster, None)

    def job_ad(self, row: tuple[Any, ...], *, history: bool = False) -> ClassAd:
        """The job ad of a row (cluster, proc, ad, masked)."""
        cluster, proc, text, masked = row
        # Overlay copies it. The history's are read rarely: not kept for the next reader.
        own = decode_shared(text, keep=not history) if text != EMPTY else ClassAd()
        ad = overlay(
            self.cluster_ad(cluster, history=history), own, masked.split() if masked else ()
        )
        with_proc_id(ad, proc)
        return ad


class JobEdit:
    """A job being changed in a transaction: its own attributes, over its cluster's ad.

    Reads see the cluster ad, minus the attributes the job deleted, overlaid by its own;
    writes go to its own attributes only, and are remembered for the change feed.
    """

    def __init__(
        self,
        job_id: JobId,
        cluster_ad: ClassAd,
        own: ClassAd,
        masked: set[str],
        stored: str = EMPTY,
    ) -> None:
        self.job_id = job_id
        self.cluster_ad = cluster_ad
        self.own = own
        self.masked = masked
        self.stored = stored  # the text of `own` in the job's row
        self.changed: dict[str, str] = {}  # lower-case name -> name as written
        self.deleted: dict[str, str] = {}
        self.old_status = self.status

    @property
    def owner(self) -> str:
        return str(self.get("Owner"))

    @property
    def status(self) -> JobStatus:
        return JobStatus(self.get("JobStatus"))

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.own:
            return self.own[name]
        if name.lower() in self.masked or name not in self.cluster_ad:
            return default
        return self.cluster_ad[name]

    def has(self, name: str) -> bool:
        return name in self.own or (name.lower() not in self.masked and name in self.cluster_ad)

    def set(self, name: str, value: Any) -> None:
        key = name.lower()
        self.own[name] = value
        self.masked.discard(key)
        self.deleted.pop(key, None)
        self.changed[key] = name

    def delete(self, name: str) -> None:
        if not self.has(name):
            return
        key = name.lower()
        if name in self.own:
            del self.own[name]
        if name in self.cluster_ad:
            self.masked.add(key)
        self.changed.pop(key, None)
        self.deleted[key] = name

    def view(self) -> ClassAd:
        """The whole job ad as it stands now."""
        ad = overlay(self.cluster_ad, self.own, self.masked)
        with_proc_id(ad, self.job_id.proc)
        return ad

    def changed_attrs(self) -> str:
        """The attributes set by this change, as stored in the change feed."""
        return encode_names(self.own, self.changed.values())


@dataclass(slots=True)
class FeedEntry:
    """A row of the change feed being written: procs `first`..`last` of `cluster`."""

    seq: int
    kind: str
    cluster: int
    first: int
    last: int
    status: JobStatus | None = None
    last_status: JobStatus | None = None
    attrs: str = EMPTY
    deleted: str = ""


class Txn:
    """One write transaction: hands out sequence numbers and writes rows."""

    def __init__(self, store: Store, now: int) -> None:
        self.store = store
        self.conn = store.conn
        self.now = now
        self.last_seq = store.meta("last_seq")
        self.next_cluster = store.meta("next_cluster")
        self._left_clusters: set[int] = set()
        self._changed_clusters: set[int] = set()  # a job's status changed: a factory's?
        # The last job change, not yet written: the same change of the next proc of its
        # cluster joins it (see `job_change`).
        self._pending: FeedEntry | None = None

    def new_seq(self) -> int:
        self.last_seq += 1
        return self.last_seq

    def job_change(
        self,
        kind: str,
        job_id: JobId,
        status: JobStatus | None,
        last_status: JobStatus | None,
        attrs: str = EMPTY,
        deleted: str = "",
    ) -> int:
        """The feed's entry for a change of one job; its sequence number.

        The same change (kind, statuses, attributes) of the next proc of the cluster the
        previous one was about, in this transaction, is the same entry: a batch of jobs
        released, edited or let go alike is one change for each follower to read, as a
        submitted cluster is, instead of one per job. Its procs share its number.
        """
        last = self._pending
        if (
            last is not None
            and last.cluster == job_id.cluster
            and last.last == job_id.proc - 1
            and (last.kind, last.status, last.last_status, last.attrs, last.deleted)
            == (kind, status, last_status, attrs, deleted)
        ):
            last.last = job_id.proc
            return last.seq
        self._write_pending()
        if kind == "status":
            self._changed_clusters.add(job_id.cluster)
        proc = job_id.proc
        entry = FeedEntry(
            self.new_seq(), kind, job_id.cluster, proc, proc, status, last_status, attrs, deleted
        )
        self._pending = entry
        return entry.seq

    def _write_pending(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self.add_change(pending)

    def changed(self, cluster: int) -> None:
        """Have `finish` top up the factory of `cluster` (a resumed one), or close it and
        drop the cluster (a removed one with no job left)."""
        self._changed_clusters.add(cluster)

    def submitted(self, seq: int, cluster: int, first: int, last: int) -> None:
        """The feed's entry for procs `first`..`last` of `cluster` queued (`seq` theirs)."""
        self.add_change(FeedEntry(seq, "submitted", cluster, first, last))

    def cluster_change(self, kind: str, cluster: int, attrs: str, seq: int = 0) -> None:
        """The feed's entry for a change of `cluster` itself, of none of its jobs (a
        factory's: its procs are empty); numbered `seq`, else the next number."""
        self.add_change(FeedEntry(seq or self.new_seq(), kind, cluster, 0, -1, attrs=attrs))

    def finish(self) -> None:
        """Top up the factories whose jobs changed, write back the counters and drop
        clusters that have no job (nor factory) left."""
        self._write_pending()
        touched = sorted(self._left_clusters | self._changed_clusters)
        for cluster in touched:
            top_up(self, cluster)
        # A cluster may go when its last job left, or its factory (removed) closed.
        emptied = self._left_clusters | {c for c in touched if close(self, c)}
        for cluster in emptied:
            cur = self.conn.execute(
                "DELETE FROM clusters WHERE cluster = ? "
                "AND NOT EXISTS (SELECT 1 FROM jobs WHERE cluster = ?) "
                "AND NOT EXISTS (SELECT 1 FROM factories WHERE cluster = ?)",
                (cluster, cluster, cluster),
            )
            if cur.rowcount:
                self.store.forget_cluster(cluster)
        self.conn.executemany(
            "UPDATE meta SET value = ? WHERE key = ?",
            [(self.last_seq, "last_seq"), (self.next_cluster, "next_cluster")],
        )

    def load(self, job_id: JobId) -> JobEdit:
        row = self.conn.execute(
            "SELECT ad, masked FROM jobs WHERE cluster = ? AND proc = ?",
            (job_id.cluster, job_id.proc),
        ).fetchone()
        if row is None:
            raise JobNotFound(f"job {job_id} is not in the queue")
        return self.edit_of(job_id, row[0], row[1])

    def select(self, filt: Filter) -> Iterator[JobEdit]:
        """The queued jobs matching `filt`, ready to change, in job-id order."""
        rows = self.conn.execute(
            f"SELECT cluster, proc, ad, masked FROM jobs WHERE {filt.sql()} ORDER BY cluster, proc",
            filt.params,
        ).fetchall()  # all read first: the loop's caller updates these rows
        for cluster, proc, text, masked in rows:
            own = _own_ad(text)
            hidden = set(masked.split()) if masked else set()
            cluster_ad = self.store.cluster_ad(cluster)
            view = overlay(cluster_ad, own, hidden)
            with_proc_id(view, proc)
            if filt.matches(view):
                yield JobEdit(JobId(cluster, proc), cluster_ad, own, hidden, text)

    def edit_of(self, job_id: JobId, text: str, masked: str | None) -> JobEdit:
        own = _own_ad(text)
        cluster_ad = self.store.cluster_ad(job_id.cluster)
        return JobEdit(job_id, cluster_ad, own, set(masked.split()) if masked else set(), text)

    def save(self, edit: JobEdit) -> int | None:
        """Write the job's row and its change-feed entry; the change's sequence number."""
        if not edit.changed and not edit.deleted:
            return None
        status = edit.status
        jid = edit.job_id
        kind = "status" if status != edit.old_status else "attributes"
        deleted = " ".join(edit.deleted.values())
        seq = self.job_change(kind, jid, status, edit.old_status, edit.changed_attrs(), deleted)
        text = encode(edit.own)
        if text != edit.stored:
            # The text replaced is no job's now (unless another's is the same: that one
            # is decoded again): its ad would only pin memory until the cache fills.
            forget(edit.stored)
            edit.stored = text
        remember(text, edit.own)
        self.conn.execute(
            "UPDATE jobs SET status = ?, seq = ?, ad = ?, masked = ? WHERE cluster = ? AND proc = ?",
            (
                int(status),
                seq,
                text,
                " ".join(sorted(edit.masked)) or None,
                jid.cluster,
                jid.proc,
            ),
        )
        edit.changed.clear()
        edit.deleted.clear()
        edit.old_status = status
        return seq

    def add_change(self, entry: FeedEntry) -> None:
        """Write a row of the change feed (the pending one first: readers order by number)."""
        if self._pending is not None and self._pending is not entry:
            self._write_pending()
        status, last_status = entry.status, entry.last_status
        self.conn.execute(
            "INSERT INTO changes (seq, time, kind, cluster, first_proc, last_proc, status,"
            " last_status, attrs, deleted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                entry.seq,
                self.now,
                entry.kind,
                entry.cluster,
                entry.first,
                entry.last,
                None if status is None else int(status),
                None if last_status is None else int(last_status),
                entry.attrs,
                entry.deleted,
            ),
        )

    def leave(self, edit: JobEdit) -> None:
        """Move a job (already saved) from the queue to the history."""
        jid = edit.job_id
        seq = self.job_change("left_queue", jid, edit.status, None)
        self.conn.execute(
            "INSERT OR IGNORE INTO history_clusters (cluster, ad) "
            "SELECT cluster, ad FROM clusters WHERE cluster = ?",
            (jid.cluster,),
        )
        self.conn.execute(
            "INSERT INTO history (cluster, proc, status, owner, seq, ad, masked) "
            "SELECT cluster, proc, status, owner, ?, ad, masked FROM jobs "
            "WHERE cluster = ? AND proc = ?",
            (seq, jid.cluster, jid.proc),
        )
        self.conn.execute(
            "DELETE FROM jobs WHERE cluster = ? AND proc = ?", (jid.cluster, jid.proc)
        )
        forget(edit.stored)  # read again only from the history, rarely
        self._left_clusters.add(jid.cluster)


def _own_ad(text: str) -> ClassAd:
    """A proc's own attributes, for a JobEdit to change."""
    return copy.copy(decode_shared(text)) if text != EMPTY else ClassAd()


def _add_columns(conn: sqlite3.Connection) -> None:
    """Columns added since a table was first made, added to a queue made before them."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(factories)")}
    if "pause_reason" not in have:
        conn.execute("ALTER TABLE factories ADD COLUMN pause_reason TEXT")
