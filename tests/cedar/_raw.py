"""A bare CEDAR client for what the official bindings never do: stop halfway through a
command, or send a command they do not send (QMGMT_READ_CMD). Plaintext (it asks for no
encryption), authenticated with FS as the user running the tests."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from types import TracebackType

from htgrid.classad import ClassAd
from htgrid.net.cedar import Channel, Reader, Writer, literal_lines, parse_ad, split_lines

FS = 4  # the FS method's bit


class RawCedar:
    """One connection to `address` ("host:port") for `command`, FS-authenticated;
    `authorized`: the daemon must authorize it (else `post_auth` says what it answered)."""

    def __init__(
        self, address: str, command: int, timeout: float = 30, *, authorized: bool = True
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.channel = Channel()
        self.post_auth = self._handshake(command)
        if authorized:
            assert self.post_auth.get("ReturnCode") == "AUTHORIZED", self.post_auth

    def __enter__(self) -> RawCedar:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def writer(self) -> Writer:
        return Writer(False)

    def send(self, w: Writer) -> None:
        self.sock.sendall(self.channel.send_message(w.getvalue()))

    def send_ad(self, ad: ClassAd) -> None:
        self.send(self.writer().lines(split_lines(ad)))

    def receive(self) -> Reader:
        while (message := self.channel.next_message()) is None:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the daemon closed the connection")
            self.channel.receive_data(data)
        return Reader(message, False)

    def receive_ad(self) -> ClassAd:
        r = self.receive()
        ad = parse_ad(r.lines(), "a reply")
        r.done("a reply")
        return ad

    def _hello(self, command: int) -> ClassAd:
        """Ask for `command` in a new session, FS the one method offered; the answer."""
        hello = {
            "Command": command,
            "NewSession": "YES",
            "Enact": "NO",
            "Authentication": "REQUIRED",
            "AuthenticationNew": "REQUIRED",
            "Encryption": "NEVER",
            "Integrity": "NEVER",
            "AuthMethods": "FS",
            "SessionDuration": "0",
            "RemoteVersion": "$CondorVersion: 25.14.1 2026-09-24 BuildID: test $",
        }
        self.send(self.writer().int(60010).lines(literal_lines(hello)))
        return self.receive_ad()

    def _handshake(self, command: int) -> ClassAd:
        response = self._hello(command)
        if response.get("Authentication") == "YES":
            self.send(self.writer().int(FS))
            chosen = self.receive().int()
            assert chosen == FS, response
            directory = Path(self.receive().text())
            os.mkdir(directory, 0o700)
            try:
                directory.chmod(0o700)
                self.send(self.writer().int(0))
                assert self.receive().int() == 0, "FS authentication failed"
            finally:
                directory.rmdir()
            assert self.receive().int() == 0  # no key follows
        return self.receive_ad()
