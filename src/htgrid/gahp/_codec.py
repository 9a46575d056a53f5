"""The GAHP line protocol as pure functions and values: no I/O (the h11 way).

Bytes come in through `LineSplitter` and leave through the `encode_*` functions; the server
and client runtimes only move bytes. The rules are the grid manager's (`gahp-client.cpp`),
which is what a wire-compatible server must follow:

* A line ends with an unescaped LF. A backslash makes the next byte literal, whatever it is,
  so an escaped LF does not end the line. An unescaped CR is dropped anywhere in the line.
* Fields are separated by a single unescaped space; two spaces make an empty field.
* When writing, space, backslash, CR and LF inside a field are preceded by a backslash. An
  absent value travels as the literal `NULL` (the grid manager never sends an empty field).
* Return lines start with S (success), E (malformed or unknown request) or F (failure).
  Result lines start with the request id. `RESULTS` answers `S <n>` and n result lines;
  in async mode a line holding only `R` says results are waiting.

Text is UTF-8 with surrogate escapes, so any byte string survives a round trip.
"""

from __future__ import annotations

import datetime
import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from htgrid.gahp._errors import GahpProtocolError, LocalGahpError

__all__ = [
    "EOL",
    "MAX_LINE_LENGTH",
    "NULL",
    "REQUEST_ID_MAX",
    "GahpVersion",
    "LineSplitter",
    "Reply",
    "ReplyCode",
    "Request",
    "Result",
    "decode_fields",
    "decode_reply",
    "decode_request",
    "decode_result",
    "encode_line",
    "encode_notification",
    "encode_reply",
    "encode_request",
    "encode_result",
    "encode_results",
    "escape",
    "is_notification",
    "null",
    "parse_request_id",
    "unnull",
]

#: The grid manager's read buffer (`read_argv`): a longer reply line makes it abort.
MAX_LINE_LENGTH = 500 * 1024
#: Request ids run from 1 to this and wrap (`GahpServer::new_reqid`).
REQUEST_ID_MAX = 990_000_000
#: The token for an absent value.
NULL = "NULL"
#: What ends every line we write; the grid manager and the blahp both write CR LF.
EOL = b"\r\n"

_ENCODING = "utf-8"
_ERRORS = "surrogateescape"
_SPECIAL = re.compile(r"[ \\\r\n]")
# One piece of an escaped line: a run of plain characters, an escaped character, a
# separator, a CR, or a lone backslash at the very end (only possible at EOF).
_PIECE = re.compile(r"[^\\ \r]+|\\.|[ \r]|\\\Z", re.DOTALL)
_DIGITS = re.compile(r"[1-9][0-9]{0,9}")
_BACKSLASH = 0x5C
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def escape(field: str) -> str:
    """`field` with space, backslash, CR and LF escaped (`escapeGahpString`)."""
    # Four substring tests beat a regular expression on the short fields that dominate.
    if " " not in field and "\\" not in field and "\r" not in field and "\n" not in field:
        return field
    return (
        field.replace("\\", "\\\\").replace(" ", "\\ ").replace("\r", "\\\r").replace("\n", "\\\n")
    )


def null(value: str | None) -> str:
    """`value`, or `NULL` when it is absent or empty."""
    return value if value else NULL


def unnull(field: str) -> str | None:
    """None for the `NULL` token (any case, as the grid manager compares), else `field`."""
    return None if field.upper() == NULL else field


def decode_fields(line: bytes) -> list[str]:
    """The fields of one line (without its LF), unescaped the way the grid manager does."""
    text = line.decode(_ENCODING, _ERRORS)
    if "\\" not in text:
        if "\r" in text:
            text = text.replace("\r", "")
        return text.split(" ")
    if "\0" not in text and "\1" not in text:
        # The common escapes (a ClassAd's spaces and backslashes) in a few C-speed passes:
        # escaped backslashes pair up from the left, so replacing them first is exact.
        marked = text.replace("\\\\", "\0").replace("\\ ", "\1")
        if "\\" not in marked:
            if "\r" in marked:  # not escaped, so dropped (a line's CR LF end, normally)
                marked = marked.replace("\r", "")
            return [
                field.replace("\1", " ").replace("\0", "\\")
                if "\1" in field or "\0" in field
                else field
                for field in marked.split(" ")
            ]
    fields: list[str] = []
    current: list[str] = []
    for match in _PIECE.finditer(text):
        piece = match.group()
        first = piece[0]
        if first == "\\":
            current.append(piece[1:])
        elif first == " ":
            fields.append("".join(current))
            current = []
        elif first != "\r":
            current.append(piece)
    fields.append("".join(current))
    return fields


def encode_line(fields: Iterable[str], prefix: str = "") -> bytes:
    """One line (with its CR LF) holding `fields`, each escaped; `prefix` goes in front.

    Raises LocalGahpError when the line would be longer than the grid manager accepts.
    """
    body = " ".join([escape(field) for field in fields])
    data = (escape(prefix) + body).encode(_ENCODING, _ERRORS) + EOL
    if len(data) > MAX_LINE_LENGTH:
        raise LocalGahpError(
            f"a GAHP line of {len(data)} bytes is over the {MAX_LINE_LENGTH} limit"
        )
    return data


def encode_notification(prefix: str = "") -> bytes:
    """The async-mode line saying results are waiting: `R`."""
    return encode_line(["R"], prefix)


def is_notification(fields: Sequence[str]) -> bool:
    """Whether a line from a server is the async `R` (the grid manager's test: one field, R...)."""
    return len(fields) == 1 and fields[0].startswith("R")


def parse_request_id(text: str) -> int:
    """The request id in `text`: a decimal integer from 1 to REQUEST_ID_MAX."""
    if text.isdigit() and text.isascii() and text[0] != "0" and len(text) < 9:
        return int(text)  # the common case, without a regular expression
    if _DIGITS.fullmatch(text) is None or int(text) > REQUEST_ID_MAX:
        raise GahpProtocolError(f"bad request id {text!r}: expected an integer from 1")
    return int(text)


# ---- requests (client -> server) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """A request line: the command (upper case; names are case-insensitive) and its arguments.

    For asynchronous commands the first argument is the request id.
    """

    command: str
    args: tuple[str, ...] = ()


def decode_request(line: bytes) -> Request:
    """The request on one line."""
    fields = decode_fields(line)
    return Request(fields[0].upper(), tuple(fields[1:]))


def encode_request(command: str, args: Sequence[str] = (), request_id: int | None = None) -> bytes:
    """A request line; `request_id` goes first for asynchronous commands."""
    if not command or _SPECIAL.search(command):
        raise LocalGahpError(f"bad GAHP command name {command!r}")
    if request_id is None:
        return encode_line([command, *args])
    if not 0 < request_id <= REQUEST_ID_MAX:
        raise LocalGahpError(f"request id {request_id} is outside 1..{REQUEST_ID_MAX}")
    return encode_line([command, str(request_id), *args])


# ---- return lines (server -> client, one per request) ---------------------------------------


class ReplyCode(enum.Enum):
    """The first field of a return line."""

    SUCCESS = "S"
    ERROR = "E"
    FAILURE = "F"


@dataclass(frozen=True, slots=True)
class Reply:
    """A return line: S, E or F, then free fields."""

    code: ReplyCode
    args: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the request was accepted (S)."""
        return self.code is ReplyCode.SUCCESS

    @property
    def reason(self) -> str:
        """The text after the code, fields joined by spaces."""
        return " ".join(self.args)


_S_LINE = b"S" + EOL


def encode_reply(code: ReplyCode, *args: str, prefix: str = "") -> bytes:
    """A return line."""
    if not args and not prefix and code is ReplyCode.SUCCESS:
        return _S_LINE
    return encode_line([code.value, *args], prefix)


def decode_reply(fields: Sequence[str]) -> Reply:
    """The return line held in `fields` (the grid manager looks at the first letter only)."""
    first = fields[0] if fields else ""
    try:
        code = ReplyCode(first[:1])
    except ValueError:
        raise GahpProtocolError(f"expected a return line (S, E or F) but got {first!r}") from None
    # "S" alone or "S extra": the grid manager ignores what follows the letter in field one.
    return Reply(code, tuple(fields[1:]))


# ---- result lines (server -> client, in RESULTS) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    """A result line: the request id, then the command's own fields."""

    request_id: int
    fields: tuple[str, ...]


def encode_result(
    request_id: int, fields: Sequence[str], max_length: int = MAX_LINE_LENGTH
) -> bytes:
    """A result line without its CR LF (RESULTS adds those, and the prefix); one longer
    than `max_length` (by default what HTCondor's grid manager reads) is refused."""
    text = str(request_id)
    if fields:
        text = text + " " + " ".join([escape(field) for field in fields])
    data = text.encode(_ENCODING, _ERRORS)
    if len(data) + len(EOL) > max_length:
        raise LocalGahpError(f"a GAHP result line of {len(data)} bytes is over the limit")
    return data


def decode_result(fields: Sequence[str]) -> Result:
    """The result line held in `fields`."""
    if not fields:
        raise GahpProtocolError("empty result line")
    return Result(parse_request_id(fields[0]), tuple(fields[1:]))


def encode_results(bodies: Sequence[bytes], prefix: str = "") -> bytes:
    """The whole answer to RESULTS: `S <n>` and the n result lines, oldest first."""
    head = escape(prefix).encode(_ENCODING, _ERRORS)
    first = head + b"S " + str(len(bodies)).encode() + EOL
    if not bodies:
        return first
    return first + head + (EOL + head).join(bodies) + EOL


# ---- the version banner -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GahpVersion:
    """What `$GahpVersion: x.y.z Mon dd yyyy description $` says."""

    number: str
    date: datetime.date
    description: str

    def fields(self) -> list[str]:
        """The banner's fields (the description is one field, escaped when written)."""
        month = _MONTHS[self.date.month - 1]
        day = f"{self.date.day:02d}"
        return [
            "$GahpVersion:",
            self.number,
            month,
            day,
            str(self.date.year),
            self.description,
            "$",
        ]

    def __str__(self) -> str:
        return " ".join(self.fields())


# ---- framing ----------------------------------------------------------------------------------


class LineSplitter:
    """Splits a byte stream into lines, honouring escaped newlines, with a bounded line length.

    `feed()` bytes in, then call `next_line()` until it returns None (more data needed).
    A line longer than `max_length` raises GahpProtocolError once; the splitter then skips
    to the end of that line and carries on with the next one.
    """

    def __init__(self, max_length: int = MAX_LINE_LENGTH) -> None:
        self._max = max_length
        self._buf = bytearray()
        # Where the search for the next unescaped LF resumes (everything before is not one).
        self._scan = 0
        # Skipping the rest of an over-long line; `_carry` means its last byte was an
        # escaping backslash, so the first byte of the next chunk is literal.
        self._skipping = False
        self._carry = False
        self._error: GahpProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held that do not make a complete line yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> None:
        """Add bytes read from the peer."""
        if self._skipping:
            data = self._skip(data)
            if self._skipping:
                return
        self._buf += data

    def lines(self) -> list[bytes]:
        """Every complete line buffered now, without their LFs; [] when more data is needed.

        An over-long line raises GahpProtocolError, after the lines before it are returned.
        """
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        buf = self._buf
        end = buf.rfind(b"\n")
        if end >= 0 and buf.find(b"\\", 0, end) < 0:
            # No escapes at all: every LF ends a line, so split in one go.
            lines = bytes(buf[:end]).split(b"\n")
            if max(map(len, lines)) <= self._max:
                del buf[: end + 1]
                self._scan = 0
                return lines
        found: list[bytes] = []
        while True:
            try:
                line = self.next_line()
            except GahpProtocolError as error:
                if not found:
                    raise
                self._error = error
                return found
            if line is None:
                return found
            found.append(line)

    def next_line(self) -> bytes | None:
        """The next complete line without its LF, or None when more data is needed."""
        buf = self._buf
        while True:
            end = buf.find(b"\n", self._scan)
            if end < 0:
                if len(buf) > self._max:
                    self._start_skipping()
                    raise GahpProtocolError(f"a GAHP line is longer than {self._max} bytes")
                self._scan = len(buf)
                return None
            if _escaped_run(buf, 0, end):
                self._scan = end + 1
                continue
            line = bytes(buf[:end])
            del buf[: end + 1]
            self._scan = 0
            if end > self._max:
                raise GahpProtocolError(f"a GAHP line is longer than {self._max} bytes")
            return line

    def _start_skipping(self) -> None:
        self._carry = _escaped_run(self._buf, 0, len(self._buf))
        self._buf = bytearray()
        self._scan = 0
        self._skipping = True

    def _skip(self, data: bytes) -> bytes:
        """Drop `data` up to the end of the over-long line; return what follows it."""
        start = 0
        if self._carry and data:
            start = 1
            self._carry = False
        pos = start
        while True:
            end = data.find(b"\n", pos)
            if end < 0:
                self._carry = _escaped_run(data, start, len(data))
                return b""
            if _escaped_run(data, start, end):
                pos = end + 1
                continue
            self._skipping = False
            return data[end + 1 :]


def _escaped_run(buf: bytes | bytearray, start: int, end: int) -> bool:
    """Whether the backslashes just before `end` (not before `start`) escape the byte at `end`.

    Escapes pair up left to right, so an odd run of backslashes escapes what follows it.
    """
    pos = end
    while pos > start and buf[pos - 1] == _BACKSLASH:
        pos -= 1
    return (end - pos) % 2 == 1
