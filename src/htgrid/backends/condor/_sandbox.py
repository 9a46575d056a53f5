"""Job sandboxes as tar files: the input a stage-in sends, the output a stage-out unpacks.

The tars live in unnamed temporary files (`scratch_file`: gone when closed, or when the
process dies), never in memory, so a sandbox of any size costs the GAHP a MiB or so.
A stage-in looks at its files first (`input_entries`, stat only); the tar is written
later straight from them, one for a whole batch of jobs (`InputTar`). Everything here
but `close_scratch` blocks (files of any size): the server runs it in a worker thread. Names in a tar are
relative to the remote sandbox; nothing outside it is accepted from the remote side, and
every file is written atomically (a temporary file in the destination's directory, then a
rename), so a crash never leaves half a file under its final name.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Final

import htgrid.classad as classad
from htgrid.backends.condor._errors import SandboxError

__all__ = [
    "InputEntry",
    "InputFile",
    "InputTar",
    "close_scratch",
    "input_entries",
    "input_files",
    "input_tar",
    "names_inputs",
    "output_destinations",
    "scratch_file",
    "unpack_output",
    "write_output",
]

_CHUNK = 1024 * 1024
_BLOCK = tarfile.BLOCKSIZE


@dataclass(frozen=True, slots=True)
class InputFile:
    """A local file or directory and its name in the remote sandbox."""

    path: Path
    name: str


def _text(ad: classad.ClassAd, name: str) -> str | None:
    """A string attribute of `ad` evaluated (None when absent, undefined or not a string)."""
    if name not in ad:
        return None
    try:
        value = ad.eval(name)
    except classad.ClassAdException:
        return None
    return value if isinstance(value, str) and value else None


def _flag(ad: classad.ClassAd, name: str, default: bool) -> bool:
    if name not in ad:
        return default
    try:
        value = ad.eval(name)
    except classad.ClassAdException:
        return default
    return value if isinstance(value, bool) else default


def _iwd(ad: classad.ClassAd, what: str) -> Path:
    iwd = _text(ad, "SUBMIT_Iwd") or _text(ad, "Iwd")
    if iwd is None or not os.path.isabs(iwd):
        raise SandboxError(
            f"the job ad has no absolute SUBMIT_Iwd or Iwd: cannot tell where its {what} are"
        )
    return Path(iwd)


def _split_list(text: str) -> list[str]:
    # HTCondor's file lists are separated by commas (and, loosely, white space).
    return [item for item in text.replace(",", " ").split() if item]


def names_inputs(ad: classad.ClassAd) -> bool:
    """Whether `ad` names any input file (read from the ad alone, no file looked at);
    SandboxError as `input_files` gives it for an ad without an Iwd."""
    _iwd(ad, "input files")
    return bool(_wanted(ad))


def input_files(ad: classad.ClassAd) -> list[InputFile]:
    """What a stage-in sends: the executable, stdin, TransferInput and the job's X.509
    proxy (as HTCondor's file transfer adds it), by their names."""
    iwd = _iwd(ad, "input files")
    files: list[InputFile] = []
    seen: dict[str, str] = {}
    for attr, local in _wanted(ad):
        path = Path(local) if os.path.isabs(local) else iwd / local
        contents_only = local.endswith("/") and path.is_dir()
        name = "." if contents_only else path.name
        if not path.exists():
            raise SandboxError(f"{attr} file {str(path)!r} does not exist")
        if name in seen and name != ".":
            raise SandboxError(
                f"{attr} file {str(path)!r} and {seen[name]!r} would both be {name!r} "
                "in the remote sandbox"
            )
        seen[name] = str(path)
        files.append(InputFile(path, name))
    return files


def _wanted(ad: classad.ClassAd) -> list[tuple[str, str]]:
    """The input files `ad` names: (the attribute naming it, its name there)."""
    wanted: list[tuple[str, str]] = []
    cmd = _text(ad, "SUBMIT_Cmd") or _text(ad, "Cmd")
    if cmd is not None and _flag(ad, "TransferExecutable", True):
        wanted.append(("Cmd", cmd))
    stdin = _text(ad, "SUBMIT_In") or _text(ad, "In")
    if stdin is not None and stdin != "/dev/null" and _flag(ad, "TransferIn", True):
        wanted.append(("In", stdin))
    for entry in _split_list(_text(ad, "TransferInput") or ""):
        if "://" in entry:
            raise SandboxError(f"TransferInput entry {entry!r}: URL transfers are not supported")
        wanted.append(("TransferInput", entry))
    proxy = _text(ad, "x509userproxy")
    if proxy is not None:
        wanted.append(("x509userproxy", proxy))
    return wanted


def scratch_file() -> IO[bytes]:
    """An unnamed temporary file for a sandbox tar, in $TMPDIR (deleted when closed)."""
    try:
        return tempfile.TemporaryFile(prefix="htgrid-gahp-sandbox-")
    except OSError as exc:
        where = tempfile.gettempdir()
        raise SandboxError(
            f"cannot make a temporary file for a sandbox in {where}: {exc}"
        ) from None


async def close_scratch(tar: IO[bytes]) -> None:
    """Close (and so delete) a sandbox's temporary tar, even when the request is cancelled."""
    # Shielded: a cancelled stage-in or stage-out must not leave its temporary file open.
    with contextlib.suppress(OSError):
        await asyncio.shield(asyncio.to_thread(tar.close))


@dataclass(frozen=True, slots=True)
class InputEntry:
    """One member of a stage-in tar: a local file or directory, its name in the remote
    sandbox, and what stat said of it (the size weighs the batch; the tar takes the size
    the file has when it is copied)."""

    path: str
    name: str
    size: int  # 0 for a directory
    mode: int
    mtime: int
    is_dir: bool


def input_entries(ad: classad.ClassAd) -> tuple[InputEntry, ...]:
    """The members of `ad`'s stage-in tar, found by stat (directories walked in name
    order); no file is read. Links, devices and the like are left out: a link could
    point outside the sandbox."""
    entries: list[InputEntry] = []
    for item in input_files(ad):
        if item.name == ".":
            try:
                children = sorted(os.listdir(item.path))
            except OSError as exc:
                raise SandboxError(f"cannot tar input {str(item.path)!r}: {exc}") from None
            for child in children:
                _walk(str(item.path / child), child, entries)
        else:
            _walk(str(item.path), item.name, entries)
    return tuple(entries)


def _walk(path: str, name: str, into: list[InputEntry]) -> None:
    try:
        info = os.lstat(path)
        mode, mtime = info.st_mode, int(info.st_mtime)
        if stat.S_ISREG(mode):
            if not os.access(path, os.R_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            into.append(InputEntry(path, name, info.st_size, mode & 0o7777, mtime, False))
        elif stat.S_ISDIR(mode):
            into.append(InputEntry(path, name, 0, mode & 0o7777, mtime, True))
            for child in sorted(os.listdir(path)):
                _walk(os.path.join(path, child), f"{name}/{child}", into)
    except OSError as exc:
        raise SandboxError(f"cannot tar input {path!r}: {exc}") from None


def tar_size(entries: Sequence[InputEntry]) -> int:
    """About the bytes `entries` take in a tar (a header block each, data in whole blocks)."""
    return sum(_BLOCK + -(-entry.size // _BLOCK) * _BLOCK for entry in entries) + 2 * _BLOCK


def _tar_header(name: str, kind: bytes, size: int, mode: int, mtime: int) -> bytes:
    # Ownership means nothing on the remote side: uid/gid 0, no user or group names.
    info = tarfile.TarInfo(name)
    info.type, info.size, info.mode, info.mtime = kind, size, mode, mtime
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


_TOP_TEMPLATE: Final = _tar_header("x", tarfile.DIRTYPE, 0, 0o755, 0)


def _top_header(name: str) -> bytes:
    """The header of a job's directory (`12.3/`), as `_tar_header` writes it.

    A batch of a thousand empty sandboxes is a thousand of these; tarfile takes ~20 us
    for each, this ~4 (only the name and the checksum change). A name tarfile would
    write otherwise (long, not ASCII) goes through it.
    """
    if not name.isascii() or len(name) >= 100:
        return _tar_header(name, tarfile.DIRTYPE, 0, 0o755, 0)
    block = bytearray(f"{name}/".encode("ascii").ljust(100, tarfile.NUL))
    block += _TOP_TEMPLATE[100:148] + b" " * 8 + _TOP_TEMPLATE[156:_BLOCK]
    block[148:155] = b"%06o\0" % sum(block)  # the checksum, as tarfile writes it
    return bytes(block)


class InputTar:
    """A plain tar written straight from the input files into a seekable file, one job's
    entries after another's; a job whose file cannot be read is taken back out whole.

    Blocking: run it in a worker thread. Nothing is held in memory but a MiB of copying.
    """

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out

    def add(self, entries: Sequence[InputEntry], top: str = "") -> None:
        """Append `entries` (under directory `top`, when given). SandboxError: one of them
        cannot be read, and none of them is in the tar; OSError: writing the tar failed."""
        mark = self._out.tell()
        try:
            if top:
                self._out.write(_top_header(top))
            for entry in entries:
                name = f"{top}/{entry.name}" if top else entry.name
                if entry.is_dir:
                    self._header(name, tarfile.DIRTYPE, 0, entry.mode, entry.mtime)
                else:
                    self._copy(entry, name)
        except SandboxError:
            self._out.seek(mark)
            self._out.truncate()
            raise

    def finish(self) -> int:
        """End the tar (two zero blocks, padded to a whole record, as tarfile does); its size."""
        out = self._out
        out.write(tarfile.NUL * (2 * _BLOCK))
        out.write(tarfile.NUL * (-out.tell() % tarfile.RECORDSIZE))
        out.flush()
        return out.tell()

    def _header(self, name: str, kind: bytes, size: int, mode: int, mtime: int) -> None:
        self._out.write(_tar_header(name, kind, size, mode, mtime))

    def _copy(self, entry: InputEntry, name: str) -> None:
        try:
            # Non-blocking open: a FIFO put in the file's place must not hang the GAHP.
            fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise SandboxError(
                f"input file {entry.path!r} was removed before it could be sent"
            ) from None
        except OSError as exc:
            raise SandboxError(f"cannot tar input {entry.path!r}: {exc}") from None
        with open(fd, "rb", buffering=0) as source:
            try:
                info = os.fstat(fd)
            except OSError as exc:
                raise SandboxError(f"cannot tar input {entry.path!r}: {exc}") from None
            if not stat.S_ISREG(info.st_mode):
                raise SandboxError(f"input file {entry.path!r} is no longer a regular file")
            size = info.st_size
            self._header(name, tarfile.REGTYPE, size, info.st_mode & 0o7777, int(info.st_mtime))
            left = size
            while left:
                try:
                    chunk = source.read(min(left, _CHUNK))
                except OSError as exc:
                    raise SandboxError(f"cannot tar input {entry.path!r}: {exc}") from None
                if not chunk:
                    raise SandboxError(
                        f"input file {entry.path!r} shrank while it was being sent "
                        f"({size - left} of {size} bytes read)"
                    )
                self._out.write(chunk)
                left -= len(chunk)
            self._out.write(tarfile.NUL * (-size % _BLOCK))


def input_tar(entries: Sequence[InputEntry], out: IO[bytes]) -> int:
    """Write the stage-in tar of one job's `entries` to `out` (plain tar, names relative
    to the sandbox); its size in bytes."""
    tar = InputTar(out)
    try:
        tar.add(entries)
        return tar.finish()
    except OSError as exc:
        raise SandboxError(f"cannot write the input tar: {exc}") from None


def _remaps(text: str | None) -> dict[str, str]:
    """TransferOutputRemaps, `"name = dest; name2 = dest2"`, as a mapping."""
    remaps: dict[str, str] = {}
    for part in (text or "").split(";"):
        name, sep, dest = part.partition("=")
        if sep and name.strip() and dest.strip():
            remaps[name.strip()] = dest.strip()
    return remaps


#: The attributes `output_destinations` reads.
OUTPUT_ATTRS: Final = (
    "SUBMIT_Iwd",
    "Iwd",
    "Out",
    "SUBMIT_Out",
    "Err",
    "SUBMIT_Err",
    "TransferOutputRemaps",
)


def output_destinations(ad: classad.ClassAd) -> tuple[Path, dict[str, Path]]:
    """Where output files go: the local Iwd, and the special names (Out, Err, remaps)."""
    iwd = _iwd(ad, "output files")

    def local(path: str) -> Path:
        return Path(path) if os.path.isabs(path) else iwd / path

    special: dict[str, Path] = {}
    for attr, submit_attr in (("Out", "SUBMIT_Out"), ("Err", "SUBMIT_Err")):
        name = _text(ad, attr)
        if name is None or name == "/dev/null":
            continue
        dest = _text(ad, submit_attr)
        special[posixpath.basename(name)] = local(dest) if dest else iwd / posixpath.basename(name)
    for name, dest in _remaps(_text(ad, "TransferOutputRemaps")).items():
        special[name] = local(dest)
    return iwd, special


def _member_name(name: str) -> str:
    parts = PurePosixPath(name).parts
    if not name or name.startswith("/") or ".." in parts:
        raise SandboxError(f"the output sandbox holds {name!r}, a name outside the sandbox")
    return posixpath.normpath(name)


def _not_sparse(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """`member`, unless it is sparse: a few bytes on the wire that would be written as
    its whole size, which no htgrid daemon sends (SandboxError)."""
    if member.issparse():
        raise SandboxError(
            f"the output sandbox holds {member.name!r}, a sparse file of {member.size} bytes: "
            "refused, as no queue daemon sends one"
        )
    return member


def unpack_output(tar_file: IO[bytes], ad: classad.ClassAd) -> list[Path]:
    """Write the files of the output tar in `tar_file` (read from its beginning) where `ad`
    says they belong; the paths written.

    Every member's name is checked before a file is written: an output sandbox holding
    a name outside the sandbox writes nothing.
    """
    try:
        tar_file.seek(0)
        with tarfile.open(fileobj=tar_file, mode="r:") as tar:
            return write_output(tar, [(m.name, m) for m in tar.getmembers()], ad)
    except tarfile.TarError as exc:
        raise SandboxError(f"the output sandbox is not a tar stream: {exc}") from None
    except OSError as exc:  # reading the received tar back (writes say which file)
        raise SandboxError(f"cannot read the output sandbox received: {exc}") from None


def write_output(
    tar: tarfile.TarFile, members: Sequence[tuple[str, tarfile.TarInfo]], ad: classad.ClassAd
) -> list[Path]:
    """Write `members` of `tar` (each with its name relative to the job's sandbox) where
    `ad` says they belong, as `unpack_output` does; the paths written."""
    iwd, special = output_destinations(ad)
    written: list[Path] = []
    try:
        checked = [(_member_name(name), _not_sparse(member)) for name, member in members]
        for name, member in checked:
            if not member.isfile():
                continue  # directories are made as their files are written; no links
            source = tar.extractfile(member)
            if source is None:
                continue
            dest = special.get(name, iwd / name)
            _write_atomically(dest, source, member.mode & 0o7777)
            written.append(dest)
    except tarfile.TarError as exc:
        raise SandboxError(f"the output sandbox is not a tar stream: {exc}") from None
    except OSError as exc:  # reading the received tar back (writes say which file)
        raise SandboxError(f"cannot read the output sandbox received: {exc}") from None
    return written


def _write_atomically(dest: Path, source: IO[bytes], mode: int) -> None:
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    except OSError as exc:
        raise SandboxError(f"cannot write output file {str(dest)!r}: {exc}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out, _CHUNK)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode or 0o644)
        os.replace(tmp, dest)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise SandboxError(f"cannot write output file {str(dest)!r}: {exc}") from None
