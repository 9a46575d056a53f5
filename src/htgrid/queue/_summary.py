"""Counts of the queue as condor_q's batch view and totals show them, taken without
reading every job's ad.

A batch (`BatchCounts`) is the jobs of one cluster and owner that share a JobBatchName:
how many of each status, the first and last proc, the earliest QDate and the largest
TotalSubmitProcs. Those three attributes nearly always come from the cluster ad, so the
jobs are counted by SQL, grouped by cluster, owner and status, and only the jobs whose
own attributes set or hide one of them are read. A constraint SQL says exactly
(`Filter.exact`: JobStatus, ClusterId, ProcId and Owner compared with literals, as
condor_q's own are) is answered so; any other is evaluated on each job's ad, here in the
daemon, which still sends only the counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # `BatchCounts` loads without SQLite, for `htgrid q`
    from htgrid.classad import ClassAd
    from htgrid.queue._query import Filter
    from htgrid.queue._store import Store

__all__ = ["BatchCounts", "count_owners", "summarize"]

_BATCH_ATTRS: Final = ("jobbatchname", "qdate", "totalsubmitprocs")


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """The jobs of one cluster, owner and batch name: counts by JobStatus and more."""

    cluster: int
    owner: str
    batch_name: str | None
    qdate: int | None  # the earliest
    total_submit_procs: int  # the largest (0 when none says)
    first_proc: int
    last_proc: int
    counts: Mapping[int, int] = field(default_factory=dict)  # JobStatus -> jobs

    @property
    def jobs(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "owner": self.owner,
            "batch_name": self.batch_name,
            "qdate": self.qdate,
            "total_submit_procs": self.total_submit_procs,
            "first_proc": self.first_proc,
            "last_proc": self.last_proc,
            "counts": {str(k): v for k, v in sorted(self.counts.items())},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> BatchCounts:
        return cls(
            cluster=int(doc["cluster"]),
            owner=str(doc["owner"]),
            batch_name=doc.get("batch_name"),
            qdate=doc.get("qdate"),
            total_submit_procs=int(doc.get("total_submit_procs") or 0),
            first_proc=int(doc["first_proc"]),
            last_proc=int(doc["last_proc"]),
            counts={int(k): int(v) for k, v in doc.get("counts", {}).items()},
        )


class _Batches:
    """BatchCounts being gathered."""

    def __init__(self) -> None:
        self._found: dict[tuple[int, str, str | None], dict[str, Any]] = {}

    def add(self, cluster: int, owner: str, ad: ClassAd, status: int, n: int, procs: range) -> None:
        name = ad.get("JobBatchName")
        name = name if isinstance(name, str) else None
        qdate = ad.get("QDate")
        total = ad.get("TotalSubmitProcs")
        key = (cluster, owner, name)
        batch = self._found.get(key)
        if batch is None:
            batch = self._found[key] = {
                "qdate": None,
                "total": 0,
                "first": procs.start,
                "last": procs.stop - 1,
                "counts": {},
            }
        if type(qdate) is int and (batch["qdate"] is None or qdate < batch["qdate"]):
            batch["qdate"] = qdate
        if type(total) is int and total > batch["total"]:
            batch["total"] = total
        batch["first"] = min(batch["first"], procs.start)
        batch["last"] = max(batch["last"], procs.stop - 1)
        counts: dict[int, int] = batch["counts"]
        counts[status] = counts.get(status, 0) + n

    def result(self) -> list[BatchCounts]:
        return [
            BatchCounts(c, o, name, b["qdate"], b["total"], b["first"], b["last"], b["counts"])
            for (c, o, name), b in sorted(
                self._found.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "")
            )
        ]


def summarize(store: Store, filt: Filter) -> list[BatchCounts]:
    """The batches of the jobs that match `filt`, in cluster order."""
    batches = _Batches()
    if not filt.exact:
        sql = f"SELECT cluster, proc, ad, masked FROM jobs WHERE {filt.sql()}"
        for row in store.conn.execute(sql, filt.params):
            ad = store.job_ad(row)
            if filt.matches(ad):
                status, owner, proc = ad["JobStatus"], ad["Owner"], row[1]
                batches.add(row[0], str(owner), ad, int(status), 1, range(proc, proc + 1))
        return batches.result()
    # A job's Owner is its cluster's (the queue takes no other), so a cluster and a
    # status make a group; the jobs without attributes of their own (nearly all) are
    # told apart first, before the slower search of the others' texts.
    from htgrid.queue._store import EMPTY  # here: SQLite is the store's

    own, params = _own_sql(_BATCH_ATTRS)
    # Owner is a cluster's: asked of the clusters, it spares a look-up per job.
    filt = dataclasses.replace(
        filt,
        where=tuple(
            f"cluster IN (SELECT cluster FROM clusters WHERE {w})" if w.startswith("owner ") else w
            for w in filt.where
        ),
    )
    grouped = store.conn.execute(
        f"SELECT cluster, status, count(*), min(proc), max(proc) FROM jobs "
        f"WHERE {filt.sql()} AND ((ad = ? AND masked IS NULL) OR NOT ({own})) "
        "GROUP BY cluster, status",
        (*filt.params, EMPTY, *params),
    )
    for cluster, status, n, first, last in grouped:
        ad = store.cluster_ad(cluster)
        batches.add(cluster, str(ad["Owner"]), ad, status, n, range(first, last + 1))
    rows = store.conn.execute(
        f"SELECT cluster, proc, ad, masked, owner, status FROM jobs WHERE {filt.sql()} "
        f"AND NOT (ad = ? AND masked IS NULL) AND ({own})",
        (*filt.params, EMPTY, *params),
    )
    for cluster, proc, text, masked, owner, status in rows:
        ad = store.job_ad((cluster, proc, text, masked))
        batches.add(cluster, owner, ad, status, 1, range(proc, proc + 1))
    return batches.result()


def count_owners(store: Store) -> dict[str, dict[int, int]]:
    """How many jobs each owner has of each JobStatus."""
    owners = dict(store.conn.execute("SELECT cluster, owner FROM clusters"))
    counts: dict[str, dict[int, int]] = {}
    for cluster, status, n in store.conn.execute(
        "SELECT cluster, status, count(*) FROM jobs GROUP BY cluster, status"
    ):
        mine = counts.setdefault(owners[cluster], {})
        mine[status] = mine.get(status, 0) + n
    return counts


def _own_sql(names: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """A condition true of the rows whose own attributes set or hide one of `names`
    (and of a few more, which are then read for nothing): as a key of the stored ad, or
    a name among those hidden. LIKE ignores ASCII case, as ClassAd names do, and is
    several times faster than searching a lowered copy."""
    parts = []
    params: list[str] = []
    for name in names:
        parts.append("ad LIKE ? OR ifnull(masked, '') LIKE ?")
        params += [f'%"{name}"%', f"%{name}%"]
    return " OR ".join(parts), tuple(params)
