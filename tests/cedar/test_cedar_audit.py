"""A CEDAR command refused is in the audit log before the client hears no, as one
accepted is before its answer: a client (or an admin's script) that reads the audit log
after its refusal finds the line there."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.net.cedar import CedarCall, CedarService, Command
from htgrid.net.security import AuditEvent

from ._raw import FS, RawCedar
from .test_fuzz import _security  # FS users may read only

_WRITE_THING = 1001


class _FsFails(RawCedar):
    """A client whose FS proof fails (it could not make the directory), and that has no
    other method to offer: `post_auth` holds the method the daemon then chose (0)."""

    def _handshake(self, command: int) -> ClassAd:
        assert self._hello(command)["Authentication"] == "YES"
        self.send(self.writer().int(FS))
        assert self.receive().int() == FS
        self.receive().text()  # the directory to make, not made
        self.send(self.writer().int(-1))
        assert self.receive().int() == -1  # FS failed
        self.send(self.writer().int(FS))  # FS again: nothing left to try
        return ClassAd({"MethodChosen": self.receive().int()})


def _refused(tmp_path: Path, client: type[RawCedar]) -> tuple[ClassAd, list[AuditEvent]]:
    """What the client heard, and the audit log's events as it heard it."""
    audited: list[AuditEvent] = []

    def record(event: AuditEvent) -> None:
        time.sleep(0.3)  # the audit log's disk, slow: the line lands late
        audited.append(event)

    security = replace(_security(), audit=record, fs_dir=str(tmp_path))

    async def never(call: CedarCall) -> None:
        raise AssertionError("a refused command ran")

    service = CedarService("test", [Command(_WRITE_THING, "WRITE_THING", "WRITE", never)], security)

    def ask(port: int) -> tuple[ClassAd, list[AuditEvent]]:
        with client(f"127.0.0.1:{port}", _WRITE_THING, authorized=False) as conn:
            return conn.post_auth, list(audited)  # as the client hears no

    async def main() -> tuple[ClassAd, list[AuditEvent]]:
        server = await asyncio.start_server(service.serve, "127.0.0.1", 0)
        try:
            return await asyncio.to_thread(ask, server.sockets[0].getsockname()[1])
        finally:
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


def test_a_refused_command_is_audited_before_the_client_is_told(tmp_path: Path) -> None:
    answer, seen = _refused(tmp_path, RawCedar)
    assert answer["ReturnCode"] == "DENIED"
    assert [(e.accepted, e.request) for e in seen] == [(False, "CEDAR WRITE_THING")]
    assert "may not WRITE_THING" in str(seen[0].reason)


def test_a_failed_authentication_is_audited_before_the_client_is_told(tmp_path: Path) -> None:
    answer, seen = _refused(tmp_path, _FsFails)
    assert answer["MethodChosen"] == 0
    assert [(e.accepted, e.request) for e in seen] == [(False, "CEDAR WRITE_THING")]
    assert "authentication failed: FS: the client could not make the directory" in str(
        seen[0].reason
    )
