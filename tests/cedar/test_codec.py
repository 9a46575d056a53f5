"""CEDAR's bytes with no I/O: packets, AES-GCM with the handshake digests, and the values."""

from __future__ import annotations

import pytest

from htgrid.net._errors import CedarError
from htgrid.net.cedar import Channel, Reader, Writer, literal_lines, parse_ad


def _pair() -> tuple[Channel, Channel]:
    return Channel(), Channel()


def _carry(src: Channel, dst: Channel, payload: bytes) -> bytes | None:
    dst.receive_data(src.send_message(payload))
    return dst.next_message()


def test_plaintext_message_round_trip_and_the_observed_header() -> None:
    a, b = _pair()
    w = Writer(False).int(60010).lines([b'Enact = "NO"', b"Command = 5"])
    packets = a.send_message(w.getvalue())
    assert packets[:5] == bytes([1]) + len(w.getvalue()).to_bytes(4, "big")
    assert packets[5:13] == (60010).to_bytes(8, "big")
    b.receive_data(packets)
    r = Reader(b.next_message() or b"", False)
    assert r.int() == 60010
    assert r.lines() == ['Enact = "NO"', "Command = 5"]
    r.done("the ad")


def test_a_message_split_anywhere_waits_for_the_rest() -> None:
    a, b = _pair()
    data = a.send_message(b"x" * 700_000)  # three packets
    for i in range(0, len(data), 9999):
        assert b.next_message() is None
        b.receive_data(data[i : i + 9999])
    assert b.next_message() == b"x" * 700_000


def test_empty_message_sends_nothing() -> None:
    assert Channel().send_message(b"") == b""


def test_aes_both_ways_after_plaintext_handshake() -> None:
    client, server = _pair()
    assert _carry(client, server, b"hello") == b"hello"
    assert _carry(server, client, b"policy") == b"policy"
    key = bytes(range(32))
    client.start_aes(key)
    server.start_aes(key)
    for n in range(3):  # the first packet each way carries the IV and the digests
        assert _carry(server, client, b"post-auth %d" % n) == b"post-auth %d" % n
        assert _carry(client, server, b"payload %d" % n * 5000) == b"payload %d" % n * 5000


def test_aes_refuses_a_handshake_that_differs() -> None:
    """The first encrypted packet authenticates every plaintext packet before it."""
    client, server = _pair()
    server.receive_data(client.send_message(b"hello"))
    assert server.next_message() == b"hello"
    client.send_message(b"a message the server never saw")
    key = bytes(32)
    client.start_aes(key)
    server.start_aes(key)
    server.receive_data(client.send_message(b"secret"))
    with pytest.raises(CedarError, match="does not verify"):
        server.next_message()


def test_aes_refuses_a_tampered_packet() -> None:
    client, server = _pair()
    client.start_aes(bytes(32))
    server.start_aes(bytes(32))
    packet = bytearray(client.send_message(b"payload"))
    packet[-3] ^= 1
    server.receive_data(bytes(packet))
    with pytest.raises(CedarError, match="does not verify"):
        server.next_message()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x16\x03\x01\x02\x00", "end flag is 22"),
        (b"\x01\x00\x00\x00\x00", "a packet of 0 bytes"),
        (b"\x01\x7f\xff\xff\xff", "1048576 allowed"),
    ],
)
def test_bad_headers_are_named(data: bytes, reason: str) -> None:
    channel = Channel()
    channel.receive_data(data)
    with pytest.raises(CedarError, match=reason):
        channel.next_message()


@pytest.mark.parametrize("encrypted", [False, True])
def test_strings_and_null(encrypted: bool) -> None:
    w = Writer(encrypted).string("héllo").string(None).string("").char(2)
    r = Reader(w.getvalue(), encrypted)
    assert r.string() == "héllo"
    assert r.string() is None
    assert r.string() == ""
    assert r.char() == 2
    r.done("the strings")


def test_encrypted_strings_carry_their_length() -> None:
    assert Writer(True).string("ab").getvalue() == (3).to_bytes(8, "big") + b"ab\0"
    assert Writer(False).string("ab").getvalue() == b"ab\0"


def test_reading_past_the_end_names_what() -> None:
    with pytest.raises(CedarError, match="ended reading the command"):
        Reader(b"\0\0", False).int("the command")
    with pytest.raises(CedarError, match="claims 5000000 attributes"):
        Reader((5_000_000).to_bytes(8, "big"), False).lines(limit=100)


def test_literal_lines_and_parse() -> None:
    lines = literal_lines({"A": 'x"y', "B": 3, "C": True, "D": "60"})
    ad = parse_ad([line.decode() for line in lines], "test")
    assert (ad["A"], ad["B"], ad["C"], ad["D"]) == ('x"y', 3, True, "60")
    with pytest.raises(CedarError, match="attribute line 2"):
        parse_ad(["A = 1", "B = = ="], "the query ad")
