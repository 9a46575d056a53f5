"""The procs of one cluster as condor_submit sends them: the cluster ad once, then what
each proc has of its own, made one at a time (a cluster of a million procs is never in
memory at once).

Proc 0 is built whole: its ad is the cluster's. Every later proc starts from it (HTCondor
chains procs 1..N to proc 0's ad), and of each queue statement, the first such proc is
built whole and watched; the others replay only the steps that vary (`_plan`).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from htgrid.submit._ad import JobAd
from htgrid.submit._config import SubmitConfig
from htgrid.submit._errors import SubmitError
from htgrid.submit._jobad import JobBuilder, Step, Universe
from htgrid.submit._lines import QueueStep
from htgrid.submit._macros import Expander
from htgrid.submit._plan import PROC_MACROS, ProcPlan, diff
from htgrid.submit._queue import ForEach, QueueArgs, iterate_procs
from htgrid.submit._trace import StepTrace, TracedAd

__all__ = ["ClusterContext", "ClusterProcs", "ProcAd", "Statement"]


@dataclass(frozen=True, slots=True)
class ProcAd:
    """One proc: its id, the attributes it has of its own (a ClassAd: what differs from
    the cluster ad; ProcId is not among them), and what its build warned of."""

    proc_id: int
    own: Any
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Statement:
    """A queue statement ready to make procs: its expander, arguments and items."""

    step: QueueStep
    expander: Expander
    qargs: QueueArgs
    items: Sequence[str]

    @property
    def count(self) -> int:
        """How many procs it makes."""
        if self.qargs.mode is ForEach.NOT:
            return self.qargs.count
        size = len(self.items)
        rows = sum(
            1
            for row in range(size)
            if self.qargs.slice is None or self.qargs.slice.selected(row, size)
        )
        return rows * self.qargs.count


@dataclass(frozen=True, slots=True)
class ClusterContext:
    """What every build of the cluster shares."""

    cluster: int
    owner: str
    qdate: int
    cwd: str
    env: Mapping[str, str]
    config: SubmitConfig
    check_files: bool
    rng: random.Random
    replay: bool = True  # False: every proc is built whole (the plan's reference)

    def builder(self, expander: Expander, proc: int, ad: JobAd | None = None) -> JobBuilder:
        return JobBuilder(
            expander,
            self.config,
            self.cluster,
            proc,
            self.qdate,
            self.cwd,
            self.owner,
            Universe(),
            self.env,
            check_files=self.check_files,
            ad=ad if ad is not None else JobAd(),
        )


class ClusterProcs:
    """The procs of one cluster, in order; iterate once.

    Proc 0 is built when this is made, so that a description that fails for it fails
    before anything is sent; later procs are built as they are asked for.
    """

    def __init__(self, statements: list[Statement], context: ClusterContext) -> None:
        self.cluster_id = context.cluster
        self.count = sum(statement.count for statement in statements)
        self._context = context
        self._statements = statements
        self._first: JobAd | None = None
        self._first_ad: Any = None  # proc 0's ad as a ClassAd
        #: Proc 0's ad without ProcId (None when the queue statements make no proc).
        self.cluster_ad: Any = None
        self._procs = self._generate()
        self._head = next(self._procs, None)  # proc 0, which sets the two
        self._started = False

    def __iter__(self) -> Iterator[ProcAd]:
        if self._started:
            raise RuntimeError("the procs of a cluster can be gone through once")
        self._started = True
        head, self._head = self._head, None
        if head is not None:
            yield head
            yield from self._procs

    @property
    def item_step(self) -> int | None:
        """The procs each item makes (the queue statement's count), when the cluster is
        one queue statement over items; None otherwise."""
        if len(self._statements) != 1 or self._statements[0].qargs.mode is ForEach.NOT:
            return None
        return self._statements[0].qargs.count

    def param(self, name: str) -> str | None:
        """The expanded value of a submit command as its first queue statement has it
        (one the job ad does not hold, such as `max_materialize`); None if unset."""
        return self._statements[0].expander.param(name) if self._statements else None

    def whole(self, proc: ProcAd) -> Any:
        """The whole job ad of `proc` (the cluster ad overlaid by its own attributes)."""
        ad = copy.copy(self._first_ad)
        ad.update(proc.own)
        ad["ProcId"] = proc.proc_id
        return ad

    def _generate(self) -> Iterator[ProcAd]:
        ctx = self._context
        proc = 0
        for statement in self._statements:
            maker = _StatementProcs(statement, ctx)
            for slot in iterate_procs(statement.qargs, statement.items):
                try:
                    if maker.constant is not None:
                        own, warnings = copy.copy(maker.constant), maker.warnings
                    else:
                        live = {
                            "process": str(proc),
                            "procid": str(proc),
                            "step": str(slot.step),
                            "row": str(slot.row),
                            "itemindex": str(slot.row),
                        }
                        statement.expander.set_live(live)
                        for name, value in slot.values:
                            statement.expander.macros.set(name, value)
                        if self._first is None:
                            self._first, warnings = maker.build_first()
                            self._first_ad = self._first.to_classad()
                            self.cluster_ad = copy.copy(self._first_ad)
                            del self.cluster_ad["ProcId"]
                            own = None
                        else:
                            own, warnings = maker.build(proc, self._first)
                except SubmitError as exc:
                    raise exc.at(statement.step.path, statement.step.line) from None
                yield ProcAd(proc, own if own is not None else _empty(), warnings)
                proc += 1


def _empty() -> Any:
    from htgrid.submit._classad import classad_module

    return classad_module().ClassAd()


class _StatementProcs:
    """Builds the procs of one queue statement after proc 0: the first whole and
    watched, the others by the plan (or whole, when there is none)."""

    def __init__(self, statement: Statement, context: ClusterContext) -> None:
        self._statement = statement
        self._ctx = context
        self._proc_macros = PROC_MACROS | {n.lower() for n in statement.qargs.loop_variables}
        self._plan: ProcPlan | None = None
        self._watched: JobBuilder | None = None
        self._steps: list[Step] = []
        #: When no step varies: what every proc has of its own (a ClassAd), its warnings.
        self.constant: Any = None
        self.warnings: tuple[str, ...] = ()

    def build_first(self) -> tuple[JobAd, tuple[str, ...]]:
        """Proc 0, from nothing: its ad is the cluster's."""
        builder = self._ctx.builder(self._statement.expander, 0)
        ad = builder.build()
        _check_nul(ad, self._ctx.cluster, 0)
        return ad, tuple(builder.warnings)

    def build(self, proc: int, first: JobAd) -> tuple[Any, tuple[str, ...]]:
        """A later proc: its own attributes (a ClassAd) and warnings."""
        if not self._ctx.replay:
            own, warnings = self._whole(proc, first)
        elif self._watched is None:
            own, warnings = self._watch(proc, first)
        else:
            result = None
            if self._plan is not None:
                saved = self._plan.rng_state(self._ctx.rng)
                self._watched.proc = proc
                result = self._plan.replay(self._watched, self._steps, first)
                if result is None and saved is not None:
                    self._ctx.rng.setstate(saved)  # type: ignore[arg-type]
            if result is None:
                own, warnings = self._whole(proc, first)
            else:
                own, warnings = result
        _check_nul(own, self._ctx.cluster, proc)
        return own.to_classad(), warnings

    def _whole(self, proc: int, first: JobAd) -> tuple[JobAd, tuple[str, ...]]:
        ad = JobAd()
        ad.copy_from(first)
        builder = self._ctx.builder(self._statement.expander, proc, ad)
        return diff(builder.build(), first), tuple(builder.warnings)

    def _watch(self, proc: int, first: JobAd) -> tuple[JobAd, tuple[str, ...]]:
        """Build `proc` whole, noting what each step reads and writes; make the plan."""
        ad = TracedAd()
        ad.copy_from(first)
        builder = self._ctx.builder(self._statement.expander, proc, ad)
        self._steps = builder.steps()
        traces: list[StepTrace] = []
        try:
            for _name, step in self._steps:
                trace = StepTrace()
                ad.trace = builder.trace = trace
                builder.x.trace = trace.macros
                done = len(builder.warnings)
                step()
                trace.warnings = builder.warnings[done:]
                traces.append(trace)
        finally:
            builder.trace = builder.x.trace = None
        ad.trace = StepTrace()
        ad["ProcId"] = proc
        self._watched = builder
        names = [name for name, _ in self._steps]
        self._plan = ProcPlan.watch(traces, names, first, ad, self._proc_macros)
        self._statement.expander.remember(self._proc_macros)
        if self._plan is not None and not self._plan.replays:
            own = JobAd()
            for _key, entry in self._plan.own:
                assert entry is not None  # what nothing replayed writes is the same
                own[entry[0]] = entry[1]
            _check_nul(own, self._ctx.cluster, proc)
            self.constant = own.to_classad()
            self.warnings = self._plan.warnings
        return diff(ad, first), tuple(builder.warnings)


def _check_nul(ad: JobAd, cluster: int, proc: int) -> None:
    bad = ad.nul_attribute()
    if bad is not None:  # from queue items or a command's output
        raise SubmitError(
            f"job {cluster}.{proc}: {bad} holds a NUL character, which no job ad can hold"
        )
