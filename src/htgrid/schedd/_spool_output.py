"""The output sandboxes of spooled jobs, packed for the submitter (see `_spool` for the
whole): what a job hands back (`output_files`: Out, Err, then TransferOutput's files or
what the job made or changed since its input came), packed into a plain tar in an unnamed
temporary file (`pack_output`; several jobs' in one, `jobs.json` first: `pack_outputs`).
Files inside the sandbox are opened without following any link, and read with the
rights of the job's owner."""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final

from htgrid._files import open_beneath
from htgrid._privsep import Account, as_owner
from htgrid.classad import ClassAd
from htgrid.net.server import NO_LIMIT, SizeLimit
from htgrid.schedd._spool import read_manifest, scratch_file

__all__ = ["INDEX", "JobOutput", "output_files", "pack_output", "pack_outputs"]

#: The first member of a tar of several jobs' outputs: what each job got (`pack_outputs`).
INDEX: Final = "jobs.json"
_LIST_SPLIT: Final = re.compile(r"[\s,]+")


def _open_output(path: Path, sandbox: Path) -> int:
    """A file of the output, opened for reading: one inside the sandbox without following
    a link anywhere on its way, one elsewhere as the caller's rights allow (not a link)."""
    try:
        rel = path.relative_to(sandbox)
    except ValueError:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    return open_beneath(sandbox, str(rel), os.O_RDONLY)


def _add_file(tar: tarfile.TarFile, path: Path, name: str, sandbox: Path) -> bool:
    """Add the regular file at `path` as `name`, never through a link below `sandbox`
    nor as the last step; whether it was."""
    try:
        fd = _open_output(path, sandbox)
    except (OSError, ValueError):
        return False  # missing, unreadable, or a link: not the job's output to hand out
    with os.fdopen(fd, "rb") as source:
        st = os.fstat(source.fileno())
        if not stat.S_ISREG(st.st_mode):
            return False
        info = tarfile.TarInfo(name)
        info.size, info.mtime = st.st_size, int(st.st_mtime)
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
        tar.addfile(info, source)
    return True


def _walk(root: Path) -> Iterator[PurePosixPath]:
    """What is under `root` but directories (relative): each directory's names sorted,
    its files before its subdirectories' (as os.walk goes), not descending into links."""
    return _walk_dir(str(root), PurePosixPath())


def _walk_dir(path: str, rel: PurePosixPath) -> Iterator[PurePosixPath]:
    # os.scandir, not os.walk: an empty job directory is the common case at stage out,
    # and os.walk's set-up costs ~15 µs of it.
    try:
        with os.scandir(path) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError:
        return
    subdirs = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()  # through a link, as os.walk sorts them
        except OSError:
            is_dir = False
        if not is_dir:
            yield rel / entry.name
        elif not entry.is_symlink():
            subdirs.append(entry)
    for entry in subdirs:
        yield from _walk_dir(entry.path, rel / entry.name)


def _stream(ad: ClassAd, name: str) -> str | None:
    value = ad.get(name)
    if not isinstance(value, str) or not value or value == os.devnull:
        return None
    return value


def _wanted(ad: ClassAd, iwd: Path, sandbox: Path) -> dict[str, Path]:
    """Member name -> file: Out, Err, then TransferOutput's or what the job made."""
    files: dict[str, Path] = {}
    for attr in ("Out", "Err"):
        value = _stream(ad, attr)
        if value is not None:
            files.setdefault(os.path.basename(value), iwd / value)
    listed = ad.get("TransferOutput")
    if isinstance(listed, str) and listed.strip():
        for entry in (e for e in _LIST_SPLIT.split(listed) if e):
            source = iwd / entry
            top = "" if entry.endswith("/") else os.path.basename(entry.rstrip("/"))
            if source.is_dir() and not source.is_symlink():
                for rel in _walk(source):
                    files.setdefault(
                        str(PurePosixPath(top) / rel) if top else str(rel), source / rel
                    )
            else:
                files.setdefault(os.path.basename(entry), source)
        return files
    found = list(_walk(sandbox))  # none when it is missing or empty
    if found:
        uploaded = read_manifest(sandbox)
        for rel in found:
            with contextlib.suppress(OSError):
                st = os.lstat(sandbox / rel)
                if uploaded.get(str(rel)) != (st.st_size, st.st_mtime_ns):
                    files.setdefault(str(rel), sandbox / rel)
    return files


def _size(path: Path) -> int:
    """The size of the regular file at `path` (0 when missing, a link or not regular)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def pack_output(
    ad: ClassAd,
    sandbox: Path,
    scratch: Path | None = None,
    limit: SizeLimit = NO_LIMIT,
    what: str = "the output",
    account: Account | None = None,
) -> BinaryIO:
    """The job's output sandbox as a plain tar in an unnamed file under `scratch`,
    rewound (see `_wanted` for what it holds), its files read as `account`.

    SandboxTooLarge, before anything is packed, when its files add up to over `limit`.
    """
    packed = scratch_file(scratch)  # the daemon's file: made before the switch
    try:
        with as_owner(account):
            wanted = output_files(ad, sandbox, limit, what)
            with tarfile.open(fileobj=packed, mode="w:", format=tarfile.PAX_FORMAT) as tar:
                for name, path in wanted.items():
                    _add_file(tar, path, name, sandbox)
        packed.seek(0)
    except BaseException:
        packed.close()
        raise
    return packed


def output_files(
    ad: ClassAd, sandbox: Path, limit: SizeLimit = NO_LIMIT, what: str = "the output"
) -> dict[str, Path]:
    """The files of the job's output sandbox by member name (see `_wanted`);
    SandboxTooLarge when they add up to over `limit`. Looks at the files with the
    caller's rights: call it as the job's owner."""
    iwd_value = ad.get("Iwd")
    iwd = Path(iwd_value) if isinstance(iwd_value, str) and iwd_value else sandbox
    wanted = _wanted(ad, iwd, sandbox)
    limit.check(sum(_size(path) for path in wanted.values()), what)
    return wanted


@dataclass(frozen=True, slots=True)
class JobOutput:
    """One job's part of a tar of several outputs: its files by member name (from
    `output_files`), read as `account` from its `sandbox`."""

    files: Mapping[str, Path]
    sandbox: Path
    account: Account | None = None


def pack_outputs(
    index: bytes, outputs: Mapping[str, JobOutput], scratch: Path | None = None
) -> BinaryIO:
    """Several jobs' output sandboxes as one plain tar in an unnamed file under
    `scratch`, rewound: first `jobs.json` holding `index`, then each job's files under
    its id (`outputs`: job id -> its files), `12.0/out.txt`."""
    packed = scratch_file(scratch)
    try:
        with tarfile.open(fileobj=packed, mode="w:", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo(INDEX)
            info.size, info.mode = len(index), 0o644
            tar.addfile(info, io.BytesIO(index))
            for job, output in outputs.items():
                with as_owner(output.account):
                    for name, path in output.files.items():
                        _add_file(tar, path, f"{job}/{name}", output.sandbox)
        packed.seek(0)
    except BaseException:
        packed.close()
        raise
    return packed
