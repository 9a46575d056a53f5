"""HTCondor's queue-management calls (QMGMT) over CEDAR: how `htcondor2.Schedd.submit` and
`edit` change the queue.

Each call is `int call-number`, its arguments, EOM; most are answered with `int rval`
(and `int errno` when it is negative). Everything from the connection's start to its
commit is one transaction, as in the schedd: new clusters (NewCluster, NewProc and the
SetAttribute of their attributes, cluster-wide ones with proc -1) and edits of existing
jobs (SetAttribute, SetAttributeByConstraint) are kept here and done at
CommitTransaction: the cluster submitted through the queue's service (the same checks
as any submit: the owner is the authenticated user, unless an administrator names
another), the edits through its edit (which checks ownership and protected
attributes). An error of a call sent with NoAck (flag 2) is reported at the commit, as
the schedd's error stack does; nothing of a transaction that fails is kept. A cluster
submitted for late materialization (SetJobFactory, SendMaterializeData) has no procs:
they are made from its digest at the commit (`_qmgmt_factory`).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import HTGridError
from htgrid.net import CedarError, Jobs
from htgrid.net.cedar import CedarCall, Reader, split_lines
from htgrid.queue import JobId
from htgrid.schedd._cedar_files import NO_FILE_TRANSFER
from htgrid.schedd._qmgmt_factory import (
    ITEMS_NAME,
    Factory,
    FactoryRefused,
    materialize,
    take,
)
from htgrid.schedd._qmgmt_read import QmgmtReads
from htgrid.schedd._service import QueueService
from htgrid.schedd._submit import spooling

__all__ = ["QmgmtSession"]

_log = logging.getLogger("htgrid.schedd")

NEW_CLUSTER: Final = 10002
NEW_PROC: Final = 10003
DESTROY_CLUSTER: Final = 10004
DESTROY_PROC: Final = 10005
SET_ATTRIBUTE: Final = 10006
COMMIT_NO_FLAGS: Final = 10007
SET_BY_CONSTRAINT: Final = 10021
BEGIN_TRANSACTION: Final = 10023
ABORT_TRANSACTION: Final = 10024
SET_ATTRIBUTE2: Final = 10027
CLOSE_SOCKET: Final = 10028
SET_EFFECTIVE_OWNER: Final = 10030
COMMIT: Final = 10031
SET_BY_CONSTRAINT2: Final = 10032
GET_CAPABILITIES: Final = 10036
SET_JOB_FACTORY: Final = 10037
SEND_MATERIALIZE_DATA: Final = 10039
NO_ACK: Final = 2  # SetAttribute_NoAck
_ID_ATTRS: Final = frozenset({"clusterid", "procid"})  # the queue numbers jobs itself
# Late materialization as HTCondor's schedd offers it (version 2: a digest with item rows).
_CAPABILITIES: Final = {"LateMaterialize": True, "LateMaterializeVersion": 2}
_READ_ONLY: Final = "this connection is read-only (QMGMT_READ_CMD): nothing is changed"
_FACTORY_BATCH: Final = 1000  # procs made from a digest at a time
_MAX_ITEMS: Final = 64 << 20  # bytes of item rows one factory may send


_Reply = tuple[int, int] | None  # (rval, errno), or None: no answer (NoAck)


def _proc_get(proc: ClassAd, cluster: ClassAd, name: str) -> object:
    return proc[name] if name in proc else cluster.get(name)


class _CallFailed(HTGridError):
    """One call failed: `code` is its errno."""

    def __init__(self, message: str, code: int = errno.EINVAL) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _NewCluster:
    ad: ClassAd = field(default_factory=ClassAd)
    procs: list[ClassAd] = field(default_factory=list)
    factory: Factory | None = None  # late materialization: the procs come from it
    items: bytes | None = None  # its rows (SendMaterializeData), sent before it


class QmgmtSession:
    """One QMGMT connection: its calls, its transaction."""

    def __init__(
        self, service: QueueService, call: CedarCall, domain: str, *, read_only: bool = False
    ) -> None:
        """`read_only` (QMGMT_READ_CMD): the calls that would change the queue are
        refused (EACCES), as HTCondor's schedd refuses them on such a connection."""
        self._service = service
        self._call = call
        self._identity = call.principal.identity()
        self._domain = domain
        self._read_only = read_only
        self._reads = QmgmtReads(service, call).handlers()
        self._clusters: dict[int, _NewCluster] = {}
        self._edits: dict[JobId, dict[str, str]] = {}
        self._constraint_edits: list[tuple[str, str, str]] = []
        self._deferred: _CallFailed | None = None  # a NoAck call's error, told at commit
        self._handlers: Mapping[int, Callable[[Reader], Awaitable[_Reply]]] = {
            NEW_CLUSTER: self._new_cluster,
            NEW_PROC: self._new_proc,
            SET_ATTRIBUTE: self._set_attribute,
            SET_ATTRIBUTE2: self._set_attribute,
            SET_BY_CONSTRAINT: self._set_by_constraint,
            SET_BY_CONSTRAINT2: self._set_by_constraint,
            BEGIN_TRANSACTION: self._begin,
            ABORT_TRANSACTION: self._abort,
            SET_EFFECTIVE_OWNER: self._effective_owner,
            DESTROY_CLUSTER: self._destroy,
            DESTROY_PROC: self._destroy,
            SET_JOB_FACTORY: self._set_job_factory,
        }

    async def run(self) -> None:
        while True:
            r = await self._call.receive()
            number = r.int("the QMGMT call")
            if number == CLOSE_SOCKET:
                r.done("CloseSocket")
                return
            if number == GET_CAPABILITIES:
                r.int("the capabilities' mask")
                r.done("GetCapabilities")
                await self._call.send_ad(_CAPABILITIES)
                continue
            if number == SEND_MATERIALIZE_DATA:
                await self._materialize_data(r)
                continue
            if number in (COMMIT, COMMIT_NO_FLAGS):
                if number == COMMIT:
                    r.int("the commit's flags")
                r.done("CommitTransaction")
                await self._commit()
                continue
            read = self._reads.get(number)
            if read is not None:
                await read(r)
                continue
            handler = self._handlers.get(number)
            if handler is None:
                raise CedarError(
                    f"QMGMT call {number} is not one htgrid answers (it answers submit, "
                    "edit and reads: NewCluster, NewProc, SetAttribute*, SetJobFactory, "
                    "CommitTransaction, GetJobAd, GetNextJob*, GetAllJobsByConstraint, "
                    "GetAttribute*)"
                )
            reply = await handler(r)
            if reply is not None:
                await self._reply(*reply)

    async def _reply(self, rval: int, code: int = 0) -> None:
        w = self._call.writer().int(rval)
        if rval < 0:
            w.int(code)
        await self._call.send(w)

    # -- calls --------------------------------------------------------------------------

    async def _new_cluster(self, r: Reader) -> _Reply:
        r.done("NewCluster")
        if self._read_only:
            return -1, errno.EACCES
        cluster = await self._service.reserve_cluster(self._identity)
        self._clusters[cluster] = _NewCluster()
        return cluster, 0

    async def _new_proc(self, r: Reader) -> _Reply:
        cluster = r.int("NewProc's cluster")
        r.done("NewProc")
        new = self._clusters.get(cluster)
        if new is None:
            return -1, errno.EINVAL
        new.procs.append(ClassAd())
        return len(new.procs) - 1, 0

    async def _set_attribute(self, r: Reader) -> _Reply:
        cluster = r.int("SetAttribute's cluster")
        proc = r.int("SetAttribute's proc")
        value = r.text("SetAttribute's value")
        name = r.text("SetAttribute's name")
        flags = r.char("SetAttribute's flags") if r.remaining else 0
        r.done("SetAttribute")
        try:
            self._set(cluster, proc, name, value)
        except _CallFailed as exc:
            if flags & NO_ACK:
                self._deferred = self._deferred or exc
                return None
            return -1, exc.code
        return None if flags & NO_ACK else (0, 0)

    def _set(self, cluster: int, proc: int, name: str, value: str) -> None:
        if self._read_only:
            raise _CallFailed(f"{name} of {cluster}.{proc}: {_READ_ONLY}", errno.EACCES)
        if not name or not name.replace("_", "a").isalnum():
            raise _CallFailed(f"{name!r} is not an attribute name")
        try:
            expr = ExprTree(value)
        except HTGridError as exc:
            raise _CallFailed(f"{name} = {value}: {exc}") from None
        new = self._clusters.get(cluster)
        if new is None:
            self._edits.setdefault(JobId(cluster, proc), {})[name] = value
            return
        if name.lower() in _ID_ATTRS:
            return
        if proc < 0:
            new.ad[name] = expr
        elif proc < len(new.procs):
            new.procs[proc][name] = expr
        else:
            raise _CallFailed(f"job {cluster}.{proc} has not been made (NewProc)", errno.ENOENT)

    async def _set_by_constraint(self, r: Reader) -> _Reply:
        constraint = r.text("the constraint")
        value = r.text("the value")
        name = r.text("the name")
        if r.remaining:
            r.char("the flags")
        r.done("SetAttributeByConstraint")
        if self._read_only:
            self._deferred = self._deferred or _CallFailed(_READ_ONLY, errno.EACCES)
            return -1, errno.EACCES
        try:
            ExprTree(value)
            ads = await self._service.query(self._identity, constraint, ["Owner"], None)
        except HTGridError as exc:
            self._deferred = self._deferred or _CallFailed(str(exc))
            return -1, errno.EINVAL
        mine = [ad for ad in ads if self._identity.may_act_on(str(ad.get("Owner")))]
        if not mine:
            return -1, errno.ENOENT
        self._constraint_edits.append((constraint, name, value))
        return len(mine), 0

    async def _set_job_factory(self, r: Reader) -> _Reply:
        cluster = r.int("SetJobFactory's cluster")
        limit = r.int("SetJobFactory's count")
        r.string("SetJobFactory's file name")  # HTCondor's tools send the text itself
        digest = r.text("SetJobFactory's digest")
        r.done("SetJobFactory")
        new = self._clusters.get(cluster)
        if new is None or new.procs:
            return -1, errno.EPERM  # only while its cluster is being submitted, procless
        if limit < 1 or not digest.strip():
            return -1, errno.EINVAL
        new.factory = Factory(limit, digest, new.items)
        return 0, 0

    async def _materialize_data(self, r: Reader) -> None:
        """SendMaterializeData: the factory's item rows, answered with the name its
        Queue statement then reads them from and how many there are."""
        cluster = r.int("SendMaterializeData's cluster")
        r.int("SendMaterializeData's flags")
        rows = r.raw(r.remaining, "the item rows")
        new = self._clusters.get(cluster)
        if new is None:
            # HTCondor's schedd drops the connection here: nothing of it is kept.
            raise CedarError(f"SendMaterializeData for cluster {cluster}, not being submitted")
        if len(rows) > _MAX_ITEMS:
            raise CedarError(f"{len(rows)} bytes of item rows (at most {_MAX_ITEMS})")
        new.items = rows
        if new.factory is not None:
            new.factory.items = rows
        count = rows.count(b"\n") + (0 if not rows or rows.endswith(b"\n") else 1)
        await self._call.send(self._call.writer().string(ITEMS_NAME).int(count).int(0))

    async def _begin(self, r: Reader) -> _Reply:
        r.done("BeginTransaction")
        return 0, 0

    async def _abort(self, r: Reader) -> _Reply:
        r.done("AbortTransaction")
        self._forget()
        return 0, 0

    async def _effective_owner(self, r: Reader) -> _Reply:
        owner = r.text("the owner")
        r.done("SetEffectiveOwner")
        ok = not owner or self._identity.may_act_on(owner.partition("@")[0])
        return (0, 0) if ok else (-1, errno.EACCES)

    async def _destroy(self, r: Reader) -> _Reply:
        cluster = r.int("the cluster")
        proc = r.int("the proc") if r.remaining else -1
        r.done("DestroyCluster/DestroyProc")
        new = self._clusters.get(cluster)
        if new is None:
            return -1, errno.ENOENT
        if proc < 0:
            del self._clusters[cluster]
        elif proc == len(new.procs) - 1:
            new.procs.pop()
        return 0, 0

    def _forget(self) -> None:
        self._clusters.clear()
        self._edits.clear()
        self._constraint_edits.clear()
        self._deferred = None

    # -- the commit ---------------------------------------------------------------------

    async def _commit(self) -> None:
        failure = self._deferred
        if failure is None:
            try:
                await self._apply()
            except HTGridError as exc:
                failure = exc if isinstance(exc, _CallFailed) else _CallFailed(str(exc))
        self._forget()
        w = self._call.writer()
        if failure is None:
            w.int(0).lines([])
        else:
            _log.info("CEDAR submit/edit from %s refused: %s", self._call.peer, failure)
            reason = ClassAd({"ErrorCode": failure.code, "ErrorReason": str(failure)})
            w.int(-1).int(failure.code).lines(split_lines(reason))
        await self._call.send(w)

    async def _submit_factory(self, cluster: int, ad: ClassAd, factory: Factory) -> list[JobId]:
        ad["JobMaterializeLimit"] = factory.limit  # as HTCondor's SetJobFactory sets it
        qdate = ad.get("QDate")
        try:
            procs = await asyncio.to_thread(
                materialize,
                cluster,
                ad,
                factory,
                owner=str(ad["Owner"]),
                qdate=qdate if isinstance(qdate, int) else int(time.time()),
            )

            async def batches() -> AsyncIterator[list[ClassAd]]:
                # Built a batch at a time off the loop: a factory of a million jobs
                # never stands whole in memory.
                while batch := await asyncio.to_thread(take, procs, _FACTORY_BATCH):
                    yield batch

            count = await self._service.submit_stream(
                self._identity, cluster, ad, batches(), factory=True
            )
        except FactoryRefused as exc:
            raise _CallFailed(str(exc)) from None
        return [JobId(cluster, proc) for proc in range(count)]

    async def _apply(self) -> None:
        for cluster, new in self._clusters.items():
            if not new.procs and new.factory is None:
                raise _CallFailed(f"cluster {cluster} has no job (NewProc)")
            ad = new.ad
            user = self._identity.name
            if not isinstance(ad.get("Owner"), str):  # htcondor2 sends Owner = undefined
                ad["Owner"] = user
            if not isinstance(ad.get("User"), str):
                ad["User"] = f"{ad['Owner']}@{self._domain}"
            if any(spooling(functools.partial(_proc_get, proc, ad)) for proc in new.procs):
                raise _CallFailed(f"cluster {cluster}: {NO_FILE_TRANSFER}; nothing was queued")
            if new.factory is None:
                ids = await self._service.submit(self._identity, cluster, ad, new.procs)
            else:
                ids = await self._submit_factory(cluster, ad, new.factory)
            _log.info(
                "CEDAR client %s (%s) submitted %d job(s) of cluster %d",
                self._call.peer,
                self._call.principal.name,
                len(ids),
                cluster,
            )
        for job, attrs in self._edits.items():
            await self._service.edit(self._identity, Jobs.of([job]), attrs)
        for constraint, name, value in self._constraint_edits:
            await self._service.edit(self._identity, Jobs.matching(constraint), {name: value})
