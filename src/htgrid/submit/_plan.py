"""Per-proc work only for what varies: which steps of a build a proc must run again.

condor_submit sends a cluster ad and, for each proc, the attributes that differ from it.
Here the build of one proc of a queue statement is watched (`_trace`): for each step,
the macros it looked up, the attributes and builder state it read, what it wrote. A step
varies from proc to proc when it looked up a proc's own macro ($(Process), $(Step),
$(Row), $(ItemIndex), $(Node), the queue's variables), drew a $RANDOM_*(), or read what
a varying step before it wrote. The rest give every proc what they gave the watched one.

`ProcPlan.replay` then builds a proc by running only the varying steps, from the ad as
the first of them found it, with the writes of the steps between them put back where
they were made. Whether a step ran for a proc or not, the result is the ad the whole
build gives (`SubmitDescription.jobs` is held to it by the tests): a step whose path
depends on a proc's value is found varying by that value's lookup, whatever the path.

One thing the watched build cannot tell is what a varying step writes for another proc
when it writes other attributes there (an `if` on the proc's value). The replay checks
that each varying step wrote the same names: when it did not, `replay` gives up (None)
and the caller builds that proc whole.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from htgrid.submit._ad import JobAd, Value
from htgrid.submit._jobad import UNIVERSE_STEP, JobBuilder, Step
from htgrid.submit._trace import EXE, IWD, KEYS, RANDOM, RecordingAd, StepTrace

__all__ = ["PROC_MACROS", "ProcPlan", "diff"]

#: The macros that hold each proc's own values (with the queue statement's variables).
PROC_MACROS: Final = frozenset({"process", "procid", "step", "row", "itemindex", "node"})
_STATE: Final = frozenset({IWD, EXE})

Entry = tuple[str, Value]


@dataclass(frozen=True, slots=True)
class _Replay:
    """One varying step, and what the steps after it (up to the next varying one) do."""

    index: int  # in JobBuilder.steps()
    wrote: frozenset[str]  # the names it wrote for the watched proc
    then: tuple[tuple[str, Entry], ...]  # the later steps' writes the replay needs
    warnings: tuple[str, ...]  # what those steps warned of


@dataclass(frozen=True, slots=True)
class ProcPlan:
    """How the procs of a queue statement after the watched one are built."""

    base: JobAd  # the ad as the first varying step found it
    state: tuple[str, int]  # the builder's iwd and executable size then
    warnings: tuple[str, ...]  # what the steps before it warned of
    replays: tuple[_Replay, ...]
    #: A proc's own attributes, in the order the whole build makes them: each either
    #: the same for every proc (an entry) or one a varying step writes (None: compared).
    own: tuple[tuple[str, Entry | None], ...]
    draws: bool  # a varying step draws random numbers

    @classmethod
    def watch(
        cls,
        traces: Sequence[StepTrace],
        names: Sequence[str],
        first: JobAd,
        built: JobAd,
        proc_macros: frozenset[str],
    ) -> ProcPlan | None:
        """The plan from the watched build: its `traces` (of the steps `names`), the ad
        it started from (`first`, proc 0's) and the one it made; None when the universe
        varies (every step reads it)."""
        varying_steps: list[int] = []
        changed: set[str] = set()  # what varying steps wrote (names and state)
        present = {key for key, _ in first.entries()}
        new_keys = False  # a varying step added an attribute the ad did not have
        for index, trace in enumerate(traces):
            reads = trace.reads | (trace.macros & _STATE)
            varies = (
                not proc_macros.isdisjoint(trace.macros)
                or RANDOM in trace.macros
                or not changed.isdisjoint(reads)
                or (KEYS in reads and new_keys)
            )
            if varies:
                if names[index] == UNIVERSE_STEP:
                    return None
                varying_steps.append(index)
                changed.update(trace.writes)
                new_keys = new_keys or not present.issuperset(trace.writes.keys() - _STATE)
            present.update(trace.writes)
        base = JobAd()
        base.copy_from(first)
        state = ("", 0)
        warnings: list[str] = []
        start = varying_steps[0] if varying_steps else len(traces)
        for trace in traces[:start]:
            state = _apply(base, trace.writes, state)
            warnings.extend(trace.warnings)
        replays = tuple(
            _replay(traces, varying_steps, at, changed) for at in range(len(varying_steps))
        )
        own: list[tuple[str, Entry | None]] = []
        for key, entry in built.entries():
            if key in changed:
                own.append((key, None))
            elif key != "procid" and _differs(entry, first.entry(key)):
                own.append((key, entry))
        randoms = any(RANDOM in traces[index].macros for index in varying_steps)
        return cls(base, state, tuple(warnings), replays, tuple(own), randoms)

    def replay(
        self, builder: JobBuilder, steps: Sequence[Step], first: JobAd
    ) -> tuple[JobAd, tuple[str, ...]] | None:
        """What `builder.proc` has of its own (against `first`, proc 0's ad), and its
        warnings; None when a varying step wrote other names than for the watched proc
        (an `if` on the proc's value): the caller then builds the proc whole.

        `steps` is `builder.steps()` (made once: the builder is reused proc after proc);
        the builder's expander holds the proc's macros."""
        ad = RecordingAd()
        ad.copy_from(self.base)
        builder.ad = ad
        builder.warnings = list(self.warnings)
        builder.iwd, builder.exe_size_kb = self.state
        builder.x.cwd = self.state[0]
        for replay in self.replays:
            ad.written.clear()
            steps[replay.index][1]()
            if ad.written != replay.wrote:
                return None
            for key, (name, value) in replay.then:
                if key == IWD:
                    builder.set_iwd(str(value))
                elif key == EXE:
                    assert isinstance(value, int)
                    builder.set_exe_size(value)
                else:
                    ad[name] = value
            builder.warnings.extend(replay.warnings)
        own = JobAd()
        for key, fixed in self.own:
            entry = fixed or ad.entry(key)
            if entry is not None and (fixed or _differs(entry, first.entry(key))):
                own[entry[0]] = entry[1]
        return own, tuple(builder.warnings)

    def rng_state(self, rng: random.Random) -> object | None:
        """What to restore `rng` to before building a proc whole after a replay that
        gave up (the replay drew what the build will draw again)."""
        return rng.getstate() if self.draws else None


def diff(built: JobAd, first: JobAd) -> JobAd:
    """What a whole-built proc has of its own against `first` (proc 0's ad): ProcId and
    the attributes whose values differ."""
    own = JobAd()
    for key, entry in built.entries():
        if key != "procid" and _differs(entry, first.entry(key)):
            own[entry[0]] = entry[1]
    return own


def _differs(entry: Entry, other: Entry | None) -> bool:
    # A value compares with its type: 1, 1.0 and true are different values.
    return other is None or type(other[1]) is not type(entry[1]) or other[1] != entry[1]


def _apply(ad: JobAd, writes: dict[str, Entry], state: tuple[str, int]) -> tuple[str, int]:
    """Make the writes of a step in `ad`; the builder's state after them."""
    iwd, exe = state
    for key, (name, value) in writes.items():
        if key == IWD:
            iwd = str(value)
        elif key == EXE:
            assert isinstance(value, int)
            exe = value
        else:
            ad[name] = value
    return iwd, exe


def _replay(
    traces: Sequence[StepTrace], varying: Sequence[int], at: int, changed: set[str]
) -> _Replay:
    """The replay of varying step number `at`: what follows it up to the next one."""
    index = varying[at]
    end = varying[at + 1] if at + 1 < len(varying) else len(traces)
    later = [traces[i] for i in varying[at + 1 :]]
    needed = set(changed)  # the final values of what varies are compared
    for trace in later:
        needed |= trace.reads | (trace.macros & _STATE)
    everything = KEYS in needed
    then: dict[str, Entry] = {}
    warnings: list[str] = []
    for trace in traces[index + 1 : end]:
        then.update(
            (key, entry) for key, entry in trace.writes.items() if everything or key in needed
        )
        warnings.extend(trace.warnings)
    return _Replay(
        index,
        frozenset(traces[index].writes.keys() - _STATE),
        tuple(then.items()),
        tuple(warnings),
    )
