"""The schedd's commands over CEDAR: what `htcondor2.Schedd` sends, on the queue's service.

- QUERY_JOB_ADS (`query`, `xquery`): a request ad (Requirements, Projection as a
  newline-separated string, LimitResults); each job ad its own message, then an ad with
  `Owner = 0` (and the summary counts). READ.
- QUERY_SCHEDD_HISTORY (`history`): Requirements, Projection (a list), NumJobMatches; all
  ads and the closing ad (`Owner = 0`, `NumJobMatches` = how many) in one message. READ.
- ACT_ON_JOBS (`act`): ActionIds or ActionConstraint and JobAction; the action is tried
  (rolled back) and answered with the counts `htcondor2` reads (result_total_0..6,
  TotalJobAds, ActionResult); it is done only on the client's go-ahead, then an `int 1`.
  WRITE; the queue checks who owns what, as over HTTPS.
- QMGMT_WRITE_CMD (`submit`, `edit`): the queue-management calls (`_qmgmt`). WRITE.
- QMGMT_READ_CMD: the same connection, read-only (`_qmgmt_read`'s calls; the others
  refused). READ.
- QUERY_SCHEDD_ADS (`Collector.directQuery` of the schedd): its own ad. READ.
- RESCHEDULE: a negotiation cycle soon. WRITE.
- SPOOL_JOB_FILES*, TRANSFER_DATA* (`spool`, `retrieve`): refused, saying why, where
  the file transfer protocol carries a reason (`_cedar_files`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import HTGridError
from htgrid.net import Jobs
from htgrid.net.cedar import (
    CedarCall,
    CedarSecurity,
    CedarService,
    Command,
    Literal,
    parse_ad,
    split_lines,
)
from htgrid.queue import JobAction, JobId, JobNotFound, NotAuthorized
from htgrid.schedd._cedar_files import file_commands
from htgrid.schedd._qmgmt import QmgmtSession
from htgrid.schedd._service import QueueService

__all__ = ["schedd_cedar"]

_log = logging.getLogger("htgrid.schedd")

RESCHEDULE: Final = 421
ACT_ON_JOBS: Final = 478
QUERY_SCHEDD_HISTORY: Final = 515
QUERY_JOB_ADS: Final = 516
QUERY_JOB_ADS_WITH_AUTH: Final = 519
QMGMT_READ_CMD: Final = 1111
QMGMT_WRITE_CMD: Final = 1112
QUERY_SCHEDD_ADS: Final = 6

# htcondor2.JobAction's numbers (condor_utils/enum_utils.h) that the queue carries out.
_ACTIONS: Final = {
    1: JobAction.Hold,
    2: JobAction.Release,
    3: JobAction.Remove,
    4: JobAction.RemoveX,
}
_REASONS: Final = {
    JobAction.Hold: "HoldReason",
    JobAction.Release: "ReleaseReason",
    JobAction.Remove: "RemoveReason",
    JobAction.RemoveX: "RemoveReason",
}
# The summary's counts of jobs by status, named as the schedd's (JobStatus codes).
_STATUS_NAMES: Final = {
    1: "Idle",
    2: "Running",
    3: "Removed",
    4: "Completed",
    5: "Held",
    6: "TransferringOutput",
    7: "Suspended",
}
# result_total_<n>: error, success, not found, bad status, already done, permission denied
_ERROR, _SUCCESS, _NOT_FOUND, _BAD_STATUS, _DENIED = 0, 1, 2, 3, 5
_GO_AHEAD_TIMEOUT: Final = 10.0  # seconds, as HTCondor's schedd waits for it


def _text_of(query: ClassAd, name: str) -> str | None:
    """An attribute's expression as text (None when absent or `true`)."""
    if name not in query:
        return None
    text = str(query.lookup(name))
    return None if text.strip("() ").lower() == "true" else text


def _names(value: object, separators: str) -> list[str] | None:
    if isinstance(value, str):
        for sep in separators:
            value = value.replace(sep, " ")
        names = value.split()
    elif isinstance(value, list):
        names = [v for v in value if isinstance(v, str)]
    else:
        return None
    return names or None


def _limit(value: object) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None  # type: ignore[return-value]


async def _read_ad(call: CedarCall, what: str) -> ClassAd:
    r = await call.receive()
    ad = parse_ad(r.lines(what=what), what)
    r.done(what)
    return ad


def _query_jobs(service: QueueService) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        query = await _read_ad(call, "the job query")
        constraint = _text_of(query, "Requirements")
        projection = _names(query.get("Projection"), "\n,")
        limit = _limit(query.get("LimitResults"))
        stamp = query.get("SendServerTime") is True
        summary_only = query.get("SummaryOnly") is True
        identity = call.principal.identity()
        counts = dict.fromkeys(_STATUS_NAMES.values(), 0)
        found = 0
        wanted = ["JobStatus"] if summary_only else projection
        try:
            async for page in service.query_pages(identity, constraint, wanted, limit):
                now = int(time.time())
                for ad in page:
                    found += 1
                    name = _STATUS_NAMES.get(ad.get("JobStatus"))  # type: ignore[arg-type]
                    if name is not None:
                        counts[name] += 1
                    if summary_only:
                        continue  # the client takes the summary alone (and asserts so)
                    if stamp:
                        ad["ServerTime"] = now
                    await call.send(call.writer().lines(split_lines(ad)))
        except HTGridError as exc:
            await call.send_ad({"Owner": 0, "ErrorCode": 1, "ErrorString": str(exc)})
            return
        summary: dict[str, Literal] = {"Owner": 0, "MyType": "Summary", "JobsFound": found}
        if summary_only:
            summary.update(counts)
        await call.send_ad(summary)

    return handle


def _history(service: QueueService) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        query = await _read_ad(call, "the history query")
        constraint = _text_of(query, "Requirements")
        projection = _names(query.get("Projection"), ",")
        limit = _limit(query.get("NumJobMatches"))
        w = call.writer()
        try:
            ads = await service.history(call.principal.identity(), constraint, projection, limit)
        except HTGridError as exc:
            await call.send_ad({"Owner": 0, "ErrorCode": 1, "ErrorString": str(exc)})
            return
        for ad in ads:
            w.lines(split_lines(ad))
        w.lines(split_lines(ClassAd({"Owner": 0, "NumJobMatches": len(ads), "MalformedAds": 0})))
        await call.send(w)

    return handle


@dataclass(frozen=True, slots=True)
class _ActRequest:
    """What an ACT_ON_JOBS request asks: the action (None: one htgrid does not do), the
    jobs, how many it names (0 for a constraint), the reason given."""

    number: object
    action: JobAction | None
    jobs: Jobs | None  # None: an empty list of ids
    named: int
    reason: str | None


def _act_request(request: ClassAd) -> _ActRequest:
    number = request.get("JobAction")
    action = _ACTIONS.get(number) if isinstance(number, int) else None
    ids_text = request.get("ActionIds")
    jobs: Jobs | None
    if isinstance(ids_text, str):
        try:
            ids = [JobId.parse(i.strip()) for i in ids_text.split(",") if i.strip()]
        except (HTGridError, ValueError):
            ids = []
        jobs, named = (Jobs.of(tuple(ids)) if ids else None), len(ids)
    else:
        jobs, named = Jobs.matching(_text_of(request, "ActionConstraint") or "true"), 0
    reason_attr = _REASONS.get(action) if action is not None else None
    reason = request.get(reason_attr) if reason_attr else None
    return _ActRequest(number, action, jobs, named, reason if isinstance(reason, str) else None)


async def _act_counts(
    service: QueueService, call: CedarCall, act: _ActRequest
) -> tuple[dict[int, int], int, bool]:
    """A trial of the action: its counts by result, the jobs' total, whether it may go on."""
    counts = dict.fromkeys(range(7), 0)
    total = act.named
    if act.action is None:
        _log.warning(
            "CEDAR act from %s: JobAction %r is not one htgrid does", call.peer, act.number
        )
        counts[_ERROR] = total
        return counts, total, False
    if act.jobs is None:
        return counts, total, False
    try:
        done = await service.act(
            call.principal.identity(), act.action, act.jobs, act.reason, trial=True
        )
    except JobNotFound as exc:
        counts[_NOT_FOUND] = max(total, 1)
        _log.info("CEDAR act from %s: %s", call.peer, exc)
    except NotAuthorized as exc:
        counts[_DENIED] = max(total, 1)
        _log.info("CEDAR act from %s: %s", call.peer, exc)
    except HTGridError as exc:
        counts[_BAD_STATUS] = max(total, 1)
        _log.info("CEDAR act from %s: %s", call.peer, exc)
    else:
        counts[_SUCCESS] = len(done)
        counts[_BAD_STATUS] = max(0, total - len(done))
        return counts, max(total, len(done)), True
    return counts, total, False


async def _factories(service: QueueService, call: CedarCall, jobs: Jobs) -> list[int]:
    """The late materialization factories a constraint acts on with their jobs: those
    whose cluster ad it matches (`ClusterId == 12` removes cluster 12's factory, so that
    it makes no more jobs), as HTCondor's schedd does."""
    if jobs.constraint is None:
        return []
    try:
        return await service.factories_matching(call.principal.identity(), jobs.constraint)
    except HTGridError as exc:
        _log.info("CEDAR act from %s: no factory acted on: %s", call.peer, exc)
        return []


def _act(service: QueueService) -> Callable[[CedarCall], Awaitable[None]]:
    """As HTCondor's schedd: the action is tried, its counts answered, and it is done only
    once the client says it is still there (a client gone before that changes nothing)."""

    async def handle(call: CedarCall) -> None:
        act = _act_request(await _read_ad(call, "the action request"))
        counts, total, ok = await _act_counts(service, call, act)
        result = {f"result_total_{n}": c for n, c in counts.items()}
        result.update(TotalJobAds=total, ActionResult=1 if ok else 0, ActionResultType=2)
        await call.send_ad(result)
        if not ok or act.action is None or act.jobs is None:
            return
        try:
            r = await call.receive(_GO_AHEAD_TIMEOUT)
            answer = r.int("the client's go-ahead")
            r.done("the go-ahead")
        except BaseException:
            _log.info(
                "CEDAR act from %s: no go-ahead from the client; its jobs are left as they were",
                call.peer,
            )
            raise
        if answer != 1:
            _log.info("CEDAR act from %s: the client called it off (%d)", call.peer, answer)
            return
        identity = call.principal.identity()
        try:
            for cluster in await _factories(service, call, act.jobs):
                await service.act(identity, act.action, Jobs.in_cluster(cluster), act.reason)
            await service.act(identity, act.action, act.jobs, act.reason)
        except HTGridError as exc:  # the queue changed since the trial
            _log.info("CEDAR act from %s: %s", call.peer, exc)
            await call.send(call.writer().int(0))
            return
        await call.send(call.writer().int(1))

    return handle


def _qmgmt(
    service: QueueService, domain: str, *, read_only: bool
) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        await QmgmtSession(service, call, domain, read_only=read_only).run()

    return handle


def _own_ad(ad: Callable[[], ClassAd | None]) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        query = await _read_ad(call, "the query ad")
        w = call.writer()
        mine = ad()
        if mine is not None and (
            "Requirements" not in query or ExprTree(str(query.lookup("Requirements"))).eval(mine)
        ):
            w.int(1).lines(split_lines(mine))
        await call.send(w.int(0))

    return handle


def _reschedule(reschedule: Callable[[], None]) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        del call  # no payload, no answer
        reschedule()

    return handle


def schedd_cedar(
    service: QueueService,
    security: CedarSecurity,
    *,
    domain: str,
    own_ad: Callable[[], ClassAd | None],
    reschedule: Callable[[], None],
) -> CedarService:
    """The schedd's CEDAR service over `service`; `domain` completes a user's name
    (User = user@domain) in the jobs it queues."""
    commands: Sequence[Command] = (
        Command(QUERY_JOB_ADS, "QUERY_JOB_ADS", "READ", _query_jobs(service)),
        Command(QUERY_JOB_ADS_WITH_AUTH, "QUERY_JOB_ADS_WITH_AUTH", "READ", _query_jobs(service)),
        Command(QUERY_SCHEDD_HISTORY, "QUERY_SCHEDD_HISTORY", "READ", _history(service)),
        Command(QUERY_SCHEDD_ADS, "QUERY_SCHEDD_ADS", "READ", _own_ad(own_ad)),
        Command(ACT_ON_JOBS, "ACT_ON_JOBS", "WRITE", _act(service)),
        Command(QMGMT_READ_CMD, "QMGMT_READ_CMD", "READ", _qmgmt(service, domain, read_only=True)),
        Command(
            QMGMT_WRITE_CMD, "QMGMT_WRITE_CMD", "WRITE", _qmgmt(service, domain, read_only=False)
        ),
        Command(RESCHEDULE, "RESCHEDULE", "WRITE", _reschedule(reschedule), payload=False),
        *file_commands(service),
    )
    return CedarService("schedd", commands, security)
