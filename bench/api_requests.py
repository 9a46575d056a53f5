"""Requests a second, and the server's CPU a request, of one API: an execute node's
`GET /v1/health` over TLS, on kept connections.

    PYTHONPATH=$PWD/src python bench/api_requests.py [--requests 5000] [--connections 4]

The node's API (`startd._api.create_app` over a stub node, served by
`start_tls_server` as a node serves it) runs in a child process; this process sends
the requests with the schedd's client (`htgrid.client.Http11`), `--connections` at a
time. Printed: requests a second, and the server's CPU (user + system, from /proc) a
request. Runs on code before httptools too (PYTHONPATH=/work/main/src), to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from htgrid.client import Http11
from htgrid.net.security import PoolCA, client_ssl_context, server_ssl_context
from htgrid.startd._api import create_app, start_tls_server


class _Node:
    """Just enough of an execute node for its health."""

    def health(self) -> dict[str, Any]:
        return {"name": "node.bench"}

    async def claim_status(self, *args: object, **kwargs: object) -> Any:
        raise AssertionError("no claim is asked about here")


async def _serve(ca_dir: Path) -> None:
    ca = PoolCA(ca_dir)
    tls = server_ssl_context(ca.ensure_server_cert("node"))
    app = create_app(_Node(), caller=lambda request: None)  # type: ignore[arg-type]
    server, serving, port = await start_tls_server(app, "127.0.0.1", tls)
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until closed
    server.should_exit = True
    await serving


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _load(port: int, ca_dir: Path, requests: int, connections: int, pid: int) -> None:
    client = Http11.tls("127.0.0.1", port, client_ssl_context([ca_dir / "ca.crt"]))
    left = requests

    async def one_connection() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            answer = await client.request("GET", "/v1/health", read=30, timeout=30, short=True)
            assert answer.status == 200, answer.content

    await asyncio.gather(*(one_connection() for _ in range(connections)))  # warm up
    left = requests
    cpu, start = _cpu(pid), time.monotonic()
    await asyncio.gather(*(one_connection() for _ in range(connections)))
    wall, used = time.monotonic() - start, _cpu(pid) - cpu
    await client.aclose()
    print(
        f"{requests} requests, {connections} at a time: {requests / wall:.0f} a second, "
        f"server CPU {used / requests * 1e6:.0f} us a request "
        f"(load {os.getloadavg()[0]:.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve))
        return
    with tempfile.TemporaryDirectory() as tmp:
        ca_dir = Path(tmp) / "ca"
        PoolCA(ca_dir).ensure()
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(ca_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            asyncio.run(_load(port, ca_dir, args.requests, args.connections, server.pid))
        finally:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(30)


if __name__ == "__main__":
    main()
