"""How much of a sandbox a daemon takes (`SizeLimit`: MAX_TRANSFER_INPUT_MB, _OUTPUT_MB),
and reading an upload's tar: its members, counted as they come (`listed_members`) and by
the size they unpack to (`unpacked_size`); and a quick look at a batch upload that holds
nothing but empty job directories (`empty_job_dirs`).

HTCondor-C stages in every job, also one with no input file: a batch of a thousand such
jobs is a tar of a thousand directory headers (`12.0/`, `12.1/`...). tarfile reads a
header in ~40 us; this reads one of them in ~5. It answers only for a tar it can read
exactly as tarfile would: every header a plain ustar directory entry named `c.p/`, with a
valid checksum, until the end-of-archive block. Anything else (a file, a long or non-ASCII
name, a pax header, a bad field) gets None, and the caller reads the tar with tarfile,
which decides and says what is wrong.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO, Final

from htgrid.net._errors import SandboxTooLarge

__all__ = [
    "MAX_TAR_MEMBERS",
    "NO_LIMIT",
    "SizeLimit",
    "empty_job_dirs",
    "listed_members",
    "unpacked_size",
]

#: The most members one upload may hold: each costs the daemon a TarInfo (or, here, a
#: job id) before anything is checked.
MAX_TAR_MEMBERS: Final = 100_000

_BLOCK: Final = 512
_END: Final = bytes(_BLOCK)
_MAGICS: Final = (b"ustar\x0000", b"ustar  \x00")  # POSIX (pax, ustar) and GNU
_NAME: Final = re.compile(rb"(?:\./)?([0-9]+\.[0-9]+)/?\x00*")
_NUMBER: Final = re.compile(rb" *[0-7]* *")  # a field tarfile reads as octal (NULs cut)
_DIRTYPE: Final = b"5"
# mode, uid, gid, mtime: must read as numbers, as tarfile reads them all.
_FIELDS: Final = ((100, 108), (108, 116), (116, 124), (136, 148))


_MIB: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class SizeLimit:
    """A cap on a sandbox's size in MiB, named after its knob (None: no cap)."""

    knob: str
    megabytes: int | None = None

    @property
    def bytes(self) -> int | None:
        return None if self.megabytes is None else self.megabytes * _MIB

    def check(self, size: int, what: str, *, at_least: bool = False) -> None:
        """SandboxTooLarge when `size` bytes (or more, `at_least`) of `what` exceed it."""
        cap = self.bytes
        if cap is not None and size > cap:
            more = " at least" if at_least else ""
            raise SandboxTooLarge(
                f"{what} is{more} {size} bytes, over the limit of {self.knob} = "
                f"{self.megabytes} MiB ({cap} bytes)"
            )


NO_LIMIT: Final = SizeLimit("(none)")


def empty_job_dirs(data: BinaryIO, most: int = MAX_TAR_MEMBERS) -> list[str] | None:
    """The job ids ("12.0") of a tar of empty job directories, in order, each once; None
    when the tar is anything else, or holds more than `most` headers. Leaves `data` at
    its start either way."""
    start = data.tell()
    try:
        jobs: dict[str, None] = {}
        known: set[bytes] = set()  # numeric fields already read (one set in a batch, often)
        for _ in range(most + 1):
            block = data.read(_BLOCK)
            if block == _END:
                return list(jobs) if jobs else None
            job = _job_dir(block, known)
            if job is None:
                return None
            jobs[job] = None
        return None  # too many: tarfile reads it, and says so
    finally:
        data.seek(start)


def _job_dir(block: bytes, known: set[bytes]) -> str | None:
    """The job id of a plain directory header `c.p/`, else None."""
    if len(block) != _BLOCK or block[156:157] != _DIRTYPE or block[257:265] not in _MAGICS:
        return None
    if block[345] != 0:  # a ustar prefix: the name is longer than it looks
        return None
    numbers = block[100:148]  # mode, uid, gid, size, mtime
    if numbers not in known:
        if _octal(block[124:136]) != 0 or any(_octal(block[a:b]) is None for a, b in _FIELDS):
            return None
        known.add(numbers)
    name = _NAME.fullmatch(block[:100])
    stored = _octal(block[148:156])
    # The checksum counts its own field as eight spaces (256).
    if name is None or stored is None or stored != sum(block) - sum(block[148:156]) + 256:
        return None
    return name.group(1).decode("ascii")


def _octal(field: bytes) -> int | None:
    """The number in a header field as tarfile reads it (up to the first NUL), or None
    for what it would refuse (base-256 fields included: none is wanted here)."""
    text = field.split(b"\x00", 1)[0]
    if not _NUMBER.fullmatch(text):
        return None
    digits = text.strip()
    return int(digits, 8) if digits else 0


def listed_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The members of a tar being read; SandboxTooLarge past MAX_TAR_MEMBERS (read one
    by one, so a tar of millions of empty files is refused before it fills memory)."""
    members: list[tarfile.TarInfo] = []
    for member in tar:
        members.append(member)
        if len(members) > MAX_TAR_MEMBERS:
            raise SandboxTooLarge(f"the tar holds more than {MAX_TAR_MEMBERS} members")
    return members


def unpacked_size(members: Iterable[tarfile.TarInfo]) -> int:
    """The bytes the files of `members` take once unpacked: a sparse member counts whole
    (its holes are written as zeros), however few bytes it took on the wire."""
    return sum(member.size for member in members if member.isfile())
