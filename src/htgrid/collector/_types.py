"""Ad types and the collector commands that carry them, as condor_advertise names them."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from htgrid.collector._errors import UnknownCommand

__all__ = ["AdType", "Command", "command_for", "parse_command"]


class AdType(enum.Enum):
    """The kinds of ad the collector keeps; each value is the ads' `MyType`."""

    STARTD = "Machine"
    SCHEDD = "Scheduler"
    MASTER = "DaemonMaster"
    NEGOTIATOR = "Negotiator"
    COLLECTOR = "Collector"
    SUBMITTER = "Submitter"
    GRID = "Grid"
    ACCOUNTING = "Accounting"
    LICENSE = "License"
    STORAGE = "Storage"
    HAD = "HAD"
    GENERIC = "Generic"

    @classmethod
    def of(cls, name: str) -> AdType | None:
        """The type a MyType (or one of condor_status's names for it) stands for."""
        return _BY_NAME.get(name.lower())


_BY_NAME: dict[str, AdType] = {t.value.lower(): t for t in AdType}
_BY_NAME.update(
    {
        "startd": AdType.STARTD,
        "schedd": AdType.SCHEDD,
        "master": AdType.MASTER,
        "submitter": AdType.SUBMITTER,
        "submittor": AdType.SUBMITTER,
    }
)

# The word condor_advertise's commands use for each type (UPDATE_<word>_AD,
# INVALIDATE_<word>_ADS); GENERIC is spelled UPDATE_AD_GENERIC / INVALIDATE_ADS_GENERIC.
_WORDS: dict[str, AdType] = {
    "STARTD": AdType.STARTD,
    "SCHEDD": AdType.SCHEDD,
    "MASTER": AdType.MASTER,
    "NEGOTIATOR": AdType.NEGOTIATOR,
    "COLLECTOR": AdType.COLLECTOR,
    "SUBMITTOR": AdType.SUBMITTER,
    "GRID": AdType.GRID,
    "ACCOUNTING": AdType.ACCOUNTING,
    "LICENSE": AdType.LICENSE,
    "STORAGE": AdType.STORAGE,
    "HAD": AdType.HAD,
}


@dataclass(frozen=True, slots=True)
class Command:
    """A collector command: an update or an invalidation of one type of ad."""

    name: str
    invalidate: bool
    ad_type: AdType


def parse_command(name: str) -> Command:
    """The command condor_advertise calls `name` (UnknownCommand if there is none)."""
    word = name.strip().upper()
    if word == "UPDATE_AD_GENERIC":
        return Command(word, False, AdType.GENERIC)
    if word == "INVALIDATE_ADS_GENERIC":
        return Command(word, True, AdType.GENERIC)
    if word.startswith("UPDATE_") and word.endswith("_AD"):
        ad_type = _WORDS.get(word[len("UPDATE_") : -len("_AD")])
        if ad_type is not None:
            return Command(word, False, ad_type)
    if word.startswith("INVALIDATE_") and word.endswith("_ADS"):
        ad_type = _WORDS.get(word[len("INVALIDATE_") : -len("_ADS")])
        if ad_type is not None:
            return Command(word, True, ad_type)
    known = ", ".join(f"UPDATE_{w}_AD" for w in _WORDS)
    raise UnknownCommand(
        f"unknown command {name!r}; the collector takes {known}, UPDATE_AD_GENERIC "
        "and the matching INVALIDATE_*_ADS"
    )


def command_for(ad_type: AdType, *, invalidate: bool = False) -> Command:
    """The command that updates (or invalidates) ads of `ad_type`."""
    if ad_type is AdType.GENERIC:
        return parse_command("INVALIDATE_ADS_GENERIC" if invalidate else "UPDATE_AD_GENERIC")
    word = next(w for w, t in _WORDS.items() if t is ad_type)
    return parse_command(f"INVALIDATE_{word}_ADS" if invalidate else f"UPDATE_{word}_AD")
