"""The slot ads the execute node advertises: the partitionable slot and its dynamic slots.

Attribute names and meanings are the condor_startd's, so `htgrid status`, the
negotiator and users' Requirements read them as they would HTCondor's: the
partitionable slot offers what is free (`Cpus`, `Memory` in MB, `Disk` in KB, `GPUs`),
each dynamic slot what its claim holds, with `RemoteUser`, `RemoteOwner` and `JobId`.
"""

from __future__ import annotations

import os
from typing import Final

from htgrid import __version__
from htgrid.classad import ClassAd, ExprTree
from htgrid.startd._claims import Claim, Slots
from htgrid.startd._config import StartdConfig
from htgrid.startd._machine import MachineInfo
from htgrid.startd._states import SLOT_OF, Resources, SlotState
from htgrid.startd._wire import TLS_CERTIFICATE

__all__ = [
    "CONDOR_PLATFORM",
    "CONDOR_VERSION",
    "TLS_CERTIFICATE",
    "dynamic_ad",
    "partitionable_ad",
    "slot_state",
]

# As `htgrid submit` writes them: a job's Requirements may compare versions.
CONDOR_VERSION: Final = f"$CondorVersion: 24.0.24 2026-09-24 BuildID: htgrid {__version__} $"
CONDOR_PLATFORM: Final = "$CondorPlatform: X86_64-htgrid $"
_VANILLA_ONLY: Final = "(TARGET.JobUniverse =?= undefined || TARGET.JobUniverse == 5)"
# condor_startd's WithinResourceLimits for a partitionable slot.
_WITHIN_LIMITS: Final = (
    "MY.Cpus > 0 && TARGET.RequestCpus <= MY.Cpus && TARGET.RequestMemory <= MY.Memory"
    " && TARGET.RequestDisk <= MY.Disk"
    " && (TARGET.RequestGPUs =?= undefined || TARGET.RequestGPUs <= MY.GPUs)"
)


class AdContext:
    """What every ad of one startd shares (fixed at start-up)."""

    def __init__(
        self, config: StartdConfig, machine: MachineInfo, address: str, started: int
    ) -> None:
        self.config = config
        self.machine = machine
        self.address = address
        self.started = started
        self.sequence = 0
        self.certificate: str | None = None  # a node on its own: its TLS certificate (PEM)

    def common(self, now: float) -> ClassAd:
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
        ad["UpdateSequenceNumber"] = self.sequence
        ad["UpdateInterval"] = int(c.update_interval)  # gone after three missed updates
        ad["MyCurrentTime"] = int(now)
        ad["DetectedCpus"] = m.detected.cpus
        ad["DetectedMemory"] = m.detected.memory
        ad["DetectedGPUs"] = ",".join(m.detected.gpus) if m.detected.gpus else 0
        ad["TotalCpus"] = m.offered.cpus
        ad["TotalMemory"] = m.offered.memory
        ad["TotalDisk"] = m.offered.disk
        ad["TotalGPUs"] = len(m.offered.gpus)
        ad["TotalSlots"] = 1
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
        ad["TotalLoadAvg"] = round(load, 3)
        ad["LoadAvg"] = round(load / max(1, m.detected.cpus), 3)
        ad["Start"] = ExprTree(c.start)
        ad["Rank"] = 0.0
        ad["CurrentRank"] = 0.0
        ad["SlotWeight"] = ExprTree("Cpus")
        if m.gpus:
            ad["GPUs_DeviceName"] = m.gpus[0].name
            ad["GPUs_GlobalMemoryMb"] = m.gpus[0].memory_mb
        for name, text in c.attrs:
            ad[name] = ExprTree(text)
        return ad


def _resources(ad: ClassAd, have: Resources) -> None:
    ad["Cpus"] = have.cpus
    ad["Memory"] = have.memory
    ad["Disk"] = have.disk
    ad["GPUs"] = len(have.gpus)
    if have.gpus:
        ad["AssignedGPUs"] = ",".join(have.gpus)


def slot_state(ctx: AdContext, slots: Slots) -> SlotState:
    """Owner when START is false on its own (no job could match), else as the books say."""
    if slots.state is SlotState.DRAINED:
        return SlotState.DRAINED
    start = ExprTree(ctx.config.start).eval(ctx.common(0.0))
    return SlotState.OWNER if start is False else SlotState.UNCLAIMED


def partitionable_ad(ctx: AdContext, slots: Slots, now: float) -> ClassAd:
    """The partitionable slot's ad: what is free, and its dynamic slots' summary."""
    ad = ctx.common(now)
    ad["Name"] = slots.name
    ad["SlotID"] = 1
    ad["SlotType"] = "Partitionable"
    ad["PartitionableSlot"] = True
    _resources(ad, slots.free)
    ad["TotalSlotCpus"] = slots.offered.cpus
    ad["TotalSlotMemory"] = slots.offered.memory
    ad["TotalSlotDisk"] = slots.offered.disk
    ad["TotalSlotGPUs"] = len(slots.offered.gpus)
    ad["NumDynamicSlots"] = len(slots.claims)
    ad["WithinResourceLimits"] = ExprTree(_WITHIN_LIMITS)
    # The starter runs vanilla jobs only: a grid job waiting for a site must not land here.
    ad["Requirements"] = ExprTree(f"START && WithinResourceLimits && {_VANILLA_ONLY}")
    ad["State"] = slots.state.value
    ad["Activity"] = "Retiring" if slots.state is SlotState.DRAINED else "Idle"
    ad["EnteredCurrentState"] = int(slots.entered)
    ad["EnteredCurrentActivity"] = int(slots.entered)
    return ad


def dynamic_ad(ctx: AdContext, slots: Slots, claim: Claim, now: float) -> ClassAd:
    """A dynamic slot's ad: its claim's resources, state and job."""
    ad = ctx.common(now)
    ad["Name"] = claim.name
    ad["SlotID"] = 1
    ad["DSlotId"] = claim.slot_id
    ad["SlotType"] = "Dynamic"
    ad["DynamicSlot"] = True
    ad["ParentSlotName"] = slots.name
    _resources(ad, claim.resources)
    ad["TotalSlotCpus"] = claim.resources.cpus
    ad["TotalSlotMemory"] = claim.resources.memory
    ad["TotalSlotDisk"] = claim.resources.disk
    ad["TotalSlotGPUs"] = len(claim.resources.gpus)
    ad["Requirements"] = ExprTree("START")
    state, activity = SLOT_OF[claim.state]
    ad["State"] = state
    ad["Activity"] = activity
    ad["EnteredCurrentState"] = int(claim.entered)
    ad["EnteredCurrentActivity"] = int(claim.entered)
    job = claim.job_ad
    for attr, remote in (("User", "RemoteUser"), ("Owner", "RemoteOwner")):
        value = job.get(attr)
        if isinstance(value, str):
            ad[remote] = value
    if claim.job_id is not None:
        ad["JobId"] = str(claim.job_id)
    ad["ClientMachine"] = claim.schedd
    ad["RemoteScheddName"] = claim.schedd
    if claim.job_start is not None:
        ad["JobStart"] = int(claim.job_start)
    return ad
