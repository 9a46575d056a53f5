"""A CEDAR command refused is in the audit log before the client hears no, as one
accepted is before its answer: a client (or an admin's script) that reads the audit log
after its refusal finds the line there."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from htgrid.net.cedar import CedarCall, CedarService, Command
from htgrid.net.security import AuditEvent

from ._raw import RawCedar
from .test_fuzz import _security  # FS users may read only

_WRITE_THING = 1001


def test_a_refused_command_is_audited_before_the_client_is_told(tmp_path: Path) -> None:
    audited: list[AuditEvent] = []

    def record(event: AuditEvent) -> None:
        time.sleep(0.3)  # the audit log's disk, slow: the line lands late
        audited.append(event)

    security = replace(_security(), audit=record, fs_dir=str(tmp_path))

    async def never(call: CedarCall) -> None:
        raise AssertionError("a refused command ran")

    service = CedarService("test", [Command(_WRITE_THING, "WRITE_THING", "WRITE", never)], security)

    def client(port: int) -> tuple[str, list[AuditEvent]]:
        with RawCedar(f"127.0.0.1:{port}", _WRITE_THING, authorized=False) as conn:
            return conn.post_auth["ReturnCode"], list(audited)  # as the client hears no

    async def main() -> tuple[str, list[AuditEvent]]:
        server = await asyncio.start_server(service.serve, "127.0.0.1", 0)
        try:
            return await asyncio.to_thread(client, server.sockets[0].getsockname()[1])
        finally:
            server.close()
            await server.wait_closed()

    code, seen = asyncio.run(main())
    assert code == "DENIED"
    assert [(e.accepted, e.request) for e in seen] == [(False, "CEDAR WRITE_THING")]
    assert "may not WRITE_THING" in str(seen[0].reason)
