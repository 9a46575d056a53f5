"""The spool directories of jobs whose sandboxes travel over the network (HTCondor-C).

A job submitted held with HoldReasonCode 16 (SpoolingInput) runs in
`<home>/spool/<cluster>/<proc>/` (`make_dirs` makes a submit's many at once). Its input
arrives as a plain tar, kept in memory up to 1 MiB and beyond that streamed to an unnamed
temporary file beside the sandbox (`receive_input`, never whole in memory), then
unpacked (`unpack_input`; several jobs' inputs in one tar, a top-level directory per job,
with `read_batch` and `unpack_members`, each job refused or unpacked on its own); its
output leaves as one, packed into an unnamed temporary file (`_spool_output`'s
`pack_output`; several jobs' outputs in one tar, `jobs.json` first, with `output_files`
and `pack_outputs`).
`unpack_input` and the packing block: call them off the event loop.
Both directions are capped (`SizeLimit`: MAX_TRANSFER_INPUT_MB, MAX_TRANSFER_OUTPUT_MB).

Nothing a caller sends may land outside the sandbox, nor take more room than the cap
says: members must be regular files or directories with relative names and no `..`, a
sparse file counts by its whole size (it is written whole), an upload holds at most
MAX_TAR_MEMBERS members, symbolic links are neither made nor followed
(a job may leave one pointing at a file it must not hand out), and the files of an upload
are written aside, synced, then renamed into place, so a crash mid-upload leaves the
sandbox as it was (the temporary tar has no name: a crash leaves nothing behind). What came in is remembered (`<proc>.input.json` beside the sandbox) so
that the output is what the job made or changed.

A cluster's directory (`<spool>/<cluster>/`, mode 0700) and everything in it belong to
the jobs' owner, and every file of a sandbox is read and written with the owner's
rights (`htgrid._privsep`, the `account` arguments): when the daemons run as root, a
job's output is only what its owner may read, its input lands only where its owner may
write. A path inside the sandbox is opened without following any link
(`open_beneath`); a path elsewhere (an absolute Out, an Iwd not spooled) as the owner
would open it.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import AsyncIterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final

from cryptography import x509

from htgrid._files import write_atomic
from htgrid._privsep import Account, as_owner, owned_dir, spawn_identity
from htgrid.net import BadRequest, SandboxTooLarge
from htgrid.net.server import (
    NO_LIMIT,
    SizeLimit,
    empty_job_dirs,
    listed_members,
    unpacked_size,
)

__all__ = [
    "BatchInput",
    "cut_short_uploads",
    "make_dirs",
    "manifest_path",
    "proxy_expiration",
    "read_batch",
    "read_manifest",
    "receive_input",
    "replace_proxy",
    "scratch_file",
    "unpack_input",
    "unpack_members",
]

_CHUNK: Final = 1 << 20
#: `make_dirs` starts a process for this many directories or more, and gives it at most
#: _MKDIR_ARGS of them (an argument list stays far below the kernel's limit).
_MKDIR_PROCESS_FROM: Final = 8
_MKDIR_ARGS: Final = 500
Manifest = dict[str, tuple[int, int]]  # member name -> (size, mtime in ns)
Member = tuple[tarfile.TarInfo, PurePosixPath]  # a tar member, its name in the sandbox


def manifest_path(sandbox: Path) -> Path:
    """Where the names of a sandbox's uploaded files are kept (beside it, not in it)."""
    return sandbox.with_name(f"{sandbox.name}.input.json")


def cut_short_uploads(sandbox: Path) -> Iterator[Path]:
    """The directories of uploads into `sandbox` that a crash cut short (beside it)."""
    return sandbox.parent.glob(f".{sandbox.name}.incoming-*")


def _member_name(name: str) -> PurePosixPath:
    """A member's name as a path inside the sandbox (BadRequest when it would leave it)."""
    path = PurePosixPath(name)
    if not name or "\0" in name or path.is_absolute() or name.startswith("/"):
        raise BadRequest(f"the tar member {name!r} has an absolute name; names are relative")
    parts = [p for p in path.parts if p != "."]
    if not parts or ".." in parts:
        raise BadRequest(f"the tar member {name!r} leaves the sandbox ('..')")
    return PurePosixPath(*parts)


def _checked_member(member: tarfile.TarInfo, name: str) -> PurePosixPath:
    """The sandbox path of `member` (its tar name `name` relative to the sandbox)."""
    rel = _member_name(name)
    if not (member.isfile() or member.isdir()):
        kind = "a link" if member.issym() or member.islnk() else "not a regular file"
        raise BadRequest(f"the tar member {member.name!r} is {kind}; send files only")
    return rel


def _checked_members(tar: tarfile.TarFile) -> list[Member]:
    return [(member, _checked_member(member, member.name)) for member in listed_members(tar)]


def _directory(root: Path, rel: PurePosixPath) -> Path:
    """`root/rel` as a real directory (made if missing); BadRequest through a link."""
    here = root
    for part in rel.parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            here.mkdir(mode=0o755)
            os.chmod(here, 0o755)  # as sent, whatever the daemon's umask
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise BadRequest(
                f"{here.relative_to(root)} in the sandbox is not a directory "
                "(nothing is written through a link)"
            )
    return here


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(sandbox: Path) -> Manifest:
    try:
        raw = json.loads(manifest_path(sandbox).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return {str(k): (int(v[0]), int(v[1])) for k, v in raw.items()}


def replace_proxy(sandbox: Path, name: str, data: bytes, *, sync: bool) -> None:
    """`data` in the place of the sandbox's file `name`, a base name (a job's renewed
    X.509 proxy): written whole, mode 0600, then renamed over the old one (a link there
    is replaced, not followed); noted as uploaded, so it does not go back as output."""
    target = sandbox / name
    write_atomic(target, data, sync=sync, mode=0o600)
    manifest = read_manifest(sandbox)
    st = os.lstat(target)
    manifest[name] = (st.st_size, st.st_mtime_ns)
    write_atomic(manifest_path(sandbox), json.dumps(manifest).encode(), sync=sync)


def proxy_expiration(data: bytes) -> int | None:
    """When an X.509 proxy file's first certificate (the proxy's own) expires, in epoch
    seconds; None when the file holds no PEM certificate."""
    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError:
        return None
    return int(cert.not_valid_after_utc.timestamp())


def scratch_file(directory: Path | None) -> BinaryIO:
    """A new file without a name in `directory` (made if missing): gone when closed, or
    when the process dies."""
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryFile("w+b", dir=directory)


async def receive_input(
    directory: Path,
    chunks: AsyncIterable[bytes],
    limit: SizeLimit,
    what: str,
) -> BinaryIO:
    """The request body `chunks`, rewound: in memory up to 1 MiB, else written to an
    unnamed file in `directory`.

    Disk writes go to a thread a MiB at a time; SandboxTooLarge as soon as the body
    passes `limit` (the file is closed, so its space is freed at once). A small body
    stays in memory because reading a tar from a file costs system calls per member, in
    a thread that waits for the GIL after each one while the daemon is busy: a stage-in
    batch of 250 small sandboxes is ~130 KiB.
    """
    spooled: BinaryIO | None = None
    try:
        pending: list[bytes] = []
        buffered = total = 0
        async for chunk in chunks:
            total += len(chunk)
            limit.check(total, what, at_least=True)
            pending.append(chunk)
            buffered += len(chunk)
            if buffered >= _CHUNK:
                if spooled is None:
                    spooled = await asyncio.to_thread(scratch_file, directory)
                await asyncio.to_thread(spooled.write, b"".join(pending))
                pending, buffered = [], 0
        if spooled is None:
            return io.BytesIO(b"".join(pending))
        if pending:
            await asyncio.to_thread(spooled.write, b"".join(pending))
        await asyncio.to_thread(spooled.seek, 0)
    except BaseException:
        if spooled is not None:
            spooled.close()
        raise
    return spooled


def make_dirs(paths: Sequence[Path], account: Account | None = None) -> None:
    """Make those of the job directories `paths` (`<spool>/<cluster>/<proc>`) that are
    missing, `account`'s (None: the daemon's own); OSError naming the first that could
    not be made.

    Each cluster's directory is made by the daemon and given to the owner (mode 0700);
    the jobs' directories in it are made as the owner. Looked for with one listing per
    parent; many missing are made by one `mkdir -p` process. Made here one by one, each
    `mkdir` (or look) releases the GIL and then waits up to the switch interval (5 ms)
    to take it back from the daemon's busy threads: 250 directories took 1.3 s beside
    one thread running Python, against 7 ms for a `mkdir` process.
    """
    missing = _missing(paths)
    if not missing:
        return
    for parent in dict.fromkeys(path.parent for path in missing):
        parent.parent.mkdir(parents=True, exist_ok=True)
        owned_dir(parent, account)
    if len(missing) < _MKDIR_PROCESS_FROM:
        with as_owner(account):
            for path in missing:
                path.mkdir(mode=0o700, exist_ok=True)
        return
    mkdir = shutil.which("mkdir") or "/bin/mkdir"
    for start in range(0, len(missing), _MKDIR_ARGS):
        argv = [mkdir, "-p", "-m", "0700", "--"]
        argv += [str(p) for p in missing[start : start + _MKDIR_ARGS]]
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            **spawn_identity(account),
        )
        if done.returncode != 0:
            detail = done.stderr.decode(errors="replace").strip().splitlines()
            raise OSError(f"cannot make spool directories: {detail[0] if detail else argv[5]}")


def _missing(paths: Sequence[Path]) -> list[Path]:
    """Those of `paths` whose parent does not list them (a file of the name counts as
    missing: making it fails and says so)."""
    listed: dict[Path, set[str]] = {}
    missing = []
    for path in paths:
        names = listed.get(path.parent)
        if names is None:
            try:
                with os.scandir(path.parent) as entries:
                    names = {e.name for e in entries if e.is_dir(follow_symlinks=False)}
            except (FileNotFoundError, NotADirectoryError):
                names = set()
            listed[path.parent] = names
        if path.name not in names:
            missing.append(path)
    return missing


def unpack_input(
    sandbox: Path,
    data: bytes | BinaryIO,
    limit: SizeLimit = NO_LIMIT,
    what: str = "the input sandbox",
    *,
    sync: bool = True,
) -> list[str]:
    """Unpack a plain tar (bytes or a file) into `sandbox` (made if missing); the files
    written.

    Every member is checked before anything is written (BadRequest naming the first bad
    one), and the files' sizes against `limit` (SandboxTooLarge); the files are written
    to a directory aside and renamed into place.
    """
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    try:
        with tarfile.open(fileobj=source, mode="r:") as tar:
            members = _checked_members(tar)
            limit.check(unpacked_size(m for m, _ in members), f"{what} (its files unpacked)")
            return unpack_members(tar, members, sandbox, sync=sync)
    except tarfile.TarError as exc:
        raise BadRequest(f"the request body is not a whole tar archive: {exc}") from None


@dataclass(frozen=True, slots=True)
class BatchInput:
    """The input sandboxes of several jobs in one tar (`read_batch`), still open.

    `members` maps each job id named ("cluster.proc", a top-level directory) to its
    members, named relative to that job's sandbox; `problems` the jobs refused already
    (a bad member, a sandbox over the limit), with the reason.
    """

    tar: tarfile.TarFile
    members: dict[str, list[Member]]
    problems: dict[str, BadRequest | SandboxTooLarge]


_JOB_DIR: Final = re.compile(r"[0-9]+\.[0-9]+")


def read_batch(data: BinaryIO, limit: SizeLimit) -> BatchInput:
    """The jobs of a batch upload: a tar whose top-level directories are job ids
    (`12.0/in.txt`, `12.1/`); the caller closes `.tar`.

    A member outside any job's directory (`../x`, `/x`, `x.txt`) refuses the whole
    upload (BadRequest naming it); a bad member inside one (`12.0/../x`, a link) and a
    sandbox over `limit` (its files summed) refuse only that job.
    """
    empty = empty_job_dirs(data)  # at most MAX_TAR_MEMBERS headers
    try:
        tar = tarfile.open(fileobj=data, mode="r:")  # noqa: SIM115 - the caller closes it
    except tarfile.TarError as exc:
        raise BadRequest(f"the request body is not a whole tar archive: {exc}") from None
    try:
        if empty is not None:  # only empty job directories: each job has no member
            return BatchInput(tar, {job: [] for job in empty}, {})
        listed = listed_members(tar)
    except tarfile.TarError as exc:
        tar.close()
        raise BadRequest(f"the request body is not a whole tar archive: {exc}") from None
    except BaseException:
        tar.close()
        raise
    members: dict[str, list[Member]] = {}
    problems: dict[str, BadRequest | SandboxTooLarge] = {}
    sizes: dict[str, int] = {}
    try:
        for member in listed:
            name = member.name[2:] if member.name.startswith("./") else member.name
            job, _, rest = name.partition("/")
            if not _JOB_DIR.fullmatch(job):
                raise BadRequest(
                    f"the tar member {member.name!r} is not under a job's directory "
                    "(cluster.proc/...)"
                )
            found = members.setdefault(job, [])
            if job in problems or not rest.strip("/"):
                if not member.isdir() and job not in problems:
                    problems[job] = BadRequest(
                        f"the tar member {member.name!r} must be a directory (the job's sandbox)"
                    )
                continue
            try:
                found.append((member, _checked_member(member, rest)))
            except BadRequest as exc:
                problems[job] = exc
                continue
            sizes[job] = sizes.get(job, 0) + unpacked_size((member,))
        for job, size in sizes.items():
            if job not in problems:
                try:
                    limit.check(size, f"the input sandbox of job {job} (its files unpacked)")
                except SandboxTooLarge as exc:
                    problems[job] = exc
    except BaseException:
        tar.close()
        raise
    for job in problems:
        members.pop(job, None)
    return BatchInput(tar, members, problems)


def unpack_members(
    tar: tarfile.TarFile, members: list[Member], sandbox: Path, *, sync: bool = True
) -> list[str]:
    """Write `members` of `tar` (checked, named relative to the sandbox) into `sandbox`
    (made if missing); the files written. `sync`: files and directory synced to disk
    before this returns (off only where the queue itself is not synced, QUEUE_FSYNC)."""
    sandbox.mkdir(parents=True, exist_ok=True)
    if not members:
        return []  # an empty sandbox: nothing to write, the manifest stays as it is
    for stale in cut_short_uploads(sandbox):
        shutil.rmtree(stale, ignore_errors=True)  # an upload a crash cut short
    incoming = sandbox.with_name(f".{sandbox.name}.incoming-{secrets.token_hex(6)}")
    incoming.mkdir()
    try:
        staged = _stage(tar, members, incoming, sync)
        targets = [(rel, _directory(sandbox, rel.parent) / rel.name) for rel in staged]
        for rel, target in targets:
            if target.is_dir() and not target.is_symlink():
                raise BadRequest(f"the tar member {str(rel)!r} names a directory there")
        manifest = read_manifest(sandbox)
        for rel, target in targets:
            os.replace(incoming / rel, target)  # replaces a link, never follows it
            st = os.lstat(target)
            manifest[str(rel)] = (st.st_size, st.st_mtime_ns)
        if sync:
            _fsync_dir(sandbox)
        write_atomic(manifest_path(sandbox), json.dumps(manifest).encode(), sync=sync)
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
    return [str(rel) for rel in staged]


def _stage(
    tar: tarfile.TarFile,
    members: list[tuple[tarfile.TarInfo, PurePosixPath]],
    incoming: Path,
    sync: bool = True,
) -> list[PurePosixPath]:
    """Write the members' files under `incoming`, synced; their relative names."""
    staged: dict[PurePosixPath, None] = {}
    for member, rel in members:
        if member.isdir():
            _directory(incoming, rel)
            continue
        if rel in staged:
            raise BadRequest(f"the tar member {member.name!r} appears twice")
        source = tar.extractfile(member)
        if source is None:  # pragma: no cover - isfile() members always have data
            raise BadRequest(f"the tar member {member.name!r} has no data")
        path = _directory(incoming, rel.parent) / rel.name
        mode = 0o755 if member.mode & 0o111 else 0o644
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)  # as sent, whatever the daemon's umask
            shutil.copyfileobj(source, out, _CHUNK)
            out.flush()
            if sync:
                os.fsync(out.fileno())
        if member.mtime:
            os.utime(path, (member.mtime, member.mtime))
        staged[rel] = None
    return list(staged)
