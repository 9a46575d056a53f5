"""What the pages show, gathered as the caller: jobs (theirs alone unless they are an
administrator), a job's events and output files (read with its owner's rights), the
pool's slots, grid resources, routes, and the counts the charts draw.

Nothing here decides who someone is: the identity comes from the API's authenticator
(`htgrid.web.app`); this module only narrows what that identity is shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from htgrid._privsep import OwnerPolicy, PrivilegeError, as_owner
from htgrid.classad import ClassAd, quote
from htgrid.collector import CollectorClient
from htgrid.errors import HTGridError
from htgrid.eventlog import EventLogReader, LoggedEvent
from htgrid.grid import resource_name
from htgrid.queue import Identity, JobId, JobNotFound, JobStatus

__all__ = [
    "LIST_ATTRS",
    "JobSource",
    "OutputFile",
    "ResourceSummary",
    "Sources",
    "find_job",
    "job_events",
    "job_outputs",
    "mine",
    "resources",
    "running_by_site",
    "site_of",
    "state_counts",
    "state_series",
    "throughput",
]

#: The attributes the job lists, charts and summaries read (not whole ads).
LIST_ATTRS: Final = (
    "ClusterId",
    "ProcId",
    "Owner",
    "JobStatus",
    "QDate",
    "Cmd",
    "Args",
    "Arguments",
    "JobUniverse",
    "GridResource",
    "GridJobStatus",
    "HoldReason",
    "HoldReasonCode",
    "JobStartDate",
    "JobCurrentStartDate",
    "EnteredCurrentStatus",
    "CompletionDate",
    "RemoteHost",
    "LastRemoteHost",
    "GridResourceUnavailableTime",
    "LastRemoteStatusUpdate",
    "RouteName",
    "RoutedBy",
    "RoutedFromJobId",
    "RoutedToJobId",
    "JobBatchName",
    "GridJobSubmitTime",
)
MAX_LOG_BYTES: Final = 16 << 20  # a user log read for one job's timeline
MAX_SHOWN_BYTES: Final = 64 << 10  # the tail of an output file shown
MAX_SHOWN_FILES: Final = 20  # output files shown on a job's page, at most
SLOT_CACHE: Final = 2.0  # seconds the collector's answer is reused for


class JobSource(Protocol):
    """The queue's reads, as `htgrid.schedd`'s QueueService serves the API."""

    async def query(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> list[ClassAd]: ...

    async def history(
        self,
        identity: Identity,
        constraint: str | None,
        projection: Sequence[str] | None,
        limit: int | None,
    ) -> list[ClassAd]: ...

    async def get(self, identity: Identity, job_id: JobId) -> ClassAd: ...

    async def summary(
        self, identity: Identity, constraint: str | None
    ) -> tuple[list[Any], dict[str, dict[int, int]], list[Any]]: ...


@dataclass
class _AdCache:
    at: float = -1e9
    ads: list[ClassAd] = field(default_factory=list)
    error: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True)
class Sources:
    """Where the pages' data comes from, handed over by the daemon that serves them."""

    jobs: JobSource
    home: Path  # the pool's ($HTGRID_HOME): its routes, its tokens for the collector
    collector: Callable[[], str | None]  # host:port of the pool's collector, if it has one
    policy: OwnerPolicy = field(default_factory=OwnerPolicy)
    clock: Callable[[], float] = time.time
    _cached: dict[str, _AdCache] = field(default_factory=dict, compare=False, repr=False)

    async def slots(self) -> tuple[list[ClassAd], str | None]:
        """The pool's slot ads (condor_status: anyone may read them), and why not."""
        return await self._collector_ads("Machine")

    async def grid_ads(self) -> tuple[list[ClassAd], str | None]:
        """The grid manager's resource ads (condor_status -grid), and why not."""
        return await self._collector_ads("Grid")

    async def annex_ads(self) -> tuple[list[ClassAd], str | None]:
        """The annexes' ads (condor_status -annex), and why not."""
        return await self._collector_ads("Annex")

    async def _collector_ads(self, ad_type: str) -> tuple[list[ClassAd], str | None]:
        cache = self._cached.setdefault(ad_type, _AdCache())
        async with cache.lock:
            now = time.monotonic()
            if now - cache.at < SLOT_CACHE:
                return cache.ads, cache.error
            pool = self.collector()
            if not pool:
                cache.ads, cache.error = [], "this pool runs no collector (DAEMON_LIST)"
            else:
                try:
                    async with CollectorClient(
                        pool, timeout=5.0, home=self.home, daemon=True
                    ) as client:
                        cache.ads, cache.error = await client.query(ad_type), None
                except HTGridError as exc:
                    cache.ads, cache.error = [], f"the collector at {pool} did not answer: {exc}"
            cache.at = now
            return cache.ads, cache.error


def mine(identity: Identity, constraint: str | None = None) -> str | None:
    """`constraint` narrowed to the caller's jobs, unless the caller is an administrator."""
    if identity.admin:
        return constraint
    own = f"Owner == {quote(identity.name)}"
    return own if not constraint else f"({own}) && ({constraint})"


async def state_counts(src: Sources, identity: Identity) -> dict[str, int]:
    """The caller's queued jobs (everyone's for an administrator) counted by state, from
    the queue's totals: no ad is read."""
    # No batch wanted: a constraint the queue answers in SQL alone, matching nothing.
    _, owners, _ = await src.jobs.summary(identity, "ClusterId < 0")
    counts: Counter[str] = Counter()
    for owner, by_status in owners.items():
        if identity.admin or owner == identity.name:
            for status, n in by_status.items():
                counts[status_label(status)] += n
    return dict(sorted(counts.items()))


def visible(identity: Identity, ad: ClassAd) -> bool:
    """Whether the caller may see the job of `ad`."""
    return identity.admin or ad.get("Owner") == identity.name


async def find_job(src: Sources, identity: Identity, job_id: JobId) -> tuple[ClassAd, bool]:
    """The job's ad and whether it is still queued (else from the history);
    JobNotFound also for another user's job, which a user is not shown."""
    try:
        ad = await src.jobs.get(identity, job_id)
        queued = True
    except JobNotFound:
        where = f"ClusterId == {job_id.cluster} && ProcId == {job_id.proc}"
        found = await src.jobs.history(identity, where, None, 1)
        if not found:
            raise
        ad, queued = found[0], False
    if not visible(identity, ad):
        raise JobNotFound(f"job {job_id} is not one of {identity.name}'s jobs")
    return ad, queued


def _text(ad: ClassAd, name: str) -> str | None:
    value = ad.get(name)
    return value if isinstance(value, str) and value else None


def _number(ad: ClassAd, name: str) -> float | None:
    value = ad.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _owner_path(ad: ClassAd, name: str) -> Path | None:
    value = _text(ad, name)
    if value is None or value == "/dev/null":
        return None
    path = Path(value)
    if not path.is_absolute():
        iwd = _text(ad, "Iwd")
        if iwd is None:
            return None
        path = Path(iwd) / path
    return path


def transferred_outputs(ad: ClassAd) -> list[tuple[str, Path]]:
    """The files transfer_output_files names (TransferOutput) and where they land: in the
    job's Iwd under their base name, or where TransferOutputRemaps sends them."""
    names = [n.strip() for n in (_text(ad, "TransferOutput") or "").split(",") if n.strip()]
    iwd = _text(ad, "Iwd")
    if not names or iwd is None:
        return []
    remaps: dict[str, str] = {}
    for pair in (_text(ad, "TransferOutputRemaps") or "").split(";"):
        source, sep, target = pair.partition("=")
        if sep and source.strip():
            remaps[source.strip()] = target.strip()
    found = []
    for name in names:
        target = remaps.get(name, Path(name.rstrip("/")).name)
        if not target:
            continue
        path = Path(target)
        found.append((name, path if path.is_absolute() else Path(iwd) / path))
    return found


def _read_as_owner(src: Sources, ad: ClassAd, read: Callable[[], Any]) -> Any:
    """`read()` in this thread with the job owner's file rights (the daemon's own when
    it runs as that user): the pages show only what the owner could read."""
    account = src.policy.account(ad.get("Owner"))
    with as_owner(account):
        return read()


async def job_events(src: Sources, ad: ClassAd) -> tuple[list[LoggedEvent], str | None]:
    """The job's events from its user log (`log = ...`), and why none when none."""
    path = _owner_path(ad, "UserLog")
    if path is None:
        return [], "the job has no user log (submit it with log = FILE for a timeline)"
    job = JobId(int(ad.get("ClusterId", 0)), int(ad.get("ProcId", 0)))

    def read() -> list[LoggedEvent]:
        if os.stat(path).st_size > MAX_LOG_BYTES:
            raise OSError(f"over {MAX_LOG_BYTES >> 20} MiB: too large to show here")
        return EventLogReader(path).read()

    try:
        events = await asyncio.to_thread(_read_as_owner, src, ad, read)
    except (OSError, PrivilegeError) as exc:
        return [], f"cannot read the user log {path}: {getattr(exc, 'strerror', None) or exc}"
    return [
        e
        for e in events
        if e.job_id == job or (e.job_id.cluster == job.cluster and e.job_id.proc < 0)
    ], None


@dataclass(frozen=True, slots=True)
class OutputFile:
    """One of the job's output files: its name in the ad, where it is, its tail."""

    label: str  # Out, Err
    path: str
    size: int | None  # None: not there (yet)
    text: str
    cut: bool  # only the last MAX_SHOWN_BYTES are shown


async def job_outputs(src: Sources, ad: ClassAd) -> list[OutputFile]:
    """The job's standard output and error, and the output files it transfers back
    (transfer_output_files), as its owner can read them."""

    def read_one(label: str, path: Path) -> OutputFile:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - MAX_SHOWN_BYTES))
                data = f.read(MAX_SHOWN_BYTES)
        except OSError as exc:
            return OutputFile(label, str(path), None, exc.strerror or str(exc), False)
        return OutputFile(
            label, str(path), size, data.decode("utf-8", "replace"), size > MAX_SHOWN_BYTES
        )

    def read() -> list[OutputFile]:
        found = []
        for label in ("Out", "Err"):
            path = _owner_path(ad, label)
            if path is not None:
                found.append(read_one(label, path))
        for name, path in transferred_outputs(ad)[:MAX_SHOWN_FILES]:
            if path.is_dir():
                found.append(OutputFile(f"File {name}", str(path), None, "a directory", False))
                continue
            got = read_one(f"File {name}", path)
            if got.size is not None and "\0" in got.text:
                got = dataclasses.replace(got, text="(binary: not shown)")
            found.append(got)
        return found

    try:
        files: list[OutputFile] = await asyncio.to_thread(_read_as_owner, src, ad, read)
    except PrivilegeError as exc:
        return [OutputFile("Out", "", None, str(exc), False)]
    return files


# ---- the charts' numbers ---------------------------------------------------------------

_SHOWN_STATES: Final = ("Idle", "Running", "Held")


def _spans(ad: ClassAd, now: float) -> list[tuple[str, float, float]]:
    """(state, from, to) of one job, from the times its ad keeps: QDate, the start of its
    current run, EnteredCurrentStatus, CompletionDate."""
    qdate = _number(ad, "QDate")
    if qdate is None:
        return []
    status = ad.get("JobStatus")
    entered = _number(ad, "EnteredCurrentStatus") or qdate
    started = _number(ad, "JobCurrentStartDate") or _number(ad, "JobStartDate")
    if status == JobStatus.IDLE:
        return [("Idle", qdate, now)]
    if status in (JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT, JobStatus.SUSPENDED):
        start = started or entered
        return [("Idle", qdate, start), ("Running", start, now)]
    end = now
    if status == JobStatus.HELD:
        spans = [("Held", entered, now)]
        end = entered
    else:  # completed or removed: gone from the shown states at its end
        spans = []
        completion = _number(ad, "CompletionDate")
        end = completion if completion else entered
    if started and qdate <= started <= end:
        return [("Idle", qdate, started), ("Running", started, end), *spans]
    return [("Idle", qdate, end), *spans]


def state_series(
    ads: Iterable[ClassAd], start: float, now: float
) -> dict[str, list[tuple[float, int]]]:
    """Jobs idle, running and held over [start, now] as steps (time, count)."""
    changes: dict[str, list[tuple[float, int]]] = {s: [] for s in _SHOWN_STATES}
    for ad in ads:
        for state, begin, end in _spans(ad, now):
            if end <= begin and end < now:
                continue
            changes[state].append((begin, +1))
            if end < now:
                changes[state].append((end, -1))
    series: dict[str, list[tuple[float, int]]] = {}
    for state, deltas in changes.items():
        deltas.sort()
        count = 0
        points: list[tuple[float, int]] = []
        for t, delta in deltas:
            count += delta
            at = max(t, start)
            if points and points[-1][0] == at:
                points[-1] = (at, count)
            else:
                points.append((at, count))
        series[state] = points
    return series


def site_of(ad: ClassAd) -> str:
    """Where a job runs (or ran): its grid resource, its execute node, or the schedd."""
    resource = _text(ad, "GridResource")
    if resource:
        return resource
    if ad.get("JobUniverse") == 12:
        return "local universe"
    host = _text(ad, "RemoteHost") or _text(ad, "LastRemoteHost")
    if host:
        return host.rsplit("@", 1)[-1]
    return "unknown"


def running_by_site(ads: Iterable[ClassAd]) -> list[tuple[str, float]]:
    """Running jobs counted by site, most first."""
    counts = Counter(site_of(ad) for ad in ads if ad.get("JobStatus") == JobStatus.RUNNING)
    return [(site, float(n)) for site, n in counts.most_common(20)]


def throughput(ads: Iterable[ClassAd], start: float, now: float) -> list[tuple[str, float]]:
    """Jobs completed per hour over [start, now], by site, most first."""
    hours = max(now - start, 60.0) / 3600
    counts: Counter[str] = Counter()
    for ad in ads:
        done = _number(ad, "CompletionDate")
        if ad.get("JobStatus") == JobStatus.COMPLETED and done and start <= done <= now:
            counts[site_of(ad)] += 1
    return [(site, round(n / hours, 2)) for site, n in counts.most_common(20)]


@dataclass(frozen=True, slots=True)
class ResourceSummary:
    """One grid resource as its jobs' ads tell it."""

    name: str
    states: dict[str, int]
    down_since: float | None  # GridResourceUnavailableTime: the grid manager marked it down
    last_update: float | None  # the newest LastRemoteStatusUpdate: its last status poll
    holds: dict[str, int]  # HoldReason -> jobs
    last_poll: tuple[float, float] | None = None  # (when, seconds): from its Grid ad


def with_polls(
    found: Sequence[ResourceSummary], grid_ads: Iterable[ClassAd]
) -> list[ResourceSummary]:
    """`found` with each resource's last poll time and duration from its Grid ad."""
    polls: dict[str, tuple[float, float]] = {}
    for ad in grid_ads:
        name = ad.get("Name")
        when, took = _number(ad, "LastStatusPoll"), _number(ad, "LastStatusPollDuration")
        if not isinstance(name, str) or when is None or took is None:
            continue
        if name not in polls or polls[name][0] < when:
            polls[name] = (when, took)
    return [
        dataclasses.replace(r, last_poll=polls[key])
        if (key := resource_name(r.name) or r.name) in polls
        else r
        for r in found
    ]


def resources(ads: Iterable[ClassAd]) -> list[ResourceSummary]:
    """The grid resources of the grid universe jobs in `ads`, by name."""
    grouped: dict[str, list[ClassAd]] = defaultdict(list)
    for ad in ads:
        resource = _text(ad, "GridResource")
        if resource and ad.get("JobUniverse") == 9:
            grouped[resource].append(ad)
    found = []
    for name in sorted(grouped):
        jobs = grouped[name]
        states: Counter[str] = Counter()
        holds: Counter[str] = Counter()
        down: list[float] = []
        updates: list[float] = []
        for ad in jobs:
            states[status_label(ad.get("JobStatus"))] += 1
            if ad.get("JobStatus") == JobStatus.HELD:
                holds[_text(ad, "HoldReason") or "no reason recorded"] += 1
            with contextlib.suppress(TypeError):
                if (t := _number(ad, "GridResourceUnavailableTime")) is not None:
                    down.append(t)
            if (t := _number(ad, "LastRemoteStatusUpdate")) is not None:
                updates.append(t)
        found.append(
            ResourceSummary(
                name,
                dict(states),
                min(down) if down else None,
                max(updates) if updates else None,
                dict(holds.most_common()),
            )
        )
    return found


def status_label(status: object) -> str:
    """The state's name as condor_q's totals say it."""
    try:
        return {
            JobStatus.TRANSFERRING_OUTPUT: "Transferring Output",
        }.get(JobStatus(status), JobStatus(status).name.title())  # type: ignore[arg-type]
    except ValueError:
        return f"Status {status}"
