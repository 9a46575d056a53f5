"""A GAHP client written from the protocol text alone, byte by byte.

It shares no code with htgrid.gahp on purpose: the conformance tests check htgrid's
server against this reading of the protocol, not against htgrid's own codec.

Protocol text used (gahp-and-gridmanager.md section 1.2): a line ends with LF, and a CR
just before it is ignored; fields are separated by one space; in a field, space,
backslash, CR and LF are preceded by a backslash; a backslash makes the next byte
literal, so an escaped LF does not end the line; an unescaped CR is dropped.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

BACKSLASH = 0x5C
NEWLINE = 0x0A
RETURN = 0x0D
SPACE = 0x20


def escape(text: str) -> bytes:
    """One field as it travels: the four special bytes preceded by a backslash."""
    out = bytearray()
    for byte in text.encode("utf-8"):
        if byte in (SPACE, BACKSLASH, RETURN, NEWLINE):
            out.append(BACKSLASH)
        out.append(byte)
    return bytes(out)


def request_line(*fields: str) -> bytes:
    """A request line, ended with CR LF as the grid manager writes it."""
    return b" ".join(escape(field) for field in fields) + b"\r\n"


def split_fields(line: bytes) -> list[str]:
    """The fields of a line (without its LF)."""
    fields: list[bytearray] = [bytearray()]
    escaped = False
    for byte in line:
        if escaped:
            fields[-1].append(byte)
            escaped = False
        elif byte == BACKSLASH:
            escaped = True
        elif byte == RETURN:
            continue
        elif byte == SPACE:
            fields.append(bytearray())
        else:
            fields[-1].append(byte)
    return [field.decode("utf-8") for field in fields]


class Wire:
    """A GAHP server process and raw bytes both ways."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            env=env,
        )
        assert self.process.stdout is not None and self.process.stdin is not None
        self._out = self.process.stdout.fileno()
        self._buffer = bytearray()
        # Lines are complete once an unescaped LF is seen: track the scan position.
        self._scan = 0
        self._escaped = False
        self.notifications = 0

    def send(self, data: bytes) -> None:
        """Write raw bytes to the server's stdin (from a thread: the pipe may fill)."""
        assert self.process.stdin is not None
        stdin = self.process.stdin
        writer = threading.Thread(target=stdin.write, args=(data,), daemon=True)
        writer.start()
        writer.join(30)

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def raw_line(self, timeout: float = 15.0) -> bytes:
        """The next line, without its LF (CR kept); raises EOFError at end of output."""
        deadline = time.monotonic() + timeout
        while True:
            while self._scan < len(self._buffer):
                byte = self._buffer[self._scan]
                self._scan += 1
                if self._escaped:
                    self._escaped = False
                elif byte == BACKSLASH:
                    self._escaped = True
                elif byte == NEWLINE:
                    line = bytes(self._buffer[: self._scan - 1])
                    del self._buffer[: self._scan]
                    self._scan = 0
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete line in {timeout} s; have {bytes(self._buffer)!r}")
            ready, _, _ = select.select([self._out], [], [], left)
            if ready:
                chunk = os.read(self._out, 65536)
                if not chunk:
                    raise EOFError(f"server closed stdout; have {bytes(self._buffer)!r}")
                self._buffer += chunk

    def line(self, timeout: float = 15.0) -> list[str]:
        """The next line's fields, skipping async `R` notifications (counted)."""
        while True:
            fields = split_fields(self.raw_line(timeout))
            if len(fields) == 1 and fields[0] == "R":
                self.notifications += 1
                continue
            return fields

    def ask(self, *fields: str) -> list[str]:
        """Send one request and read its return line."""
        self.send(request_line(*fields))
        return self.line()

    def results(self) -> list[list[str]]:
        """RESULTS: `S <n>` then n lines."""
        head = self.ask("RESULTS")
        assert head[0] == "S" and len(head) == 2, head
        return [self.line() for _ in range(int(head[1]))]

    def collect(self, ids: set[str], timeout: float = 30.0) -> dict[str, list[str]]:
        """Poll RESULTS until a result has come for every id in `ids`."""
        found: dict[str, list[str]] = {}
        deadline = time.monotonic() + timeout
        while not ids <= found.keys():
            assert time.monotonic() < deadline, (
                f"missing results for {sorted(ids - found.keys())[:5]}"
            )
            for result in self.results():
                found[result[0]] = result
            if not ids <= found.keys():
                time.sleep(0.05)
        return found

    def wait(self, timeout: float = 15.0) -> int:
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def batch_gahp_argv(scratch: str, *options: str) -> list[str]:
    """How the tests start `htgrid gahp batch`."""
    return [sys.executable, "-m", "htgrid.cli._gahp", "batch", "--scratch", scratch, *options]
