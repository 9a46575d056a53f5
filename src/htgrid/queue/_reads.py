"""The read side of `JobQueue`: job and cluster ads, queries, counts, the history and
the change feed, each a consistent read under the queue's lock (store.py has the writes).
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from htgrid.classad import ClassAd, ExprTree
from htgrid.queue._errors import JobNotFound, StoreError
from htgrid.queue._factory import FactoryInfo, factories
from htgrid.queue._feed import Change, read_changes
from htgrid.queue._ids import JobId
from htgrid.queue._quarantine import Quarantined, history_ad, quarantined
from htgrid.queue._query import Filter, compile_constraint
from htgrid.queue._serial import project
from htgrid.queue._store import Store, gc_paused
from htgrid.queue._summary import BatchCounts, count_owners, summarize
from htgrid.queue._targets import job_id_of

__all__ = ["QueueReads"]


class QueueReads:
    """What `JobQueue` reads; it sets the store, the lock and whether it is closed."""

    _store: Store
    _lock: threading.RLock
    _closed: bool

    def get(self, job_id: JobId | str) -> ClassAd:
        """The whole ad of a job in the queue (JobNotFound otherwise)."""
        jid = job_id_of(job_id)
        found = self.get_many([jid])
        if jid not in found:
            raise JobNotFound(f"job {jid} is not in the queue")
        return found[jid]

    def get_many(
        self, job_ids: Iterable[JobId], constraint: str | ExprTree | None = None
    ) -> dict[JobId, ClassAd]:
        """The whole ads of those of `job_ids` in the queue (that match `constraint`),
        read together."""
        filt = compile_constraint(constraint)
        found: dict[JobId, ClassAd] = {}
        with self._reading() as store:
            for jid in job_ids:
                row = store.conn.execute(
                    "SELECT cluster, proc, ad, masked FROM jobs WHERE cluster = ? AND proc = ?",
                    (jid.cluster, jid.proc),
                ).fetchone()
                if row is not None:
                    ad = store.job_ad(row)
                    if filt.matches(ad):
                        found[jid] = ad
        return found

    def cluster_ad(self, cluster: int) -> ClassAd:
        """The ad a cluster's procs share (HTCondor's cluster ad), of a cluster in the
        queue or, once it is gone, in the history; JobNotFound when neither has it."""
        with self._reading() as store:
            try:
                ad = store.cluster_ad(cluster)
            except JobNotFound:
                try:
                    ad = store.cluster_ad(cluster, history=True)
                except JobNotFound:
                    raise JobNotFound(
                        f"cluster {cluster} is not in the queue nor its history"
                    ) from None
            return copy.copy(ad)  # the cached ad stays as committed

    def present(self, job_ids: Iterable[JobId]) -> set[JobId]:
        """Those of `job_ids` in the queue (no ads read)."""
        with self._reading() as store:
            return {
                jid
                for jid in job_ids
                if store.conn.execute(
                    "SELECT 1 FROM jobs WHERE cluster = ? AND proc = ?", (jid.cluster, jid.proc)
                ).fetchone()
            }

    def count_jobs(self, by: str) -> Counter[tuple[int, Any]]:
        """How many jobs there are of each (JobStatus, value of attribute `by`).

        Counted from the cluster ads: a job's own attributes are read only when they set
        `by` or hide it (a scan of 100,000 ads took seconds of the queue's one thread, and
        the schedd counts for its ad every SCHEDD_INTERVAL).
        """
        counts: Counter[tuple[int, Any]] = Counter()
        # The name as a key of a stored ad, and as a word of the names hidden, lowered.
        own = "instr(lower(ad), ?) > 0 OR instr(' ' || lower(ifnull(masked, '')) || ' ', ?) > 0"
        params = (f'"{by.lower()}"', f" {by.lower()} ")
        with self._reading() as store:
            grouped = store.conn.execute(
                f"SELECT cluster, status, count(*) FROM jobs WHERE NOT ({own}) "
                "GROUP BY cluster, status",
                params,
            ).fetchall()
            for cluster, status, n in grouped:
                counts[status, store.cluster_ad(cluster).get(by)] += n
            own_rows = store.conn.execute(
                f"SELECT cluster, proc, ad, masked, status FROM jobs WHERE {own}", params
            )
            for cluster, proc, text, masked, status in own_rows:
                counts[status, store.job_ad((cluster, proc, text, masked)).get(by)] += 1
        return counts

    def summarize(self, constraint: str | ExprTree | None = None) -> list[BatchCounts]:
        """The jobs matching `constraint` counted by cluster, owner and batch name (by
        SQL alone when the constraint allows: see `_summary`)."""
        filt = compile_constraint(constraint)
        with self._reading() as store:
            return summarize(store, filt)

    def count_owners(self) -> dict[str, dict[int, int]]:
        """How many jobs each owner has of each JobStatus."""
        with self._reading() as store:
            return count_owners(store)

    def query(
        self,
        constraint: str | ExprTree | None = None,
        projection: Sequence[str] | None = None,
        *,
        limit: int | None = None,
        changed_after: int | None = None,
    ) -> list[ClassAd]:
        """The ads of the queued jobs matching `constraint`, in job-id order.

        With a `projection`, each ad has only those attributes (and ClusterId, ProcId).
        With `changed_after`, only the jobs a change after that sequence number of the
        feed touched (`last_seq`, `changes_since`).
        """
        filt = compile_constraint(constraint)
        if changed_after is not None:
            filt = dataclasses.replace(
                filt, where=(*filt.where, "seq > ?"), params=(*filt.params, changed_after)
            )
        return self._select(filt, projection, limit, history=False)

    def query_page(
        self,
        constraint: str | ExprTree | None,
        projection: Sequence[str] | None,
        *,
        after: JobId | None,
        count: int,
    ) -> list[ClassAd]:
        """`query`'s next `count` ads after job `after` (None: from the first): a listing
        read a page at a time, each page a consistent read of its own."""
        filt = compile_constraint(constraint)
        if after is not None:
            filt = dataclasses.replace(
                filt,
                where=(*filt.where, "(cluster > ? OR (cluster = ? AND proc > ?))"),
                params=(*filt.params, after.cluster, after.cluster, after.proc),
            )
        return self._select(filt, projection, count, history=False)

    def history(
        self,
        constraint: str | ExprTree | None = None,
        projection: Sequence[str] | None = None,
        *,
        limit: int | None = None,
    ) -> list[ClassAd]:
        """Jobs that left the queue, most recent first (as condor_history lists them)."""
        return self._select(compile_constraint(constraint), projection, limit, history=True)

    def _select(
        self, filt: Filter, projection: Sequence[str] | None, limit: int | None, *, history: bool
    ) -> list[ClassAd]:
        names = list(projection) if projection else None
        with self._reading() as store:
            ads = self._scan(store, filt, history=history, limit=limit)
            if names is None:
                return list(ads)
            return [project(ad, names) for ad in ads]

    def _scan(
        self, store: Store, filt: Filter, *, history: bool, limit: int | None = None
    ) -> Iterator[ClassAd]:
        table, order = ("history", "id DESC") if history else ("jobs", "cluster, proc")
        sql = f"SELECT cluster, proc, ad, masked FROM {table} WHERE {filt.sql()} ORDER BY {order}"
        count = 0
        for row in store.conn.execute(sql, filt.params):
            if limit is not None and count >= limit:
                return
            ad = history_ad(store, row) if history else store.job_ad(row)
            if ad is not None and filt.matches(ad):
                count += 1
                yield ad

    def quarantined(self) -> list[Quarantined]:
        """The rows set aside because they could not be read (see `_quarantine`)."""
        with self._reading() as store:
            return quarantined(store.conn)

    def changes_since(self, seq: int, *, limit: int | None = None) -> list[Change]:
        """The committed changes after sequence number `seq` (0: from the start)."""
        with self._reading() as store:
            return read_changes(store.conn, seq, limit)

    @property
    def last_seq(self) -> int:
        """The sequence number of the last committed change."""
        with self._reading() as store:
            return store.meta("last_seq")

    def factories(self) -> list[FactoryInfo]:
        """The late-materialization factories (`_factory`), in cluster order."""
        with self._reading() as store:
            return factories(store)

    @contextmanager
    def _reading(self) -> Iterator[Store]:
        with self._lock, gc_paused():
            self._check_open()
            with self._store.reading():
                yield self._store

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the job queue is closed")
