"""Submitting: new clusters and their procs, all in one transaction.

As in HTCondor (NewCluster, SetAttribute on the cluster, NewProc..., CommitTransaction),
the submitter learns the cluster id first, because `$(Cluster)` appears in the ads it then
builds. The cluster ad holds what all procs share and each proc only what differs, so a
100,000-proc cluster stores its 60 common attributes once.

Procs that arrive over time (a submit streamed over the API) are checked and encoded as
they come into `StagedProcs`, outside any transaction, in a temporary file past a few
MiB; `SubmitTransaction.add_staged` then queues them all in the cluster's transaction.
Until that commits nothing of them is in the queue, and the file goes with the process.
"""

from __future__ import annotations

import copy
import itertools
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from htgrid.classad import ClassAd
from htgrid.queue import _factory
from htgrid.queue._codes import HoldReasonCode
from htgrid.queue._errors import InvalidSubmit, NotAuthorized
from htgrid.queue._ids import Identity, JobId
from htgrid.queue._serial import encode, encode_plain
from htgrid.queue._status import JobStatus
from htgrid.queue._store import EMPTY, FeedEntry, Txn

__all__ = ["StagedProcs", "SubmitTransaction"]

_IDS: Final = frozenset({"clusterid", "procid", "owner"})
_SPECIAL: Final = _IDS | {"jobstatus"}  # proc attributes that need checking
_FLUSH_ROWS: Final = 50_000  # bounds the memory a huge cluster takes before commit
_STAGED_IN_MEMORY: Final = 8 << 20  # bytes of staged procs kept before they go to a file
_SUBMITTABLE: Final = frozenset({JobStatus.IDLE, JobStatus.HELD})
SUBMITTED_ON_HOLD: Final = "submitted on hold at user's request"


@dataclass
class _Pending:
    ad: ClassAd | None = None
    owner: str = ""
    status: int = int(JobStatus.IDLE)
    seq: int = 0
    next_proc: int = 0
    rows: list[tuple[int, int, int, str, int, str]] = field(default_factory=list)


class SubmitTransaction:
    """Clusters being submitted; nothing is visible until the transaction commits."""

    def __init__(self, txn: Txn, identity: Identity, claim_cluster: Callable[[int], int]) -> None:
        self._txn = txn
        self._identity = identity
        self._claim_cluster = claim_cluster
        self._clusters: dict[int, _Pending] = {}

    def new_cluster(self) -> int:
        """A new cluster id: larger than any before it, never reused."""
        cluster = self._claim_cluster(self._txn.next_cluster)
        # max: a reserved id (JobQueue.reserve_cluster) may be below the counter.
        self._txn.next_cluster = max(self._txn.next_cluster, cluster + 1)
        self._clusters[cluster] = _Pending()
        return cluster

    def set_cluster_ad(self, cluster: int, ad: ClassAd) -> None:
        """The attributes all the cluster's procs share (copied; `ad` is not changed).

        The queue sets `ClusterId`, `Owner` (the submitter, unless an administrator names
        another), `QDate` when missing, `EnteredCurrentStatus`, and `JobStatus` (Idle
        unless given as Held, which also gets HoldReasonCode 15 SubmittedOnHold).
        """
        pending = self._pending(cluster)
        if pending.next_proc:
            raise InvalidSubmit(f"cluster {cluster}: set the cluster ad before adding procs")
        ad, pending.owner, pending.status = _cluster_ad(ad, cluster, self._identity)
        now = self._txn.now
        if "QDate" not in ad:
            ad["QDate"] = now
        ad["EnteredCurrentStatus"] = now
        pending.ad = ad
        if not pending.seq:
            pending.seq = self._txn.new_seq()

    def new_proc(self, cluster: int, ad: ClassAd | None = None) -> JobId:
        """Add a proc; `ad` holds only what differs from the cluster ad (may be None)."""
        pending = self._pending(cluster)
        if pending.ad is None:
            raise InvalidSubmit(f"cluster {cluster}: set the cluster ad before adding procs")
        proc = pending.next_proc
        text, status = _proc_row(ad, cluster, proc, pending.owner, pending.status)
        pending.next_proc = proc + 1
        pending.rows.append((cluster, proc, status, pending.owner, pending.seq, text))
        if len(pending.rows) >= _FLUSH_ROWS:
            self._flush_rows(pending)
        return JobId(cluster, proc)

    def add_staged(self, cluster: int, staged: StagedProcs, *, factory: bool = False) -> int:
        """Add the procs of `staged` (staged for this cluster, with the cluster ad set
        now); how many. With `factory`, a cluster ad with JobMaterializeLimit or
        JobMaterializeMaxIdle makes a factory (`_factory`): only as many procs as they
        allow are queued now, the others as earlier ones leave."""
        pending = self._pending(cluster)
        if pending.ad is None or pending.next_proc:
            raise InvalidSubmit(f"cluster {cluster}: staged procs come first, after its ad")
        if (staged.cluster, staged.owner, staged.status) != (
            cluster,
            pending.owner,
            pending.status,
        ):
            raise InvalidSubmit(f"cluster {cluster}: the procs were staged for another ad")
        owner, seq = pending.owner, pending.seq
        limits = _factory.limits_of(pending.ad, cluster) if factory else None
        queued = staged.count
        if limits is not None:
            queued = _factory.create(
                self._txn, cluster, owner, pending.status, limits, staged.count, seq=seq
            )
            seq = pending.seq = self._txn.new_seq()  # its procs' SUBMITTED after the factory's
        rows = staged.rows()
        self._txn.conn.executemany(
            "INSERT INTO jobs (cluster, proc, status, owner, seq, ad) VALUES (?, ?, ?, ?, ?, ?)",
            (
                (cluster, proc, status, owner, seq, text)
                for proc, status, text in itertools.islice(rows, queued)
            ),
        )
        if limits is not None:
            _factory.wait(self._txn, cluster, pending.status, rows)
        pending.next_proc = queued
        return staged.count

    def _pending(self, cluster: int) -> _Pending:
        pending = self._clusters.get(cluster)
        if pending is None:
            raise InvalidSubmit(f"cluster {cluster} was not created in this transaction")
        return pending

    def _flush_rows(self, pending: _Pending) -> None:
        self._txn.conn.executemany(
            "INSERT INTO jobs (cluster, proc, status, owner, seq, ad) VALUES (?, ?, ?, ?, ?, ?)",
            pending.rows,
        )
        pending.rows = []

    def commit_rows(self) -> dict[int, ClassAd]:
        """Write every cluster (refusing empty ones); the cluster ads, for the cache."""
        ads: dict[int, ClassAd] = {}
        for cluster, pending in self._clusters.items():
            if pending.ad is None or pending.next_proc == 0:
                raise InvalidSubmit(f"cluster {cluster} has no procs; nothing was submitted")
            self._flush_rows(pending)
            self._txn.conn.execute(
                "INSERT INTO clusters (cluster, owner, ad) VALUES (?, ?, ?)",
                (cluster, pending.owner, encode(pending.ad)),
            )
            self._txn.add_change(
                FeedEntry(pending.seq, "submitted", cluster, 0, pending.next_proc - 1)
            )
            ads[cluster] = pending.ad
        return ads


class StagedProcs:
    """The procs of a cluster as they arrive, checked and encoded as `new_proc` does,
    kept (in memory up to a few MiB, then in a file in `directory`) until
    `SubmitTransaction.add_staged` queues them. Close it when done."""

    def __init__(
        self, cluster: int, cluster_ad: ClassAd, identity: Identity, directory: Path | None
    ) -> None:
        """`cluster_ad` is checked as `set_cluster_ad` will check it at the commit."""
        self.cluster = cluster
        _ad, self.owner, self.status = _cluster_ad(cluster_ad, cluster, identity)
        self.count = 0
        # Closed by close(): it lives as long as the submit does, over many calls.
        self._file: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115
            max_size=_STAGED_IN_MEMORY,
            mode="w+b",
            dir=None if directory is None else str(directory),
            prefix="staged-procs-",
        )

    def add(self, ad: ClassAd | None) -> JobId:
        """Stage the next proc: what it has of its own (None or empty: nothing)."""
        proc = self.count
        text, status = _proc_row(ad, self.cluster, proc, self.owner, self.status)
        self._file.write(f"{status}\t{text}\n".encode())
        self.count = proc + 1
        return JobId(self.cluster, proc)

    def rows(self) -> Iterator[tuple[int, int, str]]:
        """(proc, status, stored text) of each proc staged, in order."""
        self._file.seek(0)
        for proc, line in enumerate(self._file):
            status, _, text = line.decode().rstrip("\n").partition("\t")
            yield proc, int(status), text

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> StagedProcs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cluster_ad(ad: ClassAd, cluster: int, identity: Identity) -> tuple[ClassAd, str, int]:
    """A copy of a cluster ad with its ids and owner set, checked; its owner and the
    status its procs are submitted in."""
    ad = copy.copy(ad)
    owner = ad.get("Owner", identity.name)
    if type(owner) is not str or not owner:
        raise InvalidSubmit(f"cluster {cluster}: Owner must be a user name, not {owner!r}")
    if owner != identity.name and not identity.admin:
        raise NotAuthorized(
            f"cluster {cluster}: {identity.name} may not submit jobs owned by {owner}"
        )
    if ad.get("ClusterId", cluster) != cluster:
        raise InvalidSubmit(f"cluster {cluster}: the ad says ClusterId = {ad['ClusterId']}")
    ad.pop("ProcId", None)
    ad["ClusterId"] = cluster
    ad["Owner"] = owner
    status = _initial_status(ad, f"cluster {cluster}", default=int(JobStatus.IDLE))
    return ad, owner, status


def _proc_row(
    ad: ClassAd | None, cluster: int, proc: int, owner: str, status: int
) -> tuple[str, int]:
    """A proc's own attributes as stored, and its status (its cluster's unless it says)."""
    if ad is None:
        return EMPTY, status
    plain = encode_plain(ad, _SPECIAL)
    if plain:
        return plain, status
    _check_ids(ad, cluster, proc, owner)
    if "JobStatus" in ad:
        ad = copy.copy(ad)
        status = _initial_status(ad, f"job {cluster}.{proc}", default=None)
    return encode(ad, _IDS), status


def _initial_status(ad: ClassAd, what: str, default: int | None) -> int:
    """The status a job is submitted in: Idle, or Held with the SubmittedOnHold reason."""
    status = ad.get("JobStatus", default)
    if type(status) is not int or status not in _SUBMITTABLE:
        raise InvalidSubmit(f"{what}: a job is submitted Idle (1) or Held (5), not {status!r}")
    ad["JobStatus"] = int(status)
    if status == JobStatus.HELD:
        if "HoldReasonCode" not in ad:
            ad["HoldReasonCode"] = int(HoldReasonCode.SubmittedOnHold)
            ad["HoldReasonSubCode"] = 0
        if "HoldReason" not in ad:
            ad["HoldReason"] = SUBMITTED_ON_HOLD
    return int(status)


def _check_ids(ad: ClassAd, cluster: int, proc: int, owner: str) -> None:
    for name, expected in (("ClusterId", cluster), ("ProcId", proc), ("Owner", owner)):
        if name in ad and ad[name] != expected:
            raise InvalidSubmit(
                f"job {cluster}.{proc}: the ad says {name} = {ad[name]!r}, not {expected!r}"
            )
