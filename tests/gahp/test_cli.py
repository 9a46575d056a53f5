"""`htgrid gahp batch` at a terminal: a person can type at it."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.cli import main


class Terminal:
    """The server on a pseudo-terminal, as a person would run it."""

    def __init__(self, scratch: Path) -> None:
        self.master, slave = pty.openpty()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "htgrid.cli", "gahp", "batch", "--scratch", str(scratch)],
            stdin=slave,
            stdout=slave,
            stderr=self.stderr,
            close_fds=True,
        )
        os.close(slave)
        self.seen = b""

    def type(self, text: bytes) -> None:
        os.write(self.master, text)

    def expect(self, text: bytes, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} not in {self.seen!r}; stderr: {self.errors()}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096)
                except OSError:  # EIO: the other side closed
                    break
        assert text in self.seen, f"{text!r} not in {self.seen!r}; stderr: {self.errors()}"
        self.seen = self.seen[self.seen.index(text) + len(text) :]

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        os.close(self.master)
        self.stderr.close()


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(tmp_path / "scratch")
    yield term
    term.close()


def test_typing_at_the_batch_gahp(terminal: Terminal) -> None:
    terminal.expect(b"$GahpVersion: ")
    terminal.expect(b"htgrid\\ batch\\ GAHP $")
    terminal.type(b"version\n")
    terminal.expect(b"S $GahpVersion: ")
    terminal.type(b"BLAH_PING 1 fork\n")
    terminal.expect(b"\nS\r")
    terminal.type(b"oops\n")
    terminal.expect(b"E Unknown\\ command")
    terminal.type(b"RESULTS\n")
    terminal.expect(b"S 1")
    terminal.expect(b"1 0 No\\ error")
    terminal.type(b"QUIT\n")
    assert terminal.process.wait(10) == 0


def test_end_of_file_at_the_terminal_quits(terminal: Terminal) -> None:
    terminal.expect(b"$GahpVersion: ")
    terminal.type(b"\x04")  # ^D
    assert terminal.process.wait(10) == 0


def test_gahp_without_a_type_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gahp"]) == 2
    assert "batch" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["batch", "condor"])
def test_a_gahp_with_stdin_from_dev_null_says_its_banner_and_ends(
    kind: str, tmp_path: Path
) -> None:
    # Started from a script or a cron job with no input: end of file at once, not a hang.
    extra = ["--scratch", str(tmp_path)] if kind == "batch" else ["--pool", "127.0.0.1:1"]
    done = subprocess.run(
        [sys.executable, "-m", "htgrid.cli", "gahp", kind, *extra],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"$GahpVersion")
