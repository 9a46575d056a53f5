"""The client's activation against a node older than the ACTIVATION_TAR body: one that
said it took it (its grant), then was replaced by an older one, reads the body as JSON
and refuses it, having done nothing; the client sends it again in base64, and from then
on only so."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.startd import ClaimState, StartdClient, StartdProtocolError
from htgrid.startd._errors import status_of, to_problem
from htgrid.startd._wire import ClaimGrant, ClaimStatus


def test_an_older_node_gets_the_input_in_base64_again(tmp_path: Path) -> None:
    seen: list[tuple[str, str, bytes]] = []  # path, content type, body
    handlers: list[asyncio.Task[object]] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            path = head.split(b" ")[1].decode()
            kind = re.search(rb"content-type: ([^\r]*)", head, re.IGNORECASE)
            length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
            body = await reader.readexactly(int(length.group(1)) if length else 0)
            seen.append((path, kind.group(1).decode() if kind else "", body))
            code, doc = 200, {}
            if path == "/v1/claims":
                grant = ClaimGrant("c" * 20, "slot1_1@old", 60, 1, tar_activation=True)
                code, doc = 201, grant.to_json()
            else:
                try:
                    json.loads(body)  # the older node: all of it JSON, or refused
                    doc = ClaimStatus("c" * 20, "slot1_1@old", ClaimState.RUNNING, 3).to_json()
                except ValueError as exc:
                    error = StartdProtocolError(f"the request body is not JSON: {exc}")
                    code, doc = status_of(error), to_problem(error)
            text = json.dumps(doc).encode()
            writer.write(
                f"HTTP/1.1 {code} X\r\ncontent-type: application/json\r\n"
                f"content-length: {len(text)}\r\n\r\n".encode()
                + text
            )
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main() -> None:
        sock = tmp_path / "old.sock"
        server = await asyncio.start_unix_server(answer, str(sock))
        job = ClassAd({"ClusterId": 1, "ProcId": 0})
        async with server:
            async with StartdClient(sock) as client:
                await client.request_claim("c" * 20, job, "s", 60)
                status = await client.activate("c" * 20, job, b"the tar")
                assert status.state is ClaimState.RUNNING
                status = await client.activate("c" * 20, job, b"the next tar", after="1.0")
                assert status.state is ClaimState.RUNNING
            await asyncio.wait_for(asyncio.gather(*handlers), 10)  # the client hung up
        kinds = [kind.split(";")[0] for path, kind, _ in seen if path.endswith("/activate")]
        assert kinds == [
            "application/x-htgrid-activation",  # refused by the older node
            "application/json",  # the same again, in base64
            "application/json",  # and from then on
        ]
        sent = [json.loads(body) for path, kind, body in seen[2:]]
        assert [doc["input_data"] for doc in sent] == ["dGhlIHRhcg==", "dGhlIG5leHQgdGFy"]

    asyncio.run(main())
