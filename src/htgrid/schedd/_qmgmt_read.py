"""The queue-management calls that read the queue (GetJobAd, GetNextJobByConstraint,
GetAllJobsByConstraint, GetAttribute*): what HTCondor's tools send on a read-only
connection (QMGMT_READ_CMD, READ authorization; condor_ssh_to_job, condor_qedit's
checks, HTCondor-C), answered as `qmgmt_receivers.cpp` answers them.

Each reply is `int rval` (0, or -1 then `int errno`), then the value or the job ad;
GetAllJobsByConstraint sends `int 0, ad` for each job and `int -1, int errno` last, all
in one message. Ads go without their private attributes (claim ids, transfer keys), as
HTCondor sends them to any client.
"""

from __future__ import annotations

import errno
import functools
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Final

from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.net.cedar import CedarCall, Reader, Writer, split_lines
from htgrid.queue import JobId, JobNotFound
from htgrid.schedd._service import QueueService

__all__ = ["READ_CALLS", "QmgmtReads"]

INITIALIZE: Final = 10001
GET_ATTRIBUTE_FLOAT: Final = 10008
GET_ATTRIBUTE_INT: Final = 10009
GET_ATTRIBUTE_STRING: Final = 10010
GET_ATTRIBUTE_EXPR: Final = 10011
GET_NEXT_JOB: Final = 10013
GET_JOB_AD: Final = 10018
GET_JOB_BY_CONSTRAINT: Final = 10019
GET_NEXT_JOB_BY_CONSTRAINT: Final = 10020
INITIALIZE_READ_ONLY: Final = 10022
GET_ALL_JOBS_BY_CONSTRAINT: Final = 10026
#: The calls this module answers.
READ_CALLS: Final = frozenset(
    {
        INITIALIZE,
        GET_ATTRIBUTE_FLOAT,
        GET_ATTRIBUTE_INT,
        GET_ATTRIBUTE_STRING,
        GET_ATTRIBUTE_EXPR,
        GET_NEXT_JOB,
        GET_JOB_AD,
        GET_JOB_BY_CONSTRAINT,
        GET_NEXT_JOB_BY_CONSTRAINT,
        INITIALIZE_READ_ONLY,
        GET_ALL_JOBS_BY_CONSTRAINT,
    }
)
_PRIVATE: Final = frozenset(
    {"claimid", "capability", "claimids", "claimidlist", "childclaimids", "transferkey"}
)
_FRACTION: Final = 2147483647  # CEDAR sends a double as (mantissa * this, exponent)
_PAGE: Final = 500


def _public(ad: ClassAd) -> ClassAd:
    drop = [n for n in ad if n.lower() in _PRIVATE or n.lower().startswith("_condor_priv")]
    for name in drop:
        del ad[name]
    return ad


class QmgmtReads:
    """The read calls of one QMGMT connection, and its GetNextJob scan."""

    def __init__(self, service: QueueService, call: CedarCall) -> None:
        self._service = service
        self._call = call
        self._identity = call.principal.identity()
        self._scan: AsyncIterator[list[ClassAd]] | None = None
        self._scanned: list[ClassAd] = []
        self._scanning = False  # a scan was started (it may have ended)

    def handlers(self) -> Mapping[int, Callable[[Reader], Awaitable[None]]]:
        return {
            INITIALIZE: self._initialize,
            INITIALIZE_READ_ONLY: self._initialize,
            GET_ATTRIBUTE_FLOAT: functools.partial(self._get_attribute, GET_ATTRIBUTE_FLOAT),
            GET_ATTRIBUTE_INT: functools.partial(self._get_attribute, GET_ATTRIBUTE_INT),
            GET_ATTRIBUTE_STRING: functools.partial(self._get_attribute, GET_ATTRIBUTE_STRING),
            GET_ATTRIBUTE_EXPR: functools.partial(self._get_attribute, GET_ATTRIBUTE_EXPR),
            GET_JOB_AD: self._get_job_ad,
            GET_JOB_BY_CONSTRAINT: self._get_by_constraint,
            GET_NEXT_JOB: self._get_next,
            GET_NEXT_JOB_BY_CONSTRAINT: self._get_next,
            GET_ALL_JOBS_BY_CONSTRAINT: self._get_all,
        }

    # -- calls --------------------------------------------------------------------------

    async def _initialize(self, r: Reader) -> None:
        r.done("InitializeConnection")  # a no-op, unanswered, in HTCondor's schedd too

    async def _get_job_ad(self, r: Reader) -> None:
        cluster = r.int("GetJobAd's cluster")
        proc = r.int("GetJobAd's proc")
        r.done("GetJobAd")
        ad = await self._job_ad(cluster, proc)
        await self._send_ad(ad)

    async def _get_by_constraint(self, r: Reader) -> None:
        constraint = r.text("the constraint")
        r.done("GetJobByConstraint")
        try:
            ads = await self._service.query(self._identity, constraint or None, None, 1)
        except HTGridError:
            await self._fail(errno.EINVAL)
            return
        await self._send_ad(ads[0] if ads else None)

    async def _get_next(self, r: Reader) -> None:
        start = r.int("the scan's start")
        constraint = r.text("the constraint") if r.remaining else ""
        r.done("GetNextJob")
        if start or not self._scanning:
            self._scanning = True  # until the next start: an ended scan stays ended
            self._scan = self._service.query_pages(
                self._identity, constraint or None, None, None
            ).__aiter__()
            self._scanned = []
        try:
            ad = await self._next()
        except HTGridError:
            self._scan = None
            await self._fail(errno.EINVAL)
            return
        await self._send_ad(ad)

    async def _get_all(self, r: Reader) -> None:
        constraint = r.text("the constraint")
        projection = r.text("the projection").replace(",", " ").split()
        r.done("GetAllJobsByConstraint")
        w = self._call.writer()
        try:
            async for page in self._service.query_pages(
                self._identity, constraint or None, projection or None, None
            ):
                now = int(time.time())
                for ad in page:
                    ad["ServerTime"] = now  # HTCondor-C relies on it
                    w.int(0).lines(split_lines(_public(ad)))
        except HTGridError:
            w = self._call.writer()
            w.int(-1).int(errno.EINVAL)
        else:
            w.int(-1).int(errno.ENOENT)
        await self._call.send(w)

    # -- helpers ------------------------------------------------------------------------

    async def _next(self) -> ClassAd | None:
        while not self._scanned:
            if self._scan is None:
                return None
            try:
                self._scanned = await anext(self._scan)
            except StopAsyncIteration:
                self._scan = None
                return None
            self._scanned.reverse()
        return self._scanned.pop()

    async def _job_ad(self, cluster: int, proc: int) -> ClassAd | None:
        if cluster < 1 or proc < -1:
            return None
        try:
            if proc == -1:
                return await self._service.cluster_ad(self._identity, cluster)
            return await self._service.get(self._identity, JobId(cluster, proc))
        except JobNotFound:
            return None

    async def _send_ad(self, ad: ClassAd | None) -> None:
        if ad is None:
            await self._fail(errno.ENOENT)
            return
        await self._call.send(self._call.writer().int(0).lines(split_lines(_public(ad))))

    async def _fail(self, code: int) -> None:
        await self._call.send(self._call.writer().int(-1).int(code))

    async def _get_attribute(self, number: int, r: Reader) -> None:
        """GetAttributeFloat/Int/String/Expr: the job's attribute, evaluated to that
        type (Expr: its expression as text)."""
        cluster = r.int("the cluster")
        proc = r.int("the proc")
        name = r.text("the attribute's name")
        r.done("GetAttribute")
        if name.lower() in _PRIVATE or name.lower().startswith("_condor_priv"):
            await self._fail(errno.EACCES)
            return
        ad = await self._job_ad(cluster, proc)
        if ad is None or name not in ad:
            await self._fail(errno.ENOENT if ad is None else errno.EINVAL)
            return
        w = self._call.writer()
        if not _put_value(w.int(0), number, ad, name):
            await self._fail(errno.EINVAL)
            return
        await self._call.send(w)


def _put_value(w: Writer, number: int, ad: ClassAd, name: str) -> bool:
    """Write the attribute as the call wants it; False when it is not of that type."""
    if number == GET_ATTRIBUTE_EXPR:
        w.string(str(ad.lookup(name)))
        return True
    try:
        value = ad.eval(name)
    except HTGridError:
        return False
    if number == GET_ATTRIBUTE_STRING:
        if not isinstance(value, str):
            return False
        w.string(value)
    elif number == GET_ATTRIBUTE_INT:
        if not isinstance(value, int | float):
            return False
        w.int(int(value))
    else:
        if not isinstance(value, int | float) or not math.isfinite(value):
            return False
        mantissa, exponent = math.frexp(float(value))
        w.int(int(mantissa * _FRACTION)).int(exponent)
    return True
