"""A process behind NAT, on one host: in a network namespace of its own (root only).

    gateway = Gateway(tmp_path / "nat", [collector_port, schedd_return_port])
    proc = subprocess.Popen(gateway.wrap(["htgrid", "startd", ...]))
    ...
    gateway.close()

The process runs in a new network namespace whose loopback is its own: what it listens
on there (127.0.0.2:port, say) nobody outside can reach, as with a machine behind NAT.
It reaches out only as NAT lets a private machine: its connections to 127.0.0.1 on the
ports given are carried (over Unix sockets in the gateway's directory, which the file
system shares) to the same ports of the host's 127.0.0.1. Nothing leaves 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["Gateway", "can_isolate"]

_CLONE_NEWNET: Final = 0x40000000
_SIOCGIFFLAGS: Final = 0x8913
_SIOCSIFFLAGS: Final = 0x8914
_IFF_UP: Final = 0x1
_CHUNK: Final = 1 << 16


def can_isolate() -> bool:
    """Whether this process may make network namespaces (root, on Linux)."""
    return sys.platform == "linux" and os.geteuid() == 0


def _splice(a: socket.socket, b: socket.socket) -> None:
    """Copy a's bytes to b until a ends, then end b's writing side."""
    try:
        while data := a.recv(_CHUNK):
            b.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)


class _Carried:
    """The connections a gateway carries, to be cut at once (`Gateway.cut`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()

    def pair(self, a: socket.socket, b: socket.socket) -> None:
        """Carry a's bytes to b and b's to a until both ends are done."""
        with self._lock:
            self._pairs.add((a, b))
        try:
            there = threading.Thread(target=_splice, args=(a, b), daemon=True)
            there.start()
            _splice(b, a)
            there.join()
        finally:
            with self._lock:
                self._pairs.discard((a, b))
            a.close()
            b.close()

    def cut(self) -> int:
        """Reset every connection carried now; how many there were."""
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        return len(pairs)


def _serve(listener: socket.socket, connect: tuple[int, object], carried: _Carried) -> None:
    family, address = connect
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        out = socket.socket(family, socket.SOCK_STREAM)
        try:
            out.connect(address)  # type: ignore[arg-type]
        except OSError:
            conn.close()
            out.close()
            continue
        threading.Thread(target=carried.pair, args=(conn, out), daemon=True).start()


class Gateway:
    """The host's side: a Unix socket per port, carried to 127.0.0.1:port."""

    def __init__(self, directory: Path, ports: Sequence[int]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.ports = list(ports)
        self._listeners: list[socket.socket] = []
        self._carried = _Carried()
        for port in self.ports:
            path = directory / f"{port}.sock"
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            listener.listen(64)
            self._listeners.append(listener)
            target = (socket.AF_INET, ("127.0.0.1", port))
            args = (listener, target, self._carried)
            threading.Thread(target=_serve, args=args, daemon=True).start()

    def cut(self) -> int:
        """Cut every connection the gateway carries now, as a NAT that lost its state
        (restarted, or timed them out) does; how many it cut. New ones pass."""
        return self._carried.cut()

    def wrap(self, command: Sequence[str]) -> list[str]:
        """`command`, run behind this gateway."""
        ports = ",".join(str(p) for p in self.ports)
        return [sys.executable, "-m", __name__, str(self.directory), ports, "--", *command]

    def close(self) -> None:
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()


def _isolate() -> None:
    """Into a network namespace of our own, its loopback up."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, ifr)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def main(argv: Sequence[str]) -> int:
    directory, ports, _, *command = argv
    _isolate()
    for port in (int(p) for p in ports.split(",") if p):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        target = (socket.AF_UNIX, str(Path(directory) / f"{port}.sock"))
        args = (listener, target, _Carried())
        threading.Thread(target=_serve, args=args, daemon=True).start()
    child = subprocess.Popen(command)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _: child.send_signal(number))
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
