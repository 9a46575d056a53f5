"""What one step of a job ad's build read and wrote (for `_plan`).

A build is watched once per queue statement: every macro name its steps look up, every
attribute they read or write, and the builder's own state (the iwd, the executable's
size) are noted per step. `_plan` then knows which steps can give another proc another
result, and replays only those.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from htgrid.submit._ad import JobAd, Value

__all__ = [
    "EXE",
    "IWD",
    "KEYS",
    "RANDOM",
    "RecordingAd",
    "StepTrace",
    "TracedAd",
]

#: Pseudo names of what a step reads besides macros and attributes.
IWD: Final = "%iwd"  # the job's iwd (full paths, file sizes, $Fp() and friends)
EXE: Final = "%exe"  # the executable's size, as one step leaves it for the next
KEYS: Final = "*"  # which attributes the ad has (a step went through all of them)
RANDOM: Final = "$random"  # a $RANDOM_*() draw: another value for each proc


@dataclass(slots=True)
class StepTrace:
    """One step: the macros it looked up (lower case, with RANDOM and IWD), the
    attributes and state it read, and what it wrote (lower-case name -> (name, value))."""

    macros: set[str] = field(default_factory=set)
    reads: set[str] = field(default_factory=set)
    writes: dict[str, tuple[str, Value]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class TracedAd(JobAd):
    """A JobAd noting each read and write in the trace of the step running."""

    __slots__ = ("trace",)

    def __init__(self) -> None:
        super().__init__()
        self.trace = StepTrace()

    def __setitem__(self, name: str, value: Value) -> None:
        super().__setitem__(name, value)
        self.trace.writes[name.lower()] = (name, value)

    def __delitem__(self, name: str) -> None:
        raise NotImplementedError("a traced build deletes no attribute")

    def __getitem__(self, name: str) -> Value:
        self.trace.reads.add(name.lower())
        return super().__getitem__(name)

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.trace.reads.add(name.lower())
        return super().__contains__(name)

    def get(self, name: str) -> Value | None:
        self.trace.reads.add(name.lower())
        return super().get(name)

    def __iter__(self) -> Iterator[str]:
        self.trace.reads.add(KEYS)
        return super().__iter__()

    def __len__(self) -> int:
        self.trace.reads.add(KEYS)
        return super().__len__()

    def items(self) -> Iterator[tuple[str, Value]]:
        self.trace.reads.add(KEYS)
        self.trace.reads.update(name.lower() for name in super().__iter__())
        return super().items()


class RecordingAd(JobAd):
    """A JobAd noting the names written (lower case), for a step replayed for a proc."""

    __slots__ = ("written",)

    def __init__(self) -> None:
        super().__init__()
        self.written: set[str] = set()

    def __setitem__(self, name: str, value: Value) -> None:
        super().__setitem__(name, value)
        self.written.add(name.lower())

    def __delitem__(self, name: str) -> None:
        raise NotImplementedError("a replayed step deletes no attribute")
