"""HTCondor's shared port: several daemons' CEDAR behind one TCP port.

A daemon behind a shared port advertises `<host:port?sock=ID>`; HTCondor's clients then
open the connection with one plaintext message, SHARED_PORT_CONNECT (75): the ID, their
name, a deadline and a count of further arguments. The port's owner (the collector, as
HTCondor's shared_port daemon with its `collector` ID) reads exactly that message
(`shared_port_request`, nothing past it), then serves the connection itself when the ID
is its own, or hands the socket, as it is, to the daemon that bound `ID` in the socket
directory ($HTGRID_HOME/run/shared_port, HTCondor's DAEMON_SOCKET_DIR): a Unix datagram
carrying the descriptor (`pass_connection`, `receive_connections`). That daemon serves
it as a connection of its own, from the client's first message after the request: the
client resets its handshake digests after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid.net._errors import CedarError
from htgrid.net.cedar import CedarService, Reader

__all__ = [
    "SHARED_PORT_CONNECT",
    "SHARED_PORT_DIR",
    "SharedPort",
    "pass_connection",
    "receive_connections",
    "serve_cedar",
    "shared_port_request",
]

_log = logging.getLogger("htgrid.net")

SHARED_PORT_CONNECT: Final = 75
#: Where, under a pool's run directory, the daemons behind its shared port bind their ID.
SHARED_PORT_DIR: Final = "shared_port"
_HEADER: Final = struct.Struct(">BI")
_PEEK: Final = _HEADER.size + 8  # a packet header and the command int
_MAX_REQUEST: Final = 4096  # the request is an ID, a name and two ints
_ID: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True)
class SharedPort:
    """The port's owner's routing: its own ID, and where the others bind theirs."""

    own: str
    directory: Path


async def _recv_exactly(conn: socket.socket, n: int, deadline: float) -> bytes:
    loop = asyncio.get_running_loop()
    data = bytearray()
    while len(data) < n:
        left = deadline - loop.time()
        if left <= 0:
            raise CedarError("the shared port request did not come in time")
        chunk = await asyncio.wait_for(loop.sock_recv(conn, n - len(data)), left)
        if not chunk:
            raise CedarError("the client closed the connection in its shared port request")
        data += chunk
    return bytes(data)


async def _peek(conn: socket.socket, n: int, deadline: float) -> bytes:
    """Up to `n` bytes left unread: fewer only when the client closed or went quiet."""
    loop = asyncio.get_running_loop()
    pause = 0.005
    while True:
        try:
            data = conn.recv(n, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            data = b""
        if len(data) >= n or loop.time() >= deadline:
            return data
        # Readiness stays on while a part waits: poll, less often the longer it takes.
        pause = min(pause * 2, 0.5)
        await asyncio.sleep(pause)


async def shared_port_request(conn: socket.socket, timeout: float) -> str | None:
    """The ID a connection's SHARED_PORT_CONNECT names, its message read and nothing
    more; None (nothing read) when its first message is another one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    head = await _peek(conn, _PEEK, deadline)
    if len(head) < _PEEK or struct.unpack(">q", head[_HEADER.size :])[0] != SHARED_PORT_CONNECT:
        return None
    payload = bytearray()
    while True:
        end, length = _HEADER.unpack(await _recv_exactly(conn, _HEADER.size, deadline))
        if not 0 < length <= _MAX_REQUEST - len(payload) or end > 1:
            raise CedarError(f"a shared port request of {length} bytes (end flag {end})")
        payload += await _recv_exactly(conn, length, deadline)
        if end:
            break
    r = Reader(bytes(payload), False)
    r.int("the command")
    target = r.text("the shared port ID")
    r.text("the client's name")
    r.int("the deadline")
    if not _ID.fullmatch(target):
        raise CedarError(f"the shared port ID {target[:80]!r} names no daemon")
    return target


def pass_connection(conn: socket.socket, directory: Path, target: str) -> None:
    """Hand `conn` to the daemon bound as `target` in `directory` (OSError if none)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
        out.connect(str(directory / target))
        socket.send_fds(out, [target.encode()], [conn.fileno()])


async def receive_connections(path: Path, cedar: CedarService) -> None:
    """Serve, with `cedar`, the connections the port's owner hands to `path`, until
    cancelled (the socket file is removed then)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    inbox.bind(str(path))
    os.chmod(path, 0o600)
    inbox.setblocking(False)
    loop = asyncio.get_running_loop()
    serving: set[asyncio.Task[None]] = set()
    ready = asyncio.Event()
    loop.add_reader(inbox.fileno(), ready.set)
    try:
        while True:
            await ready.wait()
            ready.clear()
            while True:
                try:
                    _, fds, _, _ = socket.recv_fds(inbox, 256, 4)
                except (BlockingIOError, InterruptedError):
                    break
                for fd in fds:
                    task = asyncio.create_task(_serve_passed(fd, cedar))
                    serving.add(task)
                    task.add_done_callback(serving.discard)
    finally:
        loop.remove_reader(inbox.fileno())
        inbox.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        for task in serving:
            task.cancel()
        await asyncio.gather(*serving, return_exceptions=True)


async def _serve_passed(fd: int, cedar: CedarService) -> None:
    try:
        conn = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return
    conn.setblocking(False)
    await serve_cedar(conn, cedar)


async def serve_cedar(conn: socket.socket, cedar: CedarService) -> None:
    """Serve the accepted (non-blocking) `conn` with `cedar`, to its end."""
    try:
        reader, writer = await asyncio.open_connection(sock=conn, limit=1 << 20)
    except OSError:
        conn.close()
        return
    await cedar.serve(reader, writer)
