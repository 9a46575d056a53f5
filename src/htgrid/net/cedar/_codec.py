"""CEDAR's bytes, with no I/O: packets, messages, AES-GCM, and the values inside.

    channel = Channel()
    channel.receive_data(data)              # whatever the socket gave
    payload = channel.next_message()        # a whole message's bytes, or None: need more
    out = channel.send_message(payload)     # the packets to write (b"" for an empty one)
    channel.start_aes(key)                  # from the next packet on, both ways

A packet is a 5-byte header (an end flag, 1 on a message's last packet, and the payload's
length, big-endian, 1 byte to 1 MiB) and its payload. Once a session key is installed,
each packet is one AES-256-GCM operation: the first packet of each direction carries the
16-byte base IV in clear and authenticates the SHA-256 digests of every plaintext packet
sent and received before (so a handshake tampered with fails there); later packets use
the base IV with the packet count added to its first 4 bytes.

Inside a message (`Writer`, `Reader`): every integer is 8 bytes big-endian, a char 1
byte; a string is NUL-terminated, or, once encryption is on, preceded by its 8-byte
length (NUL included); a string whose first byte is 0xAD is NULL. A ClassAd is an int N,
N `Name = expr` lines in the old syntax, then MyType and TargetType (sent empty).
"""

from __future__ import annotations

import builtins
import hashlib
import os
import struct
from collections.abc import Sequence
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from htgrid.net._errors import CedarError

__all__ = [
    "MAX_PACKET",
    "Channel",
    "Reader",
    "Writer",
]

MAX_PACKET: Final = 1 << 20  # the most a packet may carry (HTCondor's receivers)
MAX_STRING: Final = 10_000_000  # the longest length-prefixed string taken
MAX_MESSAGE: Final = 64 << 20  # a message bigger than this is refused, not buffered
_SEND_CHUNK: Final = 256 << 10  # the plaintext per packet sent
_HEADER: Final = struct.Struct(">BI")
_INT: Final = struct.Struct(">q")
_IV: Final = 16
_TAG: Final = 16
_NULL_MARK: Final = 0xAD
_NO_DIGEST: Final = bytes(32)
_ZKM: Final = "ZKM"  # "the next line is a secret one": only with legacy ciphers


class _Digest:
    """SHA-256 of the plaintext packets of one direction, until encryption starts."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._empty = True

    def add(self, data: bytes) -> None:
        self._hash.update(data)
        self._empty = False

    def value(self) -> bytes:
        # A direction with no packet at all: zeros, not the hash of nothing (HTCondor's).
        return _NO_DIGEST if self._empty else self._hash.digest()


class _Aes:
    """One AES-GCM direction: its base IV and packet count."""

    def __init__(self, cipher: AESGCM, iv: bytes | None) -> None:
        self.cipher = cipher
        self.iv = iv
        self.count = 0

    def nonce(self) -> bytes:
        assert self.iv is not None
        first = (int.from_bytes(self.iv[:4], "big") + self.count) & 0xFFFFFFFF
        return first.to_bytes(4, "big") + self.iv[4:]


class Channel:
    """Both directions of one connection's packets, encrypted once a key is installed."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._message = bytearray()
        self._sent = _Digest()
        self._received = _Digest()
        self._frozen: tuple[bytes, bytes] | None = None  # (sent, received) at the key
        self._out: _Aes | None = None
        self._in: _Aes | None = None

    @property
    def encrypted(self) -> bool:
        """Whether a session key is installed (strings are then length-prefixed)."""
        return self._out is not None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet made into a message."""
        return len(self._buffer) + len(self._message)

    def start_aes(self, key: bytes) -> None:
        """Encrypt every packet from now on, both ways, with the 32-byte `key`."""
        if len(key) != 32:
            raise CedarError(f"an AES-256 key is 32 bytes, not {len(key)}")
        cipher = AESGCM(key)
        self._frozen = (self._sent.value(), self._received.value())
        self._out = _Aes(cipher, os.urandom(_IV))
        self._in = _Aes(cipher, None)

    def receive_data(self, data: bytes) -> None:
        self._buffer += data

    def next_message(self) -> bytes | None:
        """The next whole message's payload, None until all its packets are here."""
        while True:
            if len(self._buffer) < _HEADER.size:
                return None
            end, length = _HEADER.unpack_from(self._buffer)
            if end > 10:
                raise CedarError(
                    f"a packet header's end flag is {end} (0 or 1): this is not CEDAR "
                    f"(first bytes {bytes(self._buffer[:8]).hex()})"
                )
            if length <= 0 or length > MAX_PACKET + _IV + _TAG:
                raise CedarError(
                    f"a packet of {length} bytes (1 to {MAX_PACKET} allowed): "
                    f"first bytes {bytes(self._buffer[:8]).hex()}"
                )
            if len(self._buffer) < _HEADER.size + length:
                return None
            header = bytes(self._buffer[: _HEADER.size])
            body = bytes(self._buffer[_HEADER.size : _HEADER.size + length])
            del self._buffer[: _HEADER.size + length]
            if self._in is None:
                self._received.add(header + body)
                self._message += body
            else:
                self._message += self._decrypt(header, body)
            if len(self._message) > MAX_MESSAGE:
                raise CedarError(
                    f"a message of more than {MAX_MESSAGE >> 20} MiB: refused, not kept"
                )
            if end:
                message = bytes(self._message)
                self._message.clear()
                return message

    def _decrypt(self, header: bytes, body: bytes) -> bytes:
        aes = self._in
        assert aes is not None and self._frozen is not None
        if aes.iv is None:
            if len(body) < _IV + _TAG:
                raise CedarError(f"the first encrypted packet has {len(body)} bytes")
            aes.iv, body = body[:_IV], body[_IV:]
            sent, received = self._frozen
            aad = received + sent + header
        else:
            aad = header
        if len(body) < _TAG:
            raise CedarError(f"an encrypted packet of {len(body)} bytes has no room for its tag")
        try:
            plain = aes.cipher.decrypt(aes.nonce(), body, aad)
        except InvalidTag:
            raise CedarError(
                f"encrypted packet {aes.count} does not verify (wrong key, tampered, or a "
                "handshake that differs between the two sides)"
            ) from None
        aes.count += 1
        return plain

    def send_message(self, payload: bytes) -> bytes:
        """The packets of one message (nothing for an empty one: CEDAR sends none)."""
        if not payload:
            return b""
        out = bytearray()
        for start in range(0, len(payload), _SEND_CHUNK):
            chunk = payload[start : start + _SEND_CHUNK]
            end = 1 if start + _SEND_CHUNK >= len(payload) else 0
            out += self._packet(end, chunk)
        return bytes(out)

    def _packet(self, end: int, chunk: bytes) -> bytes:
        aes = self._out
        if aes is None:
            packet = _HEADER.pack(end, len(chunk)) + chunk
            self._sent.add(packet)
            return packet
        assert self._frozen is not None
        first = aes.count == 0
        length = len(chunk) + _TAG + (_IV if first else 0)
        header = _HEADER.pack(end, length)
        if first:
            sent, received = self._frozen
            aad = sent + received + header
        else:
            aad = header
        sealed = aes.cipher.encrypt(aes.nonce(), chunk, aad)
        aes.count += 1
        assert aes.iv is not None
        return header + (aes.iv + sealed if first else sealed)


class Writer:
    """One message's payload being built; strings as the channel's mode wants them."""

    def __init__(self, encrypted: bool) -> None:
        self.encrypted = encrypted
        self._parts: list[bytes] = []

    def int(self, value: builtins.int) -> Writer:
        self._parts.append(_INT.pack(value))
        return self

    def char(self, value: builtins.int) -> Writer:
        self._parts.append(bytes((value & 0xFF,)))
        return self

    def raw(self, data: bytes) -> Writer:
        self._parts.append(data)
        return self

    def string(self, text: str | bytes | None) -> Writer:
        if text is None:
            data = bytes((_NULL_MARK,))
            self._parts.append(_INT.pack(1) + data if self.encrypted else data)
            return self
        data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
        if b"\0" in data:
            raise CedarError("a string sent over CEDAR cannot hold a NUL byte")
        if self.encrypted:
            self._parts.append(_INT.pack(len(data) + 1))
        self._parts.append(data + b"\0")
        return self

    def lines(self, lines: Sequence[bytes]) -> Writer:
        """An ad given as its encoded `Name = expr` lines (no NUL), then MyType and
        TargetType left empty (modern peers read them as attributes)."""
        self.int(len(lines))
        if self.encrypted:
            pack = _INT.pack
            self._parts.extend(pack(len(line) + 1) + line + b"\0" for line in lines)
            self._parts.append(b"\0\0\0\0\0\0\0\x01\0" * 2)
        else:
            self._parts.extend(line + b"\0" for line in lines)
            self._parts.append(b"\0\0")
        return self

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class Reader:
    """One received message's payload, read value by value."""

    def __init__(self, data: bytes, encrypted: bool) -> None:
        self._data = data
        self._pos = 0
        self.encrypted = encrypted

    @property
    def remaining(self) -> builtins.int:
        return len(self._data) - self._pos

    def _take(self, n: builtins.int, what: str) -> bytes:
        if n < 0 or self._pos + n > len(self._data):
            raise CedarError(
                f"the message ended reading {what}: {n} bytes wanted at offset {self._pos}, "
                f"{self.remaining} left"
            )
        start = self._pos
        self._pos += n
        return self._data[start : self._pos]

    def int(self, what: str = "an integer") -> builtins.int:
        return int(_INT.unpack(self._take(8, what))[0])

    def char(self, what: str = "a character") -> builtins.int:
        return self._take(1, what)[0]

    def raw(self, n: builtins.int, what: str = "bytes") -> bytes:
        return self._take(n, what)

    def string_bytes(self, what: str = "a string") -> bytes | None:
        if self.encrypted:
            n = self.int(f"the length of {what}")
            if n <= 0 or n > MAX_STRING:
                raise CedarError(f"{what} claims a length of {n} bytes")
            data = self._take(n, what)
            if data[0] == _NULL_MARK:
                return None
            if data[-1] != 0:
                raise CedarError(f"{what} of {n} bytes does not end in NUL")
            return data[:-1]
        if self._pos < len(self._data) and self._data[self._pos] == _NULL_MARK:
            self._pos += 1
            return None
        end = self._data.find(b"\0", self._pos)
        if end < 0:
            raise CedarError(f"the message ended inside {what} (no NUL)")
        data = self._data[self._pos : end]
        self._pos = end + 1
        return data

    def string(self, what: str = "a string") -> str | None:
        data = self.string_bytes(what)
        return None if data is None else data.decode("utf-8", "surrogateescape")

    def text(self, what: str = "a string") -> str:
        """A string, NULL read as empty."""
        return self.string(what) or ""

    def lines(self, limit: builtins.int = 1_000_000, what: str = "a ClassAd") -> list[str]:
        """An ad's `Name = expr` lines (its MyType and TargetType read and dropped)."""
        count = self.int(f"the attribute count of {what}")
        if count < 0 or count > limit:
            raise CedarError(f"{what} claims {count} attributes (at most {limit})")
        out: list[str] = []
        index = 0
        while index < count:
            line = self.text(f"attribute {index + 1} of {what}")
            if line == _ZKM:  # a secret line follows (legacy ciphers only)
                line = self.text(f"secret attribute {index + 1} of {what}")
            out.append(line)
            index += 1
        self.string(f"the MyType of {what}")
        self.string(f"the TargetType of {what}")
        return out

    def done(self, what: str) -> None:
        """CedarError unless the message was read to its end (CEDAR's EOM check)."""
        if self.remaining:
            raise CedarError(f"{self.remaining} bytes left over after {what}")
