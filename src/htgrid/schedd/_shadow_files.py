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
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

from htgrid._files import private_file
from htgrid._privsep import as_owner, owned_dir
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

__all__ = ["INLINE_INPUT", "fetch_output", "remove_tree", "send_input", "small_input", "unlink"]

#: Input files up to this size go with the activation (one request a job fewer).
INLINE_INPUT: Final = 1 << 18


async def small_input(run: ShadowRun, ad: ClassAd) -> tuple[bytes, int, bool] | None:
    """The job's input tar, when its files travel and are small (`INLINE_INPUT`): its
    bytes, their count (BytesSent) and whether an evicted run's output waited in the spool; None for a
    larger one, which streams after the activation (`send_input`). TransferError over
    the job's size limit, or when a file cannot be read."""
    if str(ad.get("ShouldTransferFiles", "YES")).upper() == "NO":
        return None
    s = run.m.settings
    spooled = s.spooled(run.job_id)
    account = run.account
    limit = _job_limit(ad, "MaxTransferInputMB", s.max_input)

    def build() -> tuple[bytes, int, bool] | None:
        with as_owner(account):
            kept = spooled.is_dir()
            entries = input_entries(ad, spooled)
            size = input_size(entries)
            _check_input(limit, size)
            if size > INLINE_INPUT:
                return None
            out = io.BytesIO()
            sent = pack(entries, out, dereference=True)
            return out.getvalue(), sent, kept

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
    account, kept = run.account, s.spooled(run.job_id)

    def place(source: BinaryIO) -> int:
        if spool:
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
