"""A shadow's transfers of its job's sandboxes: the input packed and streamed to the
claim, the output brought back (with the job's end when it is small, else streamed) and
placed in Iwd, or in the spool for an evicted run's next one.

The job's files are read and written with its owner's rights; the transfer tars are the
daemon's own files, opened by the daemon and handed to the owner's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import stat
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

from htgrid._files import private_file
from htgrid._privsep import Account, as_owner, owned_dir
from htgrid.classad import ClassAd
from htgrid.net import SandboxTooLarge
from htgrid.net.server import SizeLimit
from htgrid.queue import HoldReasonCode
from htgrid.schedd._shadow_base import Evicted, Unreachable
from htgrid.startd import (
    ClaimNotFound,
    StartdError,
    StartdUnavailable,
    TransferError,
    input_entries,
    input_size,
    pack,
    unpack_output,
    unpack_to,
)

if TYPE_CHECKING:
    from htgrid.schedd._shadow_run import ShadowRun

__all__ = [
    "INLINE_INPUT",
    "InputTars",
    "fetch_output",
    "remove_tree",
    "send_input",
    "small_input",
    "unlink",
]

#: Input files up to this size go with the activation (one request a job fewer).
INLINE_INPUT: Final = 1 << 18


#: How many bytes of packed input tars a schedd keeps (`InputTars`).
INPUT_TARS: Final = 4 << 20

# What a small input tar is kept by: its job's owner (Owner and the account the files
# are read as), then each file's name in the sandbox, path and identity (device, inode,
# size, modification and change times: a chmod or chown changes the last).
_Key = tuple[object, ...]


class InputTars:
    """The packed input tars of small sandboxes of regular files, most recent first,
    up to `limit` bytes: the jobs of a cluster send the same executable, packed once.

    A tar is kept for the owner who read its files, and given only to that owner again,
    for files that are still those it was packed from (each `stat`ed, and opened, as
    the owner: a file it may no longer read is not sent from here either)."""

    def __init__(self, limit: int = INPUT_TARS) -> None:
        self.limit = limit
        self._tars: OrderedDict[_Key, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()  # the transfer threads share it

    def get(self, key: _Key) -> bytes | None:
        with self._lock:
            data = self._tars.get(key)
            if data is not None:
                self._tars.move_to_end(key)
            return data

    def put(self, key: _Key, data: bytes) -> None:
        if len(data) > self.limit:
            return
        with self._lock:
            old = self._tars.pop(key, None)
            self._size += len(data) - (0 if old is None else len(old))
            self._tars[key] = data
            while self._size > self.limit:
                _, dropped = self._tars.popitem(last=False)
                self._size -= len(dropped)


def _identity(
    owner: object, account: Account | None, entries: list[tuple[str, Path]]
) -> _Key | None:
    """The key of `entries`' tar for `owner` (as `account`): None unless all are regular
    files (a directory's contents are not keyed). Each is opened, as the owner, as
    packing would: one it may not read is refused as packing refuses it."""
    key: list[object] = [owner, account]
    for name, path in entries:
        try:
            st = os.stat(path)
        except OSError:
            return None  # packing says what is wrong with it
        if not stat.S_ISREG(st.st_mode):
            return None
        key.append(
            (name, str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        )
    return tuple(key)


def _readable(entries: list[tuple[str, Path]]) -> bool:
    try:
        for _, path in entries:
            os.close(os.open(path, os.O_RDONLY))
    except OSError:
        return False
    return True


async def small_input(run: ShadowRun, ad: ClassAd) -> tuple[bytes, int, bool] | None:
    """The job's input tar, when its files travel and are small (`INLINE_INPUT`): its
    bytes, their count (BytesSent) and whether an evicted run's output waited in the spool; None for a
    larger one, which streams after the activation (`send_input`). TransferError over
    the job's size limit, or when a file cannot be read. Kept for the owner's next
    jobs with the same files (`InputTars`)."""
    if str(ad.get("ShouldTransferFiles", "YES")).upper() == "NO":
        return None
    s = run.m.settings
    account, jid = run.account, run.job_id
    limit = _job_limit(ad, "MaxTransferInputMB", s.max_input)
    tars = run.m.input_tars
    owner = ad.get("Owner")

    def build() -> tuple[bytes, int, bool] | None:
        spooled = s.spooled(jid)  # here: the loop's time is the scarcer
        with as_owner(account):
            kept = spooled.is_dir()
            entries = input_entries(ad, spooled)
            size = input_size(entries)
            _check_input(limit, size)
            if size > INLINE_INPUT:
                return None
            key = _identity(owner, account, entries)
            if key is not None and _readable(entries):
                data = tars.get(key)
                if data is not None:
                    return data, len(data), kept
            out = io.BytesIO()
            sent = pack(entries, out, dereference=True)
            data = out.getvalue()
            # Kept only when no file changed while it was packed.
            if key is not None and _identity(owner, account, entries) == key:
                tars.put(key, data)
            return data, sent, kept

    return await asyncio.to_thread(build)


def _check_input(limit: SizeLimit, size: int) -> None:
    """Before a byte is packed or sent."""
    try:
        limit.check(size, "the input sandbox")
    except SandboxTooLarge as exc:
        raise TransferError(
            f"Transfer input files failure: {exc}",
            HoldReasonCode.MaxTransferInputSizeExceeded,
        ) from None


async def send_input(run: ShadowRun, ad: ClassAd) -> tuple[int, bool]:
    """Pack the job's input (within its size limit) and stream it to the claim: its
    size, and whether an evicted run's output waited in the spool (sent with it)."""
    s = run.m.settings
    tar = s.transfers / f"{run.claim_id}.in.tar"
    spooled = s.spooled(run.job_id)
    account = run.account
    limit = _job_limit(ad, "MaxTransferInputMB", s.max_input)

    def build() -> tuple[int, bool]:
        tar.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with private_file(tar) as out, as_owner(account):
            kept = spooled.is_dir()
            entries = input_entries(ad, spooled)
            _check_input(limit, input_size(entries))
            return pack(entries, out, dereference=True), kept

    try:
        size, kept = await asyncio.to_thread(build)
        await run.call(run.client.send_input(run.claim_id, tar))
    finally:
        await asyncio.to_thread(unlink, tar)
    return size, kept


async def fetch_output(
    run: ShadowRun, ad: ClassAd, *, spool: bool, inline: bytes | None, dir_made: bool
) -> int:
    """Bring the output sandbox back into Iwd (or the spool, for an eviction): `inline`,
    the tar the node sent with the job's end, or else fetched from the node into the
    transfer directory (`dir_made`: the input's tar made it)."""
    s = run.m.settings
    limit = _job_limit(ad, "MaxTransferOutputMB", s.max_output)
    account, jid = run.account, run.job_id

    def place(source: BinaryIO) -> int:
        if spool:
            kept = s.spooled(jid)
            owned_dir(kept.parent, None, 0o711)  # users pass through
            owned_dir(kept, account)
            with as_owner(account):
                return unpack_to(source, kept)
        with as_owner(account):
            return unpack_output(source, ad, limit)

    if inline is not None:
        try:
            limit.check(len(inline), "the output sandbox", at_least=True)
        except SandboxTooLarge as exc:
            raise _too_large(exc) from None
        return await asyncio.to_thread(place, io.BytesIO(inline))
    tar = s.transfers / f"{run.claim_id}.out.tar"

    def check(size: int) -> None:
        limit.check(size, "the output sandbox", at_least=True)

    def place_file() -> int:
        try:
            with open(tar, "rb") as source:  # the daemon's file, read by the owner's
                return place(source)
        finally:
            unlink(tar)

    try:
        if not dir_made:
            await asyncio.to_thread(tar.parent.mkdir, parents=True, exist_ok=True)
        try:
            await run.client.fetch_output(run.claim_id, tar, check)
        except SandboxTooLarge as exc:  # the rest is not read; nothing is placed
            raise _too_large(exc) from None
        except StartdUnavailable as exc:
            if run.remote:  # cut off, perhaps for a while: the output waits there
                raise Unreachable(f"the output sandbox did not arrive: {exc}") from None
            raise Evicted(f"the output sandbox is lost with the execute node: {exc}") from None
        except ClaimNotFound as exc:
            # The node died with the output: its run is lost, not the job.
            raise Evicted(f"the output sandbox is lost with the execute node: {exc}") from None
        except StartdError as exc:
            raise TransferError(
                f"Transfer output files failure: {exc}", HoldReasonCode.TransferOutputError
            ) from exc
        return await asyncio.to_thread(place_file)
    except BaseException:
        await asyncio.to_thread(unlink, tar)
        raise


def _too_large(exc: SandboxTooLarge) -> TransferError:
    return TransferError(
        f"Transfer output files failure: {exc}", HoldReasonCode.MaxTransferOutputSizeExceeded
    )


def _job_limit(ad: ClassAd, attr: str, default: SizeLimit) -> SizeLimit:
    """The job's own cap on a sandbox (`attr`, MiB; -1: none), else the daemon's."""
    value = ad.eval(attr) if attr in ad else None
    if isinstance(value, int) and not isinstance(value, bool):
        return SizeLimit(f"{attr} (the job's)", None if value < 0 else value)
    return default


def unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
