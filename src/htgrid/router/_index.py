"""What the router remembers between passes so that a pass reads only the pairs that
changed (`read_pairs`, for `htgrid.router._pairs`): which routed jobs are whose, the sources it manages,
each pair's contribution to its route's counts, and the queue's change-feed position
the last pass read up to.

It is a cache, never the truth: a restarted router starts empty and its first pass reads
every routed job and managed source, as a pass does after a reconfig, when the feed
lost changes it had not read (trimmed), while hooks that run at every pass are
configured, and every `READ_ALL_EVERY` seconds in any case.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from htgrid.classad import ClassAd, quote
from htgrid.queue import Change, ChangeKind, JobId, JobQueue, JobStatus, QueueError, feed_gap

__all__ = [
    "READ_ALL_EVERY",
    "Candidates",
    "PairIndex",
    "job_id_of",
    "read_pairs",
    "source_of",
]

#: Seconds between passes over every pair when nothing else calls for one: a safety net.
READ_ALL_EVERY: Final = 300.0

#: Hooks a pass runs for every pair, changed or not: with one configured, each pass reads
#: every pair.
_EVERY_PASS_HOOKS: Final = ("_HOOK_UPDATE_JOB_INFO", "_HOOK_JOB_FINALIZE")


def hooks_every_pass(knobs: Mapping[str, str]) -> bool:
    return any(k.upper().endswith(_EVERY_PASS_HOOKS) and v.strip() for k, v in knobs.items())


@dataclass(frozen=True)
class Touched:
    """The jobs the feed says changed since the last pass, and those that left."""

    changed: frozenset[JobId]
    left: frozenset[JobId]


@dataclass
class PairIndex:
    """The pairs as the last pass left them."""

    seq: int = 0  # the feed's last change the last pass had read (0: read every pair)
    full_at: float = float("-inf")  # when a pass last read every pair
    source_of: dict[JobId, JobId] = field(default_factory=dict)  # routed job -> source
    dests_of: dict[JobId, set[JobId]] = field(default_factory=dict)  # source -> routed jobs
    managed: set[JobId] = field(default_factory=set)  # sources this router manages
    #: The pairs counted on their routes (`RouteCounts`): routed job -> (route, status).
    counted: dict[JobId, tuple[str, JobStatus]] = field(default_factory=dict)
    #: Sources whose pair a pass failed on: looked at again by the next one.
    retry: set[JobId] = field(default_factory=set)

    def clear(self) -> None:
        self.source_of.clear()
        self.dests_of.clear()
        self.managed.clear()
        self.counted.clear()
        self.retry.clear()

    def link(self, dest: JobId, source: JobId) -> None:
        old = self.source_of.get(dest)
        if old is not None and old != source:
            self.unlink(dest)
        self.source_of[dest] = source
        self.dests_of.setdefault(source, set()).add(dest)

    def unlink(self, dest: JobId) -> None:
        source = self.source_of.pop(dest, None)
        self.counted.pop(dest, None)
        if source is not None:
            dests = self.dests_of.get(source)
            if dests is not None:
                dests.discard(dest)
                if not dests:
                    del self.dests_of[source]

    def affected(self, touched: Touched, sources: Iterable[JobId]) -> set[JobId]:
        """The sources whose pairs a pass must look at: `sources` (of the routed jobs and
        managed sources that changed, read from the queue), those of every changed or
        departed job the index knows, and those a pass failed on."""
        out = set(sources) | self.retry
        for job in touched.changed | touched.left:
            if job in self.dests_of or job in self.managed:
                out.add(job)
            source = self.source_of.get(job)
            if source is not None:
                out.add(source)
        return out


def touched_by(changes: Iterable[Change]) -> Touched:
    changed: set[JobId] = set()
    left: set[JobId] = set()
    for change in changes:
        ids = change.job_ids
        changed.update(ids)
        if change.kind is ChangeKind.LEFT_QUEUE:
            left.update(ids)
    return Touched(frozenset(changed), frozenset(left))


@dataclass
class Candidates:
    """The jobs to route as the last pass left them: a pass reads those that changed
    since it and, by id, those it did not route (`waiting`: their route full, none
    matching, a hook running), rather than every idle job of the queue, which has the
    claimed sources and the routed copies too (20,000 ads a pass at 10,000 jobs). Every
    candidate is read at start-up, after a reconfig and every `READ_ALL_EVERY`."""

    seq: int = 0
    full_at: float = float("-inf")
    waiting: set[JobId] = field(default_factory=set)

    def read(self, queue: JobQueue, constraint: str, now: float) -> list[ClassAd]:
        """The candidates, in job-id order; `waiting` their ids (the router takes off
        those it routes)."""
        top = queue.last_seq
        if self.seq and now - self.full_at < READ_ALL_EVERY:
            # A waiting job that changed no longer matches, or is in the changed ones.
            found = queue.get_many(sorted(self.waiting), constraint)
            found.update(
                (job_id_of(ad), ad) for ad in queue.query(constraint, changed_after=self.seq)
            )
            ads = [found[k] for k in sorted(found)]
        else:
            ads = queue.query(constraint)
            self.full_at = now
        self.seq = top
        self.waiting = {job_id_of(ad) for ad in ads}
        return ads


def read_pairs(
    queue: JobQueue, idx: PairIndex, name: str, now: float, knobs: Mapping[str, str]
) -> tuple[list[ClassAd], dict[JobId, ClassAd], int]:
    """What a pass keeps in step: the routed jobs of router `name` and the sources it
    manages, all of them when reading every pair is due (the index cleared for the pass to
    fill again), else those of the pairs that changed since the last pass; and the
    feed's last change before they were read, for the pass to record as `idx.seq`."""
    top = queue.last_seq
    touched = None
    if idx.seq and now - idx.full_at < READ_ALL_EVERY and not hooks_every_pass(knobs):
        changes = queue.changes_since(idx.seq)
        if not feed_gap(changes, idx.seq, top):
            touched = touched_by(changes)
    after = None if touched is None else idx.seq
    quoted = quote(name)
    routed = queue.query(
        f"RoutedBy == {quoted} && RoutedFromJobId isnt undefined", changed_after=after
    )
    managed = {
        job_id_of(ad): ad
        for ad in queue.query(
            f'Managed == "External" && ManagedManager == {quoted}', changed_after=after
        )
    }
    if touched is None:
        idx.clear()
        idx.full_at = now
        return routed, managed, top
    return routed, _changed_pairs(queue, idx, name, routed, managed, touched), top


def _changed_pairs(
    queue: JobQueue,
    idx: PairIndex,
    name: str,
    routed: list[ClassAd],
    managed: dict[JobId, ClassAd],
    touched: Touched,
) -> dict[JobId, ClassAd]:
    """`routed` (the routed jobs that changed) completed with the other routed jobs of
    their sources and of the changed sources, read again; the managed sources among
    those (`managed`: the managed sources that changed)."""
    affected = idx.affected(
        touched, {s for s in map(source_of, routed) if s is not None} | set(managed)
    )
    idx.retry.clear()
    have = {job_id_of(ad) for ad in routed}
    # Read again: the routed jobs of those sources that did not change (one that did and
    # is not in `routed` is no longer a routed job of this router), and the sources that
    # did not (one that did and is not in `managed` is no longer managed).
    dests: list[JobId] = []
    sources: list[JobId] = []
    for source_id in affected:
        for dest_id in list(idx.dests_of.get(source_id, ())):
            idx.unlink(dest_id)  # linked again by the pass if it still is
            if dest_id not in have and dest_id not in touched.changed:
                dests.append(dest_id)
        if source_id not in managed and source_id not in touched.changed:
            sources.append(source_id)
        idx.managed.discard(source_id)
    found = queue.get_many(dests + sources)
    lower = name.lower()
    for dest_id in dests:
        dest = found.get(dest_id)
        if dest is not None and str(dest.get("RoutedBy", "")).lower() == lower:
            routed.append(dest)
    out: dict[JobId, ClassAd] = {}
    for source_id in affected:
        source = managed.get(source_id) or found.get(source_id)
        if source is not None and _managed_by(source, lower):
            out[source_id] = source
    return out


def job_id_of(ad: ClassAd) -> JobId:
    return JobId(int(ad["ClusterId"]), int(ad["ProcId"]))


def source_of(dest: ClassAd) -> JobId | None:
    """The source a routed job names (RoutedFromJobId), None if it names none."""
    try:
        return JobId.parse(str(dest.get("RoutedFromJobId")))
    except (ValueError, QueueError):
        return None


def _managed_by(source: ClassAd, name: str) -> bool:
    """`Managed == "External" && ManagedManager == name` (`name` lower-case), as the
    query of every pair reads it (ClassAd string comparison ignores case)."""
    return (
        str(source.get("Managed", "")).lower() == "external"
        and str(source.get("ManagedManager", "")).lower() == name
    )
