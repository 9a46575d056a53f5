"""The GAHP errors: every one is a `GahpError`, itself an `HTGridError`.

GahpError
├── GahpProtocolError    (the peer sent something malformed: restart or ignore the peer)
├── LocalGahpError       (we were about to send something the protocol cannot carry: our bug)
├── BadArguments         (a request's arguments cannot be right: the server answers E)
├── GahpRequestRefused   (the server answered E or F to a request)
├── GahpTimeout          (no result within the caller's time limit; the request id stays reserved)
└── GahpServerExited     (the server process went away; every request in flight is lost)

As in h11, the split between the first two tells who is to blame: a malformed line from the
other side is `GahpProtocolError`, a line we cannot encode is `LocalGahpError`.
"""

from __future__ import annotations

from htgrid.errors import HTGridError

__all__ = [
    "BadArguments",
    "GahpError",
    "GahpProtocolError",
    "GahpRequestRefused",
    "GahpServerExited",
    "GahpTimeout",
    "LocalGahpError",
]


class GahpError(HTGridError):
    """A GAHP conversation failed."""


class GahpProtocolError(GahpError):
    """The peer sent a line that does not follow the GAHP protocol."""


class LocalGahpError(GahpError):
    """We tried to send something the GAHP protocol cannot carry."""


class BadArguments(GahpError):
    """A command's argument parser refused a request; the server answers `E <message>`."""


class GahpRequestRefused(GahpError):
    """The server refused a request with an `E` or `F` return line.

    `code` is "E" or "F"; `reason` is the rest of the line ("" when there was none).
    """

    def __init__(self, command: str, code: str, reason: str) -> None:
        self.command = command
        self.code = code
        self.reason = reason
        detail = f": {reason}" if reason else ""
        super().__init__(f"GAHP server refused {command} ({code}){detail}")


class GahpTimeout(GahpError):
    """The request got no result in time."""


class GahpServerExited(GahpError):
    """The GAHP server process exited or closed its pipes; requests in flight are lost."""
