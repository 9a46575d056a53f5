"""Job sandboxes as tar files: the input a stage-in sends, the output a stage-out unpacks.

The tars live in unnamed temporary files (`scratch_file`: gone when closed, or when the
process dies), never in memory, so a sandbox of any size costs the GAHP a MiB or so.
Everything here blocks (files of any size): the server runs it in a worker thread. Names in a tar are relative to the remote sandbox; nothing outside it is
accepted from the remote side, and every file is written atomically (a temporary file in
the destination's directory, then a rename), so a crash never leaves half a file under
its final name.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

import htgrid.classad as classad
from htgrid.backends.condor._errors import SandboxError

__all__ = [
    "InputFile",
    "input_files",
    "input_tar",
    "output_destinations",
    "scratch_file",
    "unpack_output",
]

_CHUNK = 1024 * 1024


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


def input_files(ad: classad.ClassAd) -> list[InputFile]:
    """What a stage-in sends: the executable, stdin and TransferInput, by their names."""
    iwd = _iwd(ad, "input files")
    wanted: list[tuple[str, str]] = []  # (where it comes from, local name)
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
    files: list[InputFile] = []
    seen: dict[str, str] = {}
    for attr, local in wanted:
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


def scratch_file() -> IO[bytes]:
    """An unnamed temporary file for a sandbox tar, in $TMPDIR (deleted when closed)."""
    try:
        return tempfile.TemporaryFile(prefix="htgrid-gahp-sandbox-")
    except OSError as exc:
        where = tempfile.gettempdir()
        raise SandboxError(
            f"cannot make a temporary file for a sandbox in {where}: {exc}"
        ) from None


def input_tar(ad: classad.ClassAd, out: IO[bytes]) -> int:
    """Write the stage-in tar of `ad`'s input files to `out` (plain tar, names relative to
    the sandbox); its size in bytes."""
    files = input_files(ad)
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for item in files:
                _add(tar, item)
        out.flush()
        return out.tell()
    except OSError as exc:
        raise SandboxError(f"cannot write the input tar: {exc}") from None


def _add(tar: tarfile.TarFile, item: InputFile) -> None:
    try:
        if item.name == ".":
            for child in sorted(item.path.iterdir()):
                tar.add(child, arcname=child.name, filter=_plain)
        else:
            tar.add(item.path, arcname=item.name, filter=_plain)
    except OSError as exc:  # a read, or the tar's write (the error says which)
        raise SandboxError(f"cannot tar input {str(item.path)!r}: {exc}") from None


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    # Ownership means nothing on the remote side; links could point outside the sandbox.
    if not (info.isfile() or info.isdir()):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _remaps(text: str | None) -> dict[str, str]:
    """TransferOutputRemaps, `"name = dest; name2 = dest2"`, as a mapping."""
    remaps: dict[str, str] = {}
    for part in (text or "").split(";"):
        name, sep, dest = part.partition("=")
        if sep and name.strip() and dest.strip():
            remaps[name.strip()] = dest.strip()
    return remaps


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


def _member_name(member: tarfile.TarInfo) -> str:
    name = member.name
    parts = PurePosixPath(name).parts
    if not name or name.startswith("/") or ".." in parts:
        raise SandboxError(f"the output sandbox holds {name!r}, a name outside the sandbox")
    return posixpath.normpath(name)


def unpack_output(tar_file: IO[bytes], ad: classad.ClassAd) -> list[Path]:
    """Write the files of the output tar in `tar_file` (read from its beginning) where `ad`
    says they belong; the paths written.

    Every member's name is checked before a file is written: an output sandbox holding
    a name outside the sandbox writes nothing.
    """
    iwd, special = output_destinations(ad)
    written: list[Path] = []
    try:
        tar_file.seek(0)
        with tarfile.open(fileobj=tar_file, mode="r:") as tar:
            members = [(_member_name(m), m) for m in tar.getmembers()]
            for name, member in members:
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
