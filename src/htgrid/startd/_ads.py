"""The slot ads the execute node advertises: the partitionable slot and its dynamic slots.

Attribute names and meanings are the condor_startd's, so `htgrid status`, the
negotiator and users' Requirements read them as they would HTCondor's: the
partitionable slot offers what is free (`Cpus`, `Memory` in MB, `Disk` in KB, `GPUs`),
each dynamic slot what its claim holds, with `RemoteUser`, `RemoteOwner` and `JobId`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from copy import copy
from dataclasses import dataclass
from typing import Final

from htgrid import __version__
from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.adjson import json_members
from htgrid.startd._claims import Claim, Slots
from htgrid.startd._config import StartdConfig
from htgrid.startd._machine import MachineInfo
from htgrid.startd._policy_knobs import publish_policy
from htgrid.startd._states import SLOT_OF, Resources, SlotState
from htgrid.startd._wire import TLS_CERTIFICATE

__all__ = [
    "CONDOR_PLATFORM",
    "CONDOR_VERSION",
    "TLS_CERTIFICATE",
    "SlotMembers",
    "dynamic_ad",
    "partitionable_ad",
    "slot_members",
    "slot_state",
]

# As `htgrid submit` writes them: a job's Requirements may compare versions.
CONDOR_VERSION: Final = f"$CondorVersion: 24.0.24 2026-09-24 BuildID: htgrid {__version__} $"
CONDOR_PLATFORM: Final = "$CondorPlatform: X86_64-htgrid $"
_VANILLA_ONLY: Final = "(TARGET.JobUniverse =?= undefined || TARGET.JobUniverse == 5)"
# condor_startd's WithinResourceLimits for a partitionable slot.
_WITHIN_LIMITS: Final = ExprTree(
    "MY.Cpus > 0 && TARGET.RequestCpus <= MY.Cpus && TARGET.RequestMemory <= MY.Memory"
    " && TARGET.RequestDisk <= MY.Disk"
    " && (TARGET.RequestGPUs =?= undefined || TARGET.RequestGPUs <= MY.GPUs)"
)
# The starter runs vanilla jobs only: a grid job waiting for a site must not land here.
_PSLOT_REQUIREMENTS: Final = ExprTree(f"START && WithinResourceLimits && {_VANILLA_ONLY}")
_START: Final = ExprTree("START")
_SLOT_WEIGHT: Final = ExprTree("Cpus")
_PSLOT_EXPRS: Final = (
    ("WithinResourceLimits", _WITHIN_LIMITS),
    ("Requirements", _PSLOT_REQUIREMENTS),
)
_DSLOT_EXPRS: Final = (("Requirements", _START),)
# The fixed attributes that name a slot's ad in the collector, with its Name.
_NAMES: Final = ("mytype", "machine", "myaddress")

#: A slot's own attributes, Name first, as plain values (ints, strings, bools).
Pairs = tuple[tuple[str, object], ...]


@dataclass(eq=False, slots=True)
class _Own:
    """A slot's own attributes as last made: their values, the ad, its JSON members."""

    pairs: Pairs
    ad: ClassAd
    members: dict[str, str] | None = None


class AdContext:
    """What every ad of one startd shares (fixed at start-up).

    A node advertises every slot several times a second while short jobs come and go:
    the attributes that stay put (most of an ad, the TLS certificate among them) are
    made once, as an ad and as JSON members, and each update adds only the others."""

    def __init__(
        self, config: StartdConfig, machine: MachineInfo, address: str, started: int
    ) -> None:
        self.config = config
        self.machine = machine
        self.address = address
        self.started = started
        self.sequence = 0
        self.certificate: str | None = None  # a node on its own: its TLS certificate (PEM)
        # The static ad, made again should what it is made of change (the address and
        # certificate are set once the TLS API serves; a reconfig brings a new config).
        self._static: tuple[tuple[object, ...], ClassAd, dict[str, str]] | None = None
        # Each slot's own attributes as last made (by Name): the values, the ad, and its
        # members once asked for (an activation's slot ad, for the job, needs none).
        self._own: dict[str, _Own] = {}

    @property
    def config(self) -> StartdConfig:
        return self._config

    @config.setter
    def config(self, config: StartdConfig) -> None:
        self._config = config
        self.start = ExprTree(config.start)

    def static(self) -> tuple[ClassAd, dict[str, str]]:
        """The attributes every slot ad has and no update changes, and their members."""
        key = (self._config, self.address, self.certificate, self.started)
        if self._static is None or self._static[0] != key:
            ad = self._fixed()
            self._static = (key, ad, json_members(ad))
        return self._static[1], self._static[2]

    def _fixed(self) -> ClassAd:
        m, c = self.machine, self.config
        ad = ClassAd()
        ad["MyType"] = "Machine"
        ad["TargetType"] = "Job"
        ad["Machine"] = m.hostname
        ad["Arch"] = m.arch
        ad["OpSys"] = m.opsys
        ad["OpSysAndVer"] = m.opsys_and_ver
        ad["OpSysName"] = m.opsys_name
        ad["OpSysShortName"] = m.opsys_name
        ad["OpSysMajorVer"] = m.opsys_major_ver
        ad["OpSysVer"] = m.opsys_ver
        ad["OpSysLongName"] = m.opsys_long_name
        ad["FileSystemDomain"] = c.filesystem_domain
        ad["UidDomain"] = c.uid_domain
        ad["HasFileTransfer"] = True
        ad["HasPerFileEncryption"] = False
        ad["HasJobTransferPlugins"] = False
        ad["CondorVersion"] = CONDOR_VERSION
        ad["CondorPlatform"] = CONDOR_PLATFORM
        ad["MyAddress"] = self.address
        ad["StartdIpAddr"] = self.address
        ad["DaemonStartTime"] = self.started
        if self.certificate is not None:
            # What a schedd pins when it calls the node over TLS (see htgrid.startd._api).
            ad[TLS_CERTIFICATE] = self.certificate
        ad["UpdateInterval"] = int(c.update_interval)  # gone after three missed updates
        ad["DetectedCpus"] = m.detected.cpus
        ad["DetectedMemory"] = m.detected.memory
        ad["DetectedGPUs"] = ",".join(m.detected.gpus) if m.detected.gpus else 0
        ad["TotalCpus"] = m.offered.cpus
        ad["TotalMemory"] = m.offered.memory
        ad["TotalDisk"] = m.offered.disk
        ad["TotalGPUs"] = len(m.offered.gpus)
        ad["TotalSlots"] = 1
        ad["Start"] = self.start
        ad["Rank"] = 0.0
        ad["CurrentRank"] = 0.0
        ad["SlotWeight"] = _SLOT_WEIGHT
        if m.gpus:
            ad["GPUs_DeviceName"] = m.gpus[0].name
            ad["GPUs_GlobalMemoryMb"] = m.gpus[0].memory_mb
        publish_policy(ad, c.policy)
        for name, text in c.attrs:
            ad[name] = ExprTree(text)
        return ad

    def varying(self, now: float) -> ClassAd:
        """What changes between updates: the sequence, the time, the load."""
        ad = ClassAd()
        ad["UpdateSequenceNumber"] = self.sequence
        ad["MyCurrentTime"] = int(now)
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
        ad["TotalLoadAvg"] = round(load, 3)
        ad["LoadAvg"] = round(load / max(1, self.machine.detected.cpus), 3)
        return ad

    def own(
        self, pairs: Pairs, exprs: tuple[tuple[str, ExprTree], ...]
    ) -> tuple[ClassAd, dict[str, str]]:
        """A slot's own attributes (`pairs`, then the constant `exprs`) as an ad and as
        members: made again only when a value changed since the last time."""
        kept = self._kept(pairs, exprs)
        if kept.members is None:
            kept.members = json_members(kept.ad)
        return kept.ad, kept.members

    def own_ad(self, pairs: Pairs, exprs: tuple[tuple[str, ExprTree], ...]) -> ClassAd:
        """`own`'s ad alone."""
        return self._kept(pairs, exprs).ad

    def _kept(self, pairs: Pairs, exprs: tuple[tuple[str, ExprTree], ...]) -> _Own:
        name = str(pairs[0][1])
        known = self._own.get(name)
        if known is not None and known.pairs == pairs:
            return known
        ad = ClassAd()
        for key, value in pairs:
            ad[key] = value
        for key, expr in exprs:
            ad[key] = expr
        kept = self._own[name] = _Own(pairs, ad)
        return kept

    def forget_others(self, names: set[str]) -> None:
        """Drop what `own` kept of slots not in `names` (released claims)."""
        for name in [n for n in self._own if n not in names]:
            del self._own[name]

    def common(self, now: float) -> ClassAd:
        """The attributes every slot ad has, as of `now`."""
        ad = copy(self.static()[0])
        ad.update(self.varying(now))
        return ad


def _resource_pairs(have: Resources) -> Pairs:
    pairs: Pairs = (
        ("Cpus", have.cpus),
        ("Memory", have.memory),
        ("Disk", have.disk),
        ("GPUs", len(have.gpus)),
    )
    return (*pairs, ("AssignedGPUs", ",".join(have.gpus))) if have.gpus else pairs


def slot_state(ctx: AdContext, slots: Slots) -> SlotState:
    """Owner when START is false on its own (no job could match), else as the books say."""
    if slots.state is SlotState.DRAINED:
        return SlotState.DRAINED
    start = ctx.start.eval(ctx.common(0.0))
    return SlotState.OWNER if start is False else SlotState.UNCLAIMED


def partitionable_ad(ctx: AdContext, slots: Slots, now: float) -> ClassAd:
    """The partitionable slot's ad: what is free, and its dynamic slots' summary."""
    ad = ctx.common(now)
    ad.update(ctx.own_ad(_partitionable_pairs(slots), _PSLOT_EXPRS))
    return ad


def _partitionable_pairs(slots: Slots) -> Pairs:
    offered = slots.offered
    return (
        ("Name", slots.name),
        ("SlotID", 1),
        ("SlotType", "Partitionable"),
        ("PartitionableSlot", True),
        *_resource_pairs(slots.free),
        ("TotalSlotCpus", offered.cpus),
        ("TotalSlotMemory", offered.memory),
        ("TotalSlotDisk", offered.disk),
        ("TotalSlotGPUs", len(offered.gpus)),
        ("NumDynamicSlots", len(slots.claims)),
        ("State", slots.state.value),
        ("Activity", "Retiring" if slots.state is SlotState.DRAINED else "Idle"),
        ("EnteredCurrentState", int(slots.entered)),
        ("EnteredCurrentActivity", int(slots.entered)),
    )


def dynamic_ad(ctx: AdContext, slots: Slots, claim: Claim, now: float) -> ClassAd:
    """A dynamic slot's ad: its claim's resources, state and job."""
    ad = ctx.common(now)
    ad.update(ctx.own_ad(_dynamic_pairs(slots, claim), _DSLOT_EXPRS))
    return ad


def _dynamic_pairs(slots: Slots, claim: Claim) -> Pairs:
    have = claim.resources
    state, activity = SLOT_OF[claim.state]
    pairs: list[tuple[str, object]] = [
        ("Name", claim.name),
        ("SlotID", 1),
        ("DSlotId", claim.slot_id),
        ("SlotType", "Dynamic"),
        ("DynamicSlot", True),
        ("ParentSlotName", slots.name),
        *_resource_pairs(have),
        ("TotalSlotCpus", have.cpus),
        ("TotalSlotMemory", have.memory),
        ("TotalSlotDisk", have.disk),
        ("TotalSlotGPUs", len(have.gpus)),
        ("State", state),
        ("Activity", activity),
        ("EnteredCurrentState", int(claim.state_entered)),
        ("EnteredCurrentActivity", int(claim.entered)),
    ]
    job = claim.job_ad
    for attr, remote in (("User", "RemoteUser"), ("Owner", "RemoteOwner")):
        value = job.get(attr)
        if isinstance(value, str):
            pairs.append((remote, value))
    if claim.job_id is not None:
        pairs.append(("JobId", str(claim.job_id)))
    pairs.append(("ClientMachine", claim.schedd))
    pairs.append(("RemoteScheddName", claim.schedd))
    if claim.job_start is not None:
        pairs.append(("JobStart", int(claim.job_start)))
    return tuple(pairs)


@dataclass(frozen=True, slots=True)
class SlotMembers:
    """One slot's ad as JSON members, in its three parts: the fixed part every slot
    shares, the slot's own attributes and what every update changes. The first two are
    the same objects from update to update while nothing in them changes (`same`)."""

    name: str
    static: Mapping[str, str]
    own: Mapping[str, str]
    varying: Mapping[str, str]

    def whole(self) -> dict[str, str]:
        """The members of the whole ad."""
        return {**self.static, **self.varying, **self.own}

    def refresh(self) -> dict[str, str]:
        """What the collector needs to keep the ad it has of this slot, unchanged but
        for what every update changes (`AdStore.refresh`): that, and the ad's names."""
        names = {k: self.static[k] for k in _NAMES if k in self.static}
        return {**names, "name": self.own["name"], **self.varying}

    def same(self, other: SlotMembers) -> bool:
        """Whether `other` had this content: only what every update changes differs."""
        return self.static is other.static and self.own is other.own


def slot_members(ctx: AdContext, slots: Slots, now: float) -> list[SlotMembers]:
    """The ads of `partitionable_ad` and of each claim's `dynamic_ad`, as the JSON
    members the collector is sent (`CollectorClient.advertise_changes`): the static
    attributes' members are made once, a slot's own again only when they changed."""
    _, static = ctx.static()
    varying = json_members(ctx.varying(now))
    own = [(slots.name, ctx.own(_partitionable_pairs(slots), _PSLOT_EXPRS)[1])] + [
        (c.name, ctx.own(_dynamic_pairs(slots, c), _DSLOT_EXPRS)[1]) for c in slots.claims.values()
    ]
    ctx.forget_others({name for name, _ in own})
    return [SlotMembers(name, static, members, varying) for name, members in own]
