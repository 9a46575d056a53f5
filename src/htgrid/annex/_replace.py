"""Capacity the cloud took back: an annex's instances the cloud ended before the lease
(a spot interruption, a host's failure) are replaced while the lease lives, so the annex
keeps what was asked for, as a spot fleet of type "maintain" would. The fleets are of
type "request" all the same: an instance that shut itself down (idle, or at the lease's
end) is not replaced, and that is how the annex shrinks when its work is done.

Which is which is the instance's StateReason: `Server.*` codes are the cloud's doing
(Server.SpotInstanceTermination, Server.InternalError, Server.ScheduledStop...);
`Client.InstanceInitiatedShutdown` is the node's own shutdown and
`Client.UserInitiatedShutdown` someone's TerminateInstances (the lease function,
`annex shutdown`, the user at the console): none of those is replaced.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from htgrid.annex._spec import CloudAnnex, Instance

__all__ = ["Lost", "interrupted", "lost"]

_ENDED = frozenset({"shutting-down", "terminated"})


def interrupted(annex: CloudAnnex) -> list[Instance]:
    """The annex's instances the cloud ended (replaced or not)."""
    return [i for i in annex.instances if i.state in _ENDED and i.reason.startswith("Server.")]


@dataclass(frozen=True, slots=True)
class Lost:
    """What to request again: spot-fleet capacity (in weights) or on-demand instances,
    and the instances it replaces."""

    slots: int
    count: int
    replaces: tuple[str, ...]


def lost(annex: CloudAnnex, batch: int) -> list[Lost]:
    """The annex's capacity the cloud ended and nothing has replaced yet, in requests of
    at most `batch` instances each."""
    weights = _weights(annex.settings.get("instance_types", ()))
    gone = [i for i in interrupted(annex) if i.instance_id not in annex.replaced]
    spot = [i for i in gone if i.lifecycle == "spot"]
    demand = [i for i in gone if i.lifecycle != "spot"]
    out: list[Lost] = []
    for start in range(0, len(spot), batch):
        part = spot[start : start + batch]
        slots = math.ceil(sum(weights.get(i.instance_type, 1.0) for i in part))
        out.append(Lost(max(1, slots), 0, tuple(i.instance_id for i in part)))
    for start in range(0, len(demand), batch):
        part = demand[start : start + batch]
        out.append(Lost(0, len(part), tuple(i.instance_id for i in part)))
    return out


def _weights(types: Sequence[str] | object) -> dict[str, float]:
    """Instance type -> its weight, from --instance-types ("m5.large:2")."""
    out: dict[str, float] = {}
    for entry in types if isinstance(types, list | tuple) else ():
        kind, _, weight = str(entry).partition(":")
        try:
            out[kind] = float(weight or 1)
        except ValueError:
            out[kind] = 1.0
    return out
