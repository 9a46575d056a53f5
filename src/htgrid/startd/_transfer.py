"""Moving a job's files between the submit side and its sandbox, as tar files.

Input (submit side to sandbox): the executable (unless `transfer_executable = false`),
the standard input file, `transfer_input_files` (files and directories; `dir/` sends
the directory's contents), and what an earlier eviction spooled (ON_EXIT_OR_EVICT).
Everything lands flat in the sandbox under its base name, as HTCondor places it.

Output (sandbox to submit side): the job's stdout and stderr (`_condor_stdout` and
`_condor_stderr` in the sandbox, written to its Out and Err), and the files of
`transfer_output_files` or, when that is not set, every top-level file the job created
or changed. Each lands in Iwd under its base name, or where `transfer_output_remaps`
sends it.

The receiving side never trusts member names: absolute names, `..` and links are
refused. Every function here blocks (file I/O): call it off the event loop. The job's
files are read and written with the rights of the thread that calls: its owner's
(`htgrid._privsep.as_owner`); a tar is a path or a file the daemon opened for it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, Final

from htgrid._files import write_all
from htgrid.classad import ClassAd
from htgrid.net import SandboxTooLarge
from htgrid.net.server import NO_LIMIT, SizeLimit, listed_members, unpacked_size
from htgrid.queue import HoldReasonCode
from htgrid.startd._errors import StartdError

__all__ = [
    "JOB_AD",
    "MACHINE_AD",
    "STDERR",
    "STDOUT",
    "TransferError",
    "Written",
    "input_entries",
    "input_size",
    "output_entries",
    "pack",
    "should_transfer",
    "snapshot",
    "top_level",
    "unpack_input",
    "unpack_output",
    "unpack_to",
]

STDOUT: Final = "_condor_stdout"
STDERR: Final = "_condor_stderr"
JOB_AD: Final = ".job.ad"
MACHINE_AD: Final = ".machine.ad"
_OURS: Final = frozenset({STDOUT, STDERR, JOB_AD, MACHINE_AD})


class TransferError(StartdError):
    """A job's files could not be moved; the job is held with `code` and `subcode`."""

    def __init__(self, reason: str, code: HoldReasonCode, subcode: int = 0) -> None:
        self.reason = reason
        self.code = code
        self.subcode = subcode
        super().__init__(reason)


def _text(ad: ClassAd, name: str) -> str | None:
    value = ad.get(name)
    return value if isinstance(value, str) else None


def _iwd(ad: ClassAd) -> Path:
    iwd = _text(ad, "Iwd")
    if not iwd:
        raise TransferError("the job has no Iwd", HoldReasonCode.IwdError)
    return Path(iwd)


def should_transfer(job: ClassAd, filesystem_domain: str) -> bool:
    """Whether the job's files travel (YES, or IF_NEEDED across filesystem domains)."""
    should = (_text(job, "ShouldTransferFiles") or "IF_NEEDED").upper()
    if should == "YES":
        return True
    if should == "NO":
        return False
    return _text(job, "FileSystemDomain") != filesystem_domain


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _missing(path: Path, what: str, code: HoldReasonCode) -> TransferError:
    return TransferError(
        f"Transfer {what} files failure: {path}: (errno {errno.ENOENT}) No such file or directory",
        code,
        errno.ENOENT,
    )


def input_entries(job: ClassAd, spooled: Path | None = None) -> list[tuple[str, Path]]:
    """(name in the sandbox, path on the submit side) of every input (TransferError)."""
    iwd = _iwd(job)
    entries: list[tuple[str, Path]] = []
    cmd = _text(job, "Cmd")
    if cmd and job.get("TransferExecutable") is not False:
        entries.append((PurePosixPath(cmd).name, iwd / cmd))
    stdin = _text(job, "In")
    if stdin and stdin != os.devnull and job.get("TransferIn") is not False:
        entries.append((PurePosixPath(stdin).name, iwd / stdin))
    for item in _split(_text(job, "TransferInput") or ""):
        if "://" in item:
            raise TransferError(
                f"Transfer input files failure: {item}: URL transfers are not supported",
                HoldReasonCode.TransferInputError,
            )
        path = iwd / item
        if item.endswith("/") and path.is_dir():
            entries.extend((child.name, child) for child in sorted(path.iterdir()))
        else:
            entries.append((PurePosixPath(item.rstrip("/")).name, path))
    proxy = _text(job, "x509userproxy")
    if proxy:  # HTCondor's file transfer sends the job's X.509 proxy with its input
        entries.append((PurePosixPath(proxy).name, iwd / proxy))
    for _, path in entries:
        if not path.exists():
            raise _missing(path, "input", HoldReasonCode.TransferInputError)
    if spooled is not None and spooled.is_dir():
        entries.extend((child.name, child) for child in sorted(spooled.iterdir()))
    return entries


def input_size(entries: Iterable[tuple[str, Path]]) -> int:
    """The bytes of the files `entries` would send (directories walked, links followed
    as the input tar follows them)."""
    total = 0
    for _, path in entries:
        if path.is_dir():
            for top, _, files in os.walk(path, followlinks=True):
                total += sum(_size(Path(top) / name) for name in files)
        else:
            total += _size(path)
    return total


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # pack says what is wrong with it


Tar = Path | BinaryIO  # a tar file by name, or open


def _open_tar(tar: Tar) -> tarfile.TarFile:
    """A tar to read, by name or open: a plain one, as htgrid sends, tried first (tarfile
    tries each compression before it); else a compressed one."""
    if isinstance(tar, Path):
        with contextlib.suppress(tarfile.ReadError):
            return tarfile.open(tar, "r:")
        return tarfile.open(tar)
    start = tar.tell()
    try:
        return tarfile.open(fileobj=tar, mode="r:")
    except tarfile.ReadError:
        tar.seek(start)
        return tarfile.open(fileobj=tar)


def pack(
    entries: Iterable[tuple[str, Path]],
    dest: Tar,
    *,
    dereference: bool,
    code: HoldReasonCode = HoldReasonCode.TransferInputError,
) -> int:
    """Write `entries` (directories with their contents) into the tar `dest` (a path, or
    a file open for writing at its start); its size.

    The tar ends with its two zero blocks, without the zeros tarfile pads it with to a
    whole 10 KiB record (readers need none): a sandbox of one small file is 1.5 KiB, not
    10, in the messages that carry it. Its files' times are whole seconds, as a plain
    (ustar) header holds them: a fraction took a pax header of its own for each file
    (1 KiB, and a third of the packing's time).

    A file that cannot be read is a TransferError with `code` (the job is held for it).
    """
    try:
        if isinstance(dest, Path):
            with tarfile.open(dest, "w", dereference=dereference) as tar:
                for name, path in entries:
                    _add(tar, path, name, dereference)
                end = _end(tar)
            os.truncate(dest, end)
            return end
        with tarfile.open(fileobj=dest, mode="w", dereference=dereference) as tar:
            for name, path in entries:
                _add(tar, path, name, dereference)
            end = _end(tar)
        dest.truncate(end)
        dest.seek(end)
        dest.flush()
        return dest.tell()
    except (tarfile.TarError, OSError) as exc:
        what = "input" if code == HoldReasonCode.TransferInputError else "output"
        raise TransferError(
            f"Transfer {what} files failure: {exc}", code, getattr(exc, "errno", 0) or 0
        ) from exc


def _end(tar: tarfile.TarFile) -> int:
    """Where the tar being written ends: its members, then the two zero blocks that mark
    the end. tarfile pads it further, to a 10 KB record, which no reader needs: a short
    job's output tar (two empty files) was 10 KB, 8 of them zeros, in every job's end."""
    return tar.offset + 2 * tarfile.BLOCKSIZE


def _add(tar: tarfile.TarFile, path: Path, name: str, dereference: bool) -> None:
    """`tar.add` of one entry; a regular file without the owner and group names that
    tarfile looks up for each member (two reads of the account files: nobody reads them
    from these tars), nor its hard links to others (which no side unpacks), its time in
    whole seconds."""
    st = os.stat(path) if dereference else os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        tar.add(path, arcname=name, recursive=True, filter=_whole_seconds)
        return
    info = tar.tarinfo(name.replace(os.sep, "/").lstrip("/"))
    info.mode, info.uid, info.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    # Whole seconds: a fraction took a pax header (two blocks) a member.
    info.size, info.mtime = st.st_size, int(st.st_mtime)
    if not st.st_size:  # a short job's stdout, often: nothing to open
        tar.addfile(info)
        return
    with open(path, "rb", buffering=0) as f:
        tar.addfile(info, f)


def _whole_seconds(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.mtime = int(member.mtime)
    return member


def unpack_input(
    tar_path: Tar, sandbox: Path, limit: SizeLimit = NO_LIMIT, *, dir_fd: int | None = None
) -> dict[str, Written] | None:
    """Extract an input tar (a path, or a file open at its start) into the sandbox: links
    out, escapes and special files refused, its files' sizes (a sparse file's whole) and
    its members counted against `limit` and MAX_TAR_MEMBERS, all before anything is
    written.

    Given `dir_fd`, the new sandbox open, a flat tar (regular files named without a
    directory, none twice: an executable and its inputs, as most sandboxes are) is
    written through it in six calls a file, where tarfile's checks and extraction take
    some thirty; then what was written, by name (None from tarfile's extraction). Each
    call hands the GIL to the node's event loop and back, which under load is a few
    context switches."""
    try:
        with _open_tar(tar_path) as tar:
            members = listed_members(tar)
            limit.check(unpacked_size(members), "the input sandbox (its files unpacked)")
            if dir_fd is not None and _flat(members):
                return {m.name: _write_member(tar, m, dir_fd) for m in members}
            for member in members:  # each refused before any is written
                tarfile.data_filter(member, str(sandbox))
            tar.extractall(sandbox, members=members, filter="data")
            return None
    except SandboxTooLarge as exc:
        raise TransferError(
            f"Transfer input files failure: {exc}", HoldReasonCode.MaxTransferInputSizeExceeded
        ) from exc
    except (tarfile.TarError, OSError) as exc:
        raise TransferError(
            f"Transfer input files failure: cannot unpack the input sandbox: {exc}",
            HoldReasonCode.TransferInputError,
        ) from exc


@dataclass(frozen=True, slots=True)
class Written:
    """A file `unpack_input` wrote: its mode and modification time (ns)."""

    mode: int
    mtime_ns: int


_PLAIN: Final = (tarfile.REGTYPE, tarfile.AREGTYPE)


def _flat(members: list[tarfile.TarInfo]) -> bool:
    names = {m.name for m in members}
    return len(names) == len(members) and all(
        m.type in _PLAIN
        and m.name not in ("", ".", "..")
        and "/" not in m.name
        and "\0" not in m.name
        and m.name not in _OURS
        for m in members
    )


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dir_fd: int) -> Written:
    """One regular file of a flat tar, made in the directory `dir_fd` with the mode and
    time tarfile's data filter gives it (no set-id bits, nor write for others; read and
    write for its owner, execute only if the owner had it)."""
    source = tar.extractfile(member)
    data = source.read() if source is not None else b""
    mode = member.mode & 0o755
    if not mode & 0o100:
        mode &= ~0o111
    mode |= 0o600
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(member.name, flags, mode, dir_fd=dir_fd)
    try:
        write_all(fd, data)
        os.fchmod(fd, mode)  # the daemon's umask took some
        os.utime(fd, (member.mtime, member.mtime))
        return Written(mode, os.fstat(fd).st_mtime_ns)
    finally:
        os.close(fd)


def snapshot(sandbox: Path) -> dict[str, int]:
    """The sandbox's top-level files and their modification times (ns)."""
    out = {}
    for entry in os.scandir(sandbox):
        if entry.is_file(follow_symlinks=False):
            out[entry.name] = entry.stat(follow_symlinks=False).st_mtime_ns
    return out


def top_level(sandbox: Path) -> dict[str, os.stat_result]:
    """The sandbox's entries and their own status (a link's, not its target's): one read
    of the directory and one call an entry."""
    with os.scandir(sandbox) as found:
        return {entry.name: entry.stat(follow_symlinks=False) for entry in found}


def output_entries(
    job: ClassAd,
    sandbox: Path,
    before: Mapping[str, int],
    *,
    strict: bool,
    top: Mapping[str, os.stat_result] | None = None,
) -> list[tuple[str, Path]]:
    """What goes back: stdout, stderr, and the listed or new and changed files (not the
    job's proxy); `top` is the sandbox's `top_level`, if read already.

    A listed file that does not exist is a TransferError when `strict` (the job
    exited), skipped otherwise (an eviction keeps what there is).
    """
    listed = job.get("TransferOutput")
    if top is None and not isinstance(listed, str):
        top = top_level(sandbox)
    if top is None:
        entries = [(n, sandbox / n) for n in (STDOUT, STDERR) if (sandbox / n).is_file()]
    else:
        entries = [(n, sandbox / n) for n in (STDOUT, STDERR) if n in top and _regular(top[n])]
    if isinstance(listed, str):
        for item in _split(listed):
            path = sandbox / item
            if not path.exists():
                if strict:
                    raise _missing(path, "output", HoldReasonCode.TransferOutputError)
                continue
            if not _inside(sandbox, path):  # nothing is taken out of the sandbox by a link
                if strict:
                    raise TransferError(
                        f"Transfer output files failure: {item}: a link out of the job's "
                        "sandbox, which is not followed",
                        HoldReasonCode.TransferOutputError,
                    )
                continue
            entries.append((PurePosixPath(item.rstrip("/")).name, path))
        return entries
    # The job's X.509 proxy came with its input and is never output, also when the shadow
    # renewed it meanwhile (HTCondor's file transfer leaves it out too).
    proxy = _text(job, "x509userproxy")
    skip = _OURS | {PurePosixPath(proxy).name} if proxy else _OURS
    assert top is not None
    for name in sorted(top):
        st = top[name]
        if name not in skip and _regular(st) and before.get(name) != st.st_mtime_ns:
            entries.append((name, sandbox / name))
    return entries


def _regular(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode)


def _inside(sandbox: Path, path: Path) -> bool:
    """Whether `path`, its links resolved, is in `sandbox` (a link itself, as the last
    step, is packed as a link, never followed)."""
    where = os.path.realpath(path.parent) if path.is_symlink() else os.path.realpath(path)
    return (where + "/").startswith(os.path.realpath(sandbox) + "/")


def _remaps(job: ClassAd) -> dict[str, str]:
    out = {}
    for pair in (_text(job, "TransferOutputRemaps") or "").split(";"):
        name, eq, dest = pair.partition("=")
        if eq and name.strip() and dest.strip():
            out[name.strip()] = dest.strip()
    return out


def _safe_parts(name: str) -> tuple[str, ...] | None:
    """The member name's parts, or None when it is absolute or climbs out."""
    path = PurePosixPath(name)
    if path.is_absolute() or any(part in ("..", "") for part in path.parts) or not path.parts:
        return None
    return tuple(p for p in path.parts if p != ".")


def unpack_output(tar_path: Tar, job: ClassAd, limit: SizeLimit = NO_LIMIT) -> int:
    """Place an output tar's members in Iwd, Out, Err or their remaps; bytes written.
    Its files' sizes (a sparse file's whole) and its members are counted against `limit`
    and MAX_TAR_MEMBERS before anything is written (TransferError)."""
    iwd = _iwd(job)
    remaps = _remaps(job)
    dests: dict[str, Path | None] = {}
    for name, attr, transfer in ((STDOUT, "Out", "TransferOut"), (STDERR, "Err", "TransferErr")):
        target = _text(job, attr)
        keep = target and target != os.devnull and job.get(transfer) is not False
        dests[name] = iwd / target if keep and target else None
    written = 0
    try:
        with _open_tar(tar_path) as tar:
            members = listed_members(tar)
            limit.check(unpacked_size(members), "the output sandbox (its files unpacked)")
            for member in members:
                parts = _safe_parts(member.name)
                if parts is None or not (member.isfile() or member.isdir()):
                    continue  # never written outside its place, never a link
                top = parts[0]
                base = dests[top] if top in dests else iwd / remaps.get(top, top)
                if base is None:
                    continue
                dest = base.joinpath(*parts[1:])
                if member.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                source = tar.extractfile(member)
                if source is None:
                    continue
                with source:
                    _place(source, dest, (member.mode & 0o755) | 0o600)
                written += member.size
    except SandboxTooLarge as exc:
        raise TransferError(
            f"Transfer output files failure: {exc}", HoldReasonCode.MaxTransferOutputSizeExceeded
        ) from exc
    except (tarfile.TarError, OSError) as exc:
        raise TransferError(
            f"Transfer output files failure: cannot write the output sandbox: {exc}",
            HoldReasonCode.TransferOutputError,
            getattr(exc, "errno", 0) or 0,
        ) from exc
    return written


def _place(source: IO[bytes], dest: Path, mode: int) -> None:
    """`source` written to `dest` (made, or emptied), which then has `mode`: three calls
    for an empty file, a short job's stdout (each hands the GIL to the schedd's loop and
    back); its directory made only when it is missing."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    try:
        fd = os.open(dest, flags, mode)
    except FileNotFoundError:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(dest, flags, mode)
    try:
        while chunk := source.read(_CHUNK):
            write_all(fd, chunk)
        os.fchmod(fd, mode)  # also a file that was there, whatever the umask
    finally:
        os.close(fd)


_CHUNK: Final = 1 << 20


def unpack_to(tar_path: Tar, directory: Path) -> int:
    """Replace what `directory` holds (it is made if missing) with the contents of a tar
    (an evicted job's spooled output)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
        with _open_tar(tar_path) as tar:
            tar.extractall(directory, filter="data")
            return sum(m.size for m in tar.getmembers())
    except (tarfile.TarError, OSError) as exc:
        raise TransferError(
            f"Transfer output files failure: cannot spool the output sandbox: {exc}",
            HoldReasonCode.TransferOutputError,
        ) from exc
