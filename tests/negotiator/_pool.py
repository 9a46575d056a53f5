"""Ads for the negotiator's tests, written as HTCondor writes them (old syntax)."""

from __future__ import annotations

from htgrid.classad import ClassAd, ParserType, parseAds


def ads(text: str) -> list[ClassAd]:
    """The ads of `text`, separated by blank lines."""
    return list(parseAds(text, ParserType.Old))


def slot(name: str, *, memory: int = 4096, cpus: int = 1, extra: str = "") -> ClassAd:
    """An unclaimed static slot that takes any job."""
    (ad,) = ads(
        f"""MyType = "Machine"
Name = "{name}"
Machine = "{name.split("@")[-1]}"
OpSys = "LINUX"
Arch = "X86_64"
State = "Unclaimed"
Activity = "Idle"
Memory = {memory}
Disk = 1000000
Cpus = {cpus}
Requirements = true
Rank = 0.0
{extra}"""
    )
    return ad


def job(cluster: int, proc: int, owner: str = "alice", *, extra: str = "") -> ClassAd:
    """An idle vanilla job wanting a Linux slot with 1 GB."""
    (ad,) = ads(
        f"""MyType = "Job"
ClusterId = {cluster}
ProcId = {proc}
Owner = "{owner}"
User = "{owner}@example.com"
JobStatus = 1
JobUniverse = 5
JobPrio = 0
RequestCpus = 1
RequestMemory = 1024
RequestDisk = 1000
Arguments = "--part {proc}"
Requirements = (TARGET.OpSys == "LINUX") && (TARGET.Memory >= RequestMemory)
{extra}"""
    )
    return ad
