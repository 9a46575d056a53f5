"""User priorities, as HTCondor's accountant keeps them (what condor_userprio shows).

A submitter's real user priority (RUP) is a smoothed count of the slots it used: over an
interval `dt` with `u` slots in use it moves to `beta * RUP + (1 - beta) * u`, where
`beta = 0.5 ** (dt / PRIORITY_HALFLIFE)`, and never goes below 0.5. Its effective
priority (EUP) is RUP times its priority factor (DEFAULT_PRIO_FACTOR, 1000). A lower EUP
is better: the negotiator gives each submitter a share of the pool in proportion to
1 / EUP. Time is passed in, never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

__all__ = [
    "DEFAULT_HALFLIFE",
    "DEFAULT_PRIO_FACTOR",
    "MIN_PRIORITY",
    "PriorityTable",
    "UserPriority",
]

MIN_PRIORITY = 0.5  # every submitter starts here, and none gets better
DEFAULT_PRIO_FACTOR = 1000.0  # DEFAULT_PRIO_FACTOR
DEFAULT_HALFLIFE = 86400.0  # PRIORITY_HALFLIFE, one day


@dataclass(frozen=True, slots=True)
class UserPriority:
    """One submitter's record in the accountant."""

    real: float = MIN_PRIORITY
    factor: float = DEFAULT_PRIO_FACTOR
    # Slots (weighted: cores by default) in use when last updated.
    resources_in_use: float = 0.0
    # Slot-seconds used over the submitter's life, weighted as resources_in_use.
    accumulated_usage: float = 0.0
    last_update: float | None = None

    @property
    def effective(self) -> float:
        """The effective user priority (EUP): RUP times the priority factor."""
        return self.real * self.factor


@dataclass(frozen=True, slots=True)
class PriorityTable:
    """Every submitter's priority, and how priorities age."""

    users: Mapping[str, UserPriority] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )
    halflife: float = DEFAULT_HALFLIFE
    default_factor: float = DEFAULT_PRIO_FACTOR

    def __getitem__(self, user: str) -> UserPriority:
        """The submitter's record (a new submitter's, if unknown)."""
        found = self.users.get(user)
        return found if found is not None else UserPriority(factor=self.default_factor)

    def effective(self, user: str) -> float:
        """The submitter's effective priority (lower is better)."""
        return self[user].effective

    def advanced(self, now: float, in_use: Mapping[str, float]) -> PriorityTable:
        """The table at `now`: the usage since each last update ages into the RUPs.

        The slots a submitter had in use at its last update count for the whole interval
        (matches change them in between, as the accountant's AddMatch does); `in_use`
        becomes the usage from now on.
        """
        users: dict[str, UserPriority] = {}
        for user in {*self.users, *in_use}:
            record = self[user]
            if record.last_update is not None and now > record.last_update:
                dt = now - record.last_update
                beta = 0.5 ** (dt / self.halflife) if self.halflife > 0 else 0.0
                used = record.resources_in_use
                record = replace(
                    record,
                    real=max(MIN_PRIORITY, beta * record.real + (1.0 - beta) * used),
                    accumulated_usage=record.accumulated_usage + used * dt,
                )
            users[user] = replace(
                record, resources_in_use=float(in_use.get(user, 0.0)), last_update=now
            )
        return replace(self, users=MappingProxyType(users))

    def with_factor(self, user: str, factor: float) -> PriorityTable:
        """The table with `user`'s priority factor set (condor_userprio -setfactor)."""
        users = dict(self.users)
        users[user] = replace(self[user], factor=factor)
        return replace(self, users=MappingProxyType(users))

    def with_usage_added(self, usage: Mapping[str, float], now: float) -> PriorityTable:
        """The table with matches made at `now` counted as in use (the accountant's
        AddMatch); a submitter new to the table is accounted from `now`."""
        users = dict(self.users)
        for user, extra in usage.items():
            record = self[user]
            users[user] = replace(
                record,
                resources_in_use=record.resources_in_use + extra,
                last_update=now if record.last_update is None else record.last_update,
            )
        return replace(self, users=MappingProxyType(users))
