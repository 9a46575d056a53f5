"""Job files over CEDAR (`Schedd.spool`, `Schedd.retrieve`; condor_submit -spool,
condor_transfer_data), which htgrid's schedd does not do: HTCondor's file transfer
protocol (FileTransfer's uploads and downloads, their go-ahead and acknowledgements)
is not implemented. The schedd takes and gives a job's files over its HTTPS API only.

So that the client says why rather than failing on a dropped connection, the refusal
goes where the protocol carries a reason:

- SPOOL_JOB_FILES(_WITH_PERMS): the client's version, the job count and ids, then its
  upload of each job's files; the first thing the uploader reads from the schedd is the
  go-ahead for its first file (or, with no file, the schedd's acknowledgement), and
  both are an ad whose `Result = -1` and `HoldReason` fail the upload with that text.
- TRANSFER_DATA(_WITH_PERMS): the client's version and constraint; the schedd answers
  the number of jobs and, for the first of them, its ad and an upload with no file
  (`Finished`) whose acknowledgement fails with the reason. No job matching: nothing
  to send, as HTCondor answers.

A cluster submitted to wait for its spooled input (spool=True) is refused at its
commit (`_qmgmt`) with the same reason, so that no job is left held for files that
cannot come.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from htgrid.classad import quote
from htgrid.errors import HTGridError
from htgrid.net import CedarError
from htgrid.net.cedar import CedarCall, Command, literal_lines, split_lines
from htgrid.schedd._service import QueueService

__all__ = ["NO_FILE_TRANSFER", "file_commands"]

_log = logging.getLogger("htgrid.schedd")

SPOOL_JOB_FILES: Final = 480
TRANSFER_DATA: Final = 486
SPOOL_JOB_FILES_WITH_PERMS: Final = 488
TRANSFER_DATA_WITH_PERMS: Final = 489
NO_FILE_TRANSFER: Final = (
    "htgrid's schedd does not transfer job files over CEDAR (HTCondor's file transfer "
    "protocol is not implemented): submit without spool, with the files on a shared "
    "filesystem, or spool and fetch them through htgrid's HTTPS API "
    "(htgrid.net.client's put_input and get_output)"
)
_TRANSFER_INPUT_ERROR: Final = 13  # HoldReasonCode TransferInputError
_TRANSFER_OUTPUT_ERROR: Final = 12  # HoldReasonCode TransferOutputError
_DRAIN_TIMEOUT: Final = 20.0  # seconds the client has to read the reason and hang up


def _failure(code: int) -> list[bytes]:
    """A go-ahead or acknowledgement ad that fails the transfer, saying why."""
    return literal_lines(
        {
            "Result": -1,
            "TryAgain": False,
            "HoldReasonCode": code,
            "HoldReasonSubCode": 0,
            "HoldReason": NO_FILE_TRANSFER,
        }
    )


async def _drain(call: CedarCall) -> None:
    """Read (and drop) what the client still sends until it hangs up: closing with its
    bytes unread would reset the connection before it reads the reason."""
    with contextlib.suppress(CedarError, TimeoutError):
        while True:
            await call.receive(_DRAIN_TIMEOUT)


def _spool(with_perms: bool) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        r = await call.receive()
        if with_perms:
            r.text("the client's version")
        count = r.int("the number of jobs")
        _log.info(
            "CEDAR client %s (%s) asked to spool the files of %d job(s): refused (%s)",
            call.peer,
            call.principal.name,
            count,
            "no file transfer over CEDAR",
        )
        await call.send(call.writer().lines(_failure(_TRANSFER_INPUT_ERROR)))
        await _drain(call)

    return handle


def _retrieve(service: QueueService, with_perms: bool) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        r = await call.receive()
        if with_perms:
            r.text("the client's version")
        constraint = r.text("the constraint")
        r.done("the transfer request")
        identity = call.principal.identity()
        mine = f"({constraint or 'true'})"
        if not identity.admin:  # the caller's own jobs only, as condor_transfer_data
            mine += f" && Owner == {quote(identity.name)}"
        try:
            ads = await service.query(identity, mine, None, 1)  # the first is all it needs
        except HTGridError as exc:
            _log.info("CEDAR retrieve from %s: %s", call.peer, exc)
            ads = []
        _log.info(
            "CEDAR client %s (%s) asked for the files of the jobs of %s: refused (%s)",
            call.peer,
            call.principal.name,
            constraint,
            "no file transfer over CEDAR",
        )
        await call.send(call.writer().int(min(len(ads), 1)))
        if not ads:
            return
        await call.send(call.writer().lines(split_lines(ads[0])))
        # An upload of no file: final transfer, its size, Finished; then its failed ack.
        start = call.writer().int(1).lines(literal_lines({"SandboxSize": 0}))
        await call.send(start)
        await call.send(call.writer().int(0))
        await call.send(call.writer().lines(_failure(_TRANSFER_OUTPUT_ERROR)))
        await _drain(call)

    return handle


def file_commands(service: QueueService) -> Sequence[Command]:
    """The file transfer commands, each refused with NO_FILE_TRANSFER as its reason."""
    return (
        Command(SPOOL_JOB_FILES, "SPOOL_JOB_FILES", "WRITE", _spool(False)),
        Command(SPOOL_JOB_FILES_WITH_PERMS, "SPOOL_JOB_FILES_WITH_PERMS", "WRITE", _spool(True)),
        Command(TRANSFER_DATA, "TRANSFER_DATA", "WRITE", _retrieve(service, False)),
        Command(
            TRANSFER_DATA_WITH_PERMS, "TRANSFER_DATA_WITH_PERMS", "WRITE", _retrieve(service, True)
        ),
    )
