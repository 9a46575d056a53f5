"""A raw Azure GAHP client written from `azure_gahp_protocol.txt`, sharing no htgrid code.

From the text: a line ends with CR LF or LF alone; arguments are separated by a space; a
space or backslash inside an argument is preceded by a backslash (section 3.3). Every
request gets a return line at once (`S`, `E` or `F`); results come from `RESULTS` as
`S <n>` and n lines, in the order they were queued (section 3.5.1).
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Mapping, Sequence


def escape(argument: str) -> str:
    return argument.replace("\\", "\\\\").replace(" ", "\\ ")


def split(line: str) -> list[str]:
    """A line's arguments: unescaped spaces separate, a backslash makes the next char literal."""
    fields = [""]
    chars = iter(line)
    for char in chars:
        if char == "\\":
            fields[-1] += next(chars, "")
        elif char == " ":
            fields.append("")
        else:
            fields[-1] += char
    return fields


class AzureWire:
    """The GAHP as a child process, spoken to line by line."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            bufsize=0,
        )
        self._pending = b""
        self._next_id = 0
        self.done: dict[str, list[str]] = {}
        self.banner = self.line()

    def line(self, timeout: float = 30.0) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            assert left > 0, f"no line in {timeout} s; have {self._pending!r}"
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                assert chunk, f"the GAHP closed stdout; stderr: {self.stderr()}"
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode().removesuffix("\r")

    def send(self, *arguments: str) -> list[str]:
        """One request line; its return line's fields."""
        assert self.process.stdin is not None
        self.process.stdin.write((" ".join(escape(a) for a in arguments) + "\r\n").encode())
        return split(self.line())

    def request(self, command: str, *arguments: str) -> str:
        """An Azure command with a fresh request id; the id (the return line must be S)."""
        self._next_id += 1
        request_id = str(self._next_id)
        reply = self.send(command, request_id, *arguments)
        assert reply == ["S"], reply
        return request_id

    def results(self) -> list[list[str]]:
        head = self.send("RESULTS")
        assert head[0] == "S" and len(head) == 2, head
        return [split(self.line()) for _ in range(int(head[1]))]

    def wait(self, request_id: str, timeout: float = 60.0) -> list[str]:
        """The result line of one request (fields after the id), polling RESULTS."""
        deadline = time.monotonic() + timeout
        while True:
            for result in self.results():
                self.done[result[0]] = result[1:]
            if request_id in self.done:
                return self.done.pop(request_id)
            assert time.monotonic() < deadline, f"no result for {request_id}"
            time.sleep(0.02)

    def call(self, command: str, *arguments: str, timeout: float = 60.0) -> list[str]:
        return self.wait(self.request(command, *arguments), timeout)

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return "(still running)"
        return self.process.stderr.read().decode(errors="replace")[-2000:]

    def close(self) -> int:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.send("QUIT")
            finally:
                self.process.stdin.close()
        try:
            return self.process.wait(15)
        finally:
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()
