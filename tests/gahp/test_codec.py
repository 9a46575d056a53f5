"""The GAHP codec on byte strings: escaping, framing, messages."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from htgrid.gahp import (
    MAX_LINE_LENGTH,
    NULL,
    REQUEST_ID_MAX,
    GahpProtocolError,
    GahpVersion,
    LineSplitter,
    LocalGahpError,
    Reply,
    ReplyCode,
    Request,
    RequestIds,
    Result,
    decode_fields,
    decode_reply,
    decode_request,
    decode_result,
    encode_line,
    encode_notification,
    encode_reply,
    encode_request,
    encode_result,
    encode_results,
    escape,
    is_notification,
    null,
    parse_request_id,
    unnull,
)


def lines(data: bytes, splitter: LineSplitter | None = None) -> list[bytes]:
    splitter = splitter or LineSplitter()
    splitter.feed(data)
    out = []
    while (line := splitter.next_line()) is not None:
        out.append(line)
    return out


# ---- escaping ---------------------------------------------------------------------------------


def test_escape_matches_the_grid_managers_example() -> None:
    assert escape('[ Cmd = "/bin/echo hi" ]') == '[\\ Cmd\\ =\\ "/bin/echo\\ hi"\\ ]'


def test_escape_the_four_special_characters_only() -> None:
    assert escape("a b\\c\rd\ne\tf") == "a\\ b\\\\c\\\rd\\\ne\tf"
    assert escape("plain") == "plain"


def test_a_backslash_makes_any_byte_literal() -> None:
    assert decode_fields(b"\\a\\b \\$") == ["ab", "$"]


def test_escaped_space_and_newline_stay_in_the_field() -> None:
    assert decode_fields(b"CMD 1 a\\ b c\\\nd") == ["CMD", "1", "a b", "c\nd"]


def test_unescaped_cr_is_dropped_and_escaped_cr_kept() -> None:
    assert decode_fields(b"S\r") == ["S"]
    assert decode_fields(b"a\rb \\\rc") == ["ab", "\rc"]


def test_two_spaces_make_an_empty_field() -> None:
    assert decode_fields(b"A  B ") == ["A", "", "B", ""]
    assert decode_fields(b"") == [""]


def test_a_lone_backslash_at_the_end_is_dropped() -> None:
    assert decode_fields(b"ab\\") == ["ab"]


def test_null_stands_for_absent_values() -> None:
    assert null(None) == NULL
    assert null("") == NULL
    assert null("x") == "x"
    assert unnull("null") is None
    assert unnull("NULL") is None
    assert unnull("x") == "x"


@given(st.lists(st.text(), min_size=1, max_size=8))
def test_any_argv_escapes_and_parses_back(argv: list[str]) -> None:
    data = encode_line(argv)
    assert lines(data) == [data[:-1]]
    assert decode_fields(lines(data)[0]) == argv


@given(st.lists(st.lists(st.text(), min_size=1, max_size=4), max_size=6), st.data())
def test_lines_survive_any_chunking(argvs: list[list[str]], data: st.DataObject) -> None:
    stream = b"".join(encode_line(argv) for argv in argvs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    splitter = LineSplitter()
    got: list[list[str]] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        splitter.feed(stream[start:cut])
        start = cut
        while (line := splitter.next_line()) is not None:
            got.append(decode_fields(line))
    assert got == argvs
    assert splitter.buffered == 0


@given(st.binary(max_size=300))
def test_any_bytes_frame_without_surprises(blob: bytes) -> None:
    splitter = LineSplitter(max_length=64)
    splitter.feed(blob)
    while True:
        try:
            line = splitter.next_line()
        except GahpProtocolError:
            continue
        if line is None:
            break
        decode_fields(line)


# ---- framing ----------------------------------------------------------------------------------


def test_escaped_newline_does_not_end_the_line() -> None:
    assert lines(b"A\\\nB\nC\n") == [b"A\\\nB", b"C"]


def test_backslash_runs_pair_up() -> None:
    # "\\\\\n": two escaped backslashes, then a real end of line.
    assert lines(b"A\\\\\nB\\\\\\\nC\n") == [b"A\\\\", b"B\\\\\\\nC"]


def test_crlf_lines() -> None:
    assert [decode_fields(x) for x in lines(b"S\r\nE\r\n")] == [["S"], ["E"]]


def test_byte_at_a_time() -> None:
    splitter = LineSplitter()
    got = []
    for byte in b"X a\\\nb\r\nY\n":
        splitter.feed(bytes([byte]))
        while (line := splitter.next_line()) is not None:
            got.append(decode_fields(line))
    assert got == [["X", "a\nb"], ["Y"]]


def test_an_over_long_line_raises_once_then_the_next_line_comes() -> None:
    splitter = LineSplitter(max_length=10)
    splitter.feed(b"x" * 25)
    with pytest.raises(GahpProtocolError, match="longer than 10 bytes"):
        splitter.next_line()
    # The rest of the long line (with an escaped newline in it) is skipped.
    splitter.feed(b"yy\\")
    assert splitter.next_line() is None
    splitter.feed(b"\nzz\nOK\n")
    assert splitter.next_line() == b"OK"
    assert splitter.next_line() is None


def test_a_complete_over_long_line_is_refused() -> None:
    splitter = LineSplitter(max_length=4)
    splitter.feed(b"123456\nok\n")
    with pytest.raises(GahpProtocolError):
        splitter.next_line()
    assert splitter.next_line() == b"ok"


def test_the_grid_managers_limit() -> None:
    assert MAX_LINE_LENGTH == 512_000
    with pytest.raises(LocalGahpError, match="limit"):
        encode_line(["x" * MAX_LINE_LENGTH])


# ---- messages ---------------------------------------------------------------------------------


def test_requests() -> None:
    assert encode_request("COMMANDS") == b"COMMANDS\r\n"
    assert encode_request("BLAH_PING", ["fork"], 7) == b"BLAH_PING 7 fork\r\n"
    assert decode_request(b"blah_ping 7 fork") == Request("BLAH_PING", ("7", "fork"))
    with pytest.raises(LocalGahpError):
        encode_request("A B")
    with pytest.raises(LocalGahpError):
        encode_request("X", [], 0)
    with pytest.raises(LocalGahpError):
        encode_request("X", [], REQUEST_ID_MAX + 1)


def test_request_ids() -> None:
    assert parse_request_id("1") == 1
    assert parse_request_id(str(REQUEST_ID_MAX)) == REQUEST_ID_MAX
    for bad in ("0", "-1", "01", "x", "", "1.5", str(REQUEST_ID_MAX + 1)):
        with pytest.raises(GahpProtocolError):
            parse_request_id(bad)


def test_return_lines() -> None:
    assert encode_reply(ReplyCode.SUCCESS) == b"S\r\n"
    assert encode_reply(ReplyCode.FAILURE, "Threads limit reached") == (
        b"F Threads\\ limit\\ reached\r\n"
    )
    assert encode_reply(ReplyCode.SUCCESS, prefix="GAHP:") == b"GAHP:S\r\n"
    reply = decode_reply(["E", "Unknown command"])
    assert reply == Reply(ReplyCode.ERROR, ("Unknown command",))
    assert not reply.ok
    assert reply.reason == "Unknown command"
    with pytest.raises(GahpProtocolError):
        decode_reply(["7", "0"])


def test_result_lines_and_results_framing() -> None:
    body = encode_result(12, ["0", "No error", "fork/20260101/1"])
    assert body == b"12 0 No\\ error fork/20260101/1"
    assert decode_result(decode_fields(body)) == Result(12, ("0", "No error", "fork/20260101/1"))
    assert encode_results([]) == b"S 0\r\n"
    assert encode_results([b"1 a", b"2 b"], "P:") == b"P:S 2\r\nP:1 a\r\nP:2 b\r\n"
    with pytest.raises(GahpProtocolError):
        decode_result(["x", "y"])


def test_async_notification() -> None:
    assert encode_notification() == b"R\r\n"
    assert encode_notification("GAHP:") == b"GAHP:R\r\n"
    assert is_notification(["R"])
    assert not is_notification(["R", "x"])
    assert not is_notification(["S"])


def test_version_banner() -> None:
    version = GahpVersion("1.2.3", datetime.date(2026, 3, 5), "htgrid test GAHP")
    assert str(version) == "$GahpVersion: 1.2.3 Mar 05 2026 htgrid test GAHP $"
    assert encode_line(version.fields()) == (
        b"$GahpVersion: 1.2.3 Mar 05 2026 htgrid\\ test\\ GAHP $\r\n"
    )


# ---- request id allocation --------------------------------------------------------------------


def test_request_ids_count_from_one() -> None:
    ids = RequestIds()
    assert [ids.allocate() for _ in range(3)] == [1, 2, 3]


def test_request_ids_wrap_and_skip_ids_in_use() -> None:
    ids = RequestIds(first=4, limit=5)
    assert [ids.allocate(), ids.allocate()] == [4, 5]
    ids.release(5)
    # Wrapped: 1, 2, 3 are free, 4 is still in use, 5 was released.
    assert [ids.allocate() for _ in range(4)] == [1, 2, 3, 5]
    with pytest.raises(LocalGahpError, match="in use"):
        ids.allocate()
    ids.release(2)
    assert ids.allocate() == 2


def test_request_ids_default_wrap_point() -> None:
    ids = RequestIds(first=REQUEST_ID_MAX)
    assert ids.allocate() == REQUEST_ID_MAX
    assert ids.allocate() == 1
