"""A GAHP client for the condor GAHP tests, from the protocol text rather than htgrid's codec.

Protocol text used (gahp-and-gridmanager.md sections 1.2-1.4): a line ends with LF (a CR
before it is ignored); fields are separated by one space; space, backslash, CR and LF in
a field are preceded by a backslash, which makes the next byte literal. Asynchronous
requests `CMD <id> args` are answered `S` (or `E`/`F`) at once; `RESULTS` answers
`S <n>` and n result lines; a line that is just `R` is a notification and is skipped.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence

SPECIAL = {0x20, 0x5C, 0x0D, 0x0A}


def escape(text: str) -> bytes:
    out = bytearray()
    for byte in text.encode("utf-8"):
        if byte in SPECIAL:
            out.append(0x5C)
        out.append(byte)
    return bytes(out)


def split(line: bytes) -> list[str]:
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
    return [f.decode("utf-8") for f in fields]


class Wire:
    """`htgrid gahp condor ...` as a child process, spoken to byte by byte."""

    def __init__(self, *options: str, env: dict[str, str] | None = None) -> None:
        argv = [sys.executable, "-m", "htgrid.cli._gahp", "condor", *options]
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            env={**os.environ, **(env or {})},
        )
        self._buffer = bytearray()
        self._next_id = 0
        self.banner = self.line()

    def send(self, *fields: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b" ".join(escape(f) for f in fields) + b"\r\n")

    def line(self, timeout: float = 30.0) -> list[str]:
        """The next line's fields, skipping R notifications."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            end = self._line_end()
            if end is not None:
                raw = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                fields = split(raw)
                if fields == ["R"]:
                    continue
                return fields
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no line from the GAHP; stderr: {self.stderr()}")
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    raise EOFError(f"the GAHP closed stdout; stderr: {self.stderr()}")
                self._buffer += chunk

    def _line_end(self) -> int | None:
        escaped = False
        for i, byte in enumerate(self._buffer):
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x0A:
                return i
        return None

    def ask(self, *fields: str) -> list[str]:
        """One request and its return line."""
        self.send(*fields)
        return self.line()

    def request(self, command: str, *args: str) -> str:
        """An asynchronous request, which must be accepted; its request id."""
        self._next_id += 1
        reqid = str(self._next_id)
        reply = self.ask(command, reqid, *args)
        assert reply == ["S"], reply
        return reqid

    def results(self, ids: Sequence[str], timeout: float = 60.0) -> dict[str, list[str]]:
        """Poll RESULTS until every id in `ids` has its result line (without the id)."""
        found: dict[str, list[str]] = {}
        deadline = time.monotonic() + timeout
        while not set(ids) <= found.keys():
            assert time.monotonic() < deadline, f"no result for {set(ids) - found.keys()}"
            head = self.ask("RESULTS")
            assert head[0] == "S", head
            for _ in range(int(head[1])):
                fields = self.line()
                found[fields[0]] = fields[1:]
            if not set(ids) <= found.keys():
                time.sleep(0.05)
        return found

    def call(self, command: str, *args: str, timeout: float = 60.0) -> list[str]:
        """An asynchronous request and its result line (without the id)."""
        reqid = self.request(command, *args)
        return self.results([reqid], timeout)[reqid]

    def stderr(self) -> str:
        if self.process.poll() is None:
            return "(still running)"
        assert self.process.stderr is not None
        return self.process.stderr.read().decode("utf-8", "replace")[-2000:]

    def close(self) -> int:
        if self.process.poll() is None:
            with contextlib.suppress(OSError, EOFError, TimeoutError):
                self.ask("QUIT")
        try:
            code = self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return code
