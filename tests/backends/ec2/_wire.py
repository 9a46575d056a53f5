"""A GAHP client for the EC2 tests, written from the protocol text, not from htgrid's code.

Protocol text used (gahp-and-gridmanager.md sections 1.2-1.4): lines end with LF (a CR
before it is ignored); fields are separated by one space; space, backslash, CR and LF in
a field are preceded by a backslash, and a backslash makes the next byte literal, so an
escaped LF does not end a line. Asynchronous requests are `CMD <id> args` answered `S`
at once; `RESULTS` answers `S <n>` and n result lines `<id> fields...`. A line that is
just `R` (async mode) may appear between any two lines and is skipped.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

SPECIAL = {0x20, 0x5C, 0x0D, 0x0A}


def escape(text: str) -> bytes:
    """One field as it travels."""
    out = bytearray()
    for byte in text.encode("utf-8"):
        if byte in SPECIAL:
            out.append(0x5C)
        out.append(byte)
    return bytes(out)


def split(line: bytes) -> list[str]:
    """The fields of one line (its LF removed)."""
    fields = [bytearray()]
    escaped = False
    for byte in line:
        if escaped:
            fields[-1].append(byte)
            escaped = False
        elif byte == 0x5C:
            escaped = True
        elif byte == 0x0D:
            continue
        elif byte == 0x20:
            fields.append(bytearray())
        else:
            fields[-1].append(byte)
    return [field.decode("utf-8") for field in fields]


def ec2_gahp_argv(*extra: str) -> list[str]:
    """The command line of htgrid's EC2 GAHP (`htgrid gahp ec2` without the other commands)."""
    return [sys.executable, "-m", "htgrid.backends.ec2", *extra]


class Wire:
    """One GAHP server process, spoken to line by line."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._results: dict[int, list[str]] = {}
        self._next_id = 1
        self.stderr = b""
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._drain_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        self.banner = self.line()

    def _read(self) -> None:
        assert self.process.stdout is not None
        stream = self.process.stdout
        current = bytearray()
        escaped = False
        while True:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                self._lines.put(None)
                return
            for byte in chunk:
                if escaped:
                    current.append(byte)
                    escaped = False
                elif byte == 0x5C:
                    current.append(byte)
                    escaped = True
                elif byte == 0x0A:
                    self._lines.put(bytes(current))
                    current = bytearray()
                else:
                    current.append(byte)

    def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        fd = self.process.stderr.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            self.stderr += chunk

    def line(self, timeout: float = 30.0) -> list[str]:
        """The next line's fields, skipping async `R` notifications."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                raw = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no line from the GAHP in {timeout} s") from None
            if raw is None:
                raise EOFError(f"the GAHP closed stdout; stderr: {self.stderr.decode()[-2000:]}")
            fields = split(raw)
            if fields == ["R"]:
                continue
            return fields

    def send(self, *fields: str) -> None:
        """Write one request line (CR LF, as the grid manager does)."""
        assert self.process.stdin is not None
        self.process.stdin.write(b" ".join(escape(field) for field in fields) + b"\r\n")
        self.process.stdin.flush()

    def request(self, *fields: str) -> list[str]:
        """A request and its return line."""
        self.send(*fields)
        return self.line()

    def submit(self, command: str, *args: str) -> int:
        """Send an asynchronous request; its id (the return line must be S)."""
        request_id = self._next_id
        self._next_id += 1
        reply = self.request(command, str(request_id), *args)
        assert reply == ["S"], f"{command} refused: {reply}"
        return request_id

    def result(self, request_id: int, timeout: float = 60.0) -> list[str]:
        """The fields after the id of `request_id`'s result line, polling RESULTS."""
        deadline = time.monotonic() + timeout
        while request_id not in self._results:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no result for request {request_id}")
            reply = self.request("RESULTS")
            assert reply[0] == "S" and len(reply) == 2, reply
            for _ in range(int(reply[1])):
                fields = self.line()
                self._results[int(fields[0])] = fields[1:]
            if request_id not in self._results:
                time.sleep(0.02)
        return self._results.pop(request_id)

    def call(self, command: str, *args: str, timeout: float = 60.0) -> list[str]:
        """An asynchronous request and its result fields."""
        return self.result(self.submit(command, *args), timeout)

    def close(self) -> int:
        """QUIT (or kill) and wait."""
        if self.process.poll() is None:
            try:
                self.send("QUIT")
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        for thread in self._threads:
            thread.join(timeout=10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        return self.process.returncode
