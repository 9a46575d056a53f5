"""`htgrid gahp batch` driven over pipes with raw bytes, line by line from the protocol text.

The client here is tests/gahp/_wire.py, which shares no code with htgrid.gahp.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._wire import Wire, batch_gahp_argv, escape, request_line, split_fields

BLAH_COMMANDS = {
    "BLAH_JOB_SUBMIT",
    "BLAH_JOB_STATUS",
    "BLAH_JOB_CANCEL",
    "BLAH_JOB_HOLD",
    "BLAH_JOB_RESUME",
    "BLAH_JOB_REFRESH_PROXY",
    "BLAH_PING",
    "BLAH_JOB_STATUS_ALL",
    "BLAH_JOB_FIND",
}
COMMON = {"ASYNC_MODE_ON", "ASYNC_MODE_OFF", "COMMANDS", "QUIT", "RESULTS", "VERSION"}


@pytest.fixture
def gahp(tmp_path: Path) -> Iterator[Wire]:
    wire = Wire(batch_gahp_argv(str(tmp_path / "scratch"), "--status-window", "0.05"))
    banner = wire.line()
    assert banner[0] == "$GahpVersion:" and banner[-1] == "$", banner
    yield wire
    wire.stop()


def submit_ad(tmp_path: Path, **attrs: str) -> str:
    body = {
        "gridtype": '"fork"',
        "Cmd": '"/bin/sh"',
        "StageCmd": "false",
        "Iwd": f'"{tmp_path}"',
    }
    body.update(attrs)
    return "[ " + "; ".join(f"{k} = {v}" for k, v in body.items()) + " ]"


def test_handshake_as_the_grid_manager_does_it(gahp: Wire) -> None:
    version = gahp.ask("VERSION")
    assert version[0] == "S"
    assert version[1] == "$GahpVersion:" and version[-1] == "$"
    number, month, day, year = version[2:6]
    assert number.count(".") == 2 and len(month) == 3 and day.isdigit() and len(year) == 4
    commands = gahp.ask("COMMANDS")
    assert commands[0] == "S"
    assert set(commands[1:]) >= BLAH_COMMANDS | COMMON
    assert gahp.ask("RESPONSE_PREFIX", "GAHP:") == ["S"]
    assert gahp.ask("ASYNC_MODE_ON") == ["GAHP:S"]
    assert gahp.ask("RESULTS") == ["GAHP:S", "0"]
    assert gahp.ask("quit") == ["GAHP:S"]
    assert gahp.wait() == 0


def test_malformed_lines_get_e(gahp: Wire) -> None:
    gahp.send(b"\r\n")
    assert gahp.line() == ["E", "Unknown command"]
    assert gahp.ask("BLAH_NO_SUCH_THING", "1") == ["E", "Unknown command"]
    assert gahp.ask("BLAH_JOB_STATUS", "1") == ["E", "expected 2 parameters, 1 found"]
    assert gahp.ask("BLAH_JOB_STATUS", "1", "a", "b") == ["E", "expected 2 parameters, 3 found"]
    assert gahp.ask("BLAH_JOB_REFRESH_PROXY", "1", "a") == ["E", "expected 3 parameters, 2 found"]
    assert gahp.ask("BLAH_PING", "one", "fork") == ["E", "Bad request id one"]
    assert gahp.ask("VERSION", "extra")[0] == "E"
    # Still serving after all that.
    assert gahp.ask("RESULTS") == ["S", "0"]


def test_commands_are_case_insensitive(gahp: Wire) -> None:
    assert gahp.ask("blah_ping", "1", "fork") == ["S"]
    assert gahp.collect({"1"})["1"] == ["1", "0", "No error"]


def test_escaped_newline_and_spaces_inside_arguments(gahp: Wire, tmp_path: Path) -> None:
    # An escaped LF inside an argument does not end the request line.
    gahp.send(b"BLAH_PING 1 fo\\\nrk\r\nBLAH_PING 2 fork\r\n")
    assert gahp.line() == ["S"]
    assert gahp.line() == ["S"]
    results = gahp.collect({"1", "2"})
    assert results["1"][1] == "1" and "fo\\nrk" in results["1"][2]  # shown with repr()
    assert results["2"] == ["2", "0", "No error"]
    # A job whose arguments hold spaces and a newline gets them as one argument each; the
    # ad itself has a raw newline between attributes (escaped on the wire) and one in a
    # string (which ClassAd syntax allows).
    script = tmp_path / "args.sh"
    script.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s|" "$a"; done > args.txt\n')
    script.chmod(0o755)
    ad = submit_ad(
        tmp_path,
        Cmd='"args.sh"',
        StageCmd="true",
        Arguments="\"'two words' 'line\none'\"",
        TransferOutput='"args.txt"',
    ).replace("; ", ";\n ")
    assert "\n" in ad
    assert gahp.ask("BLAH_JOB_SUBMIT", "3", ad) == ["S"]
    submitted = gahp.collect({"3"})["3"]
    assert submitted[:3] == ["3", "0", "No error"] and len(submitted) == 4
    blah_id = submitted[3]
    lrms, date, native = blah_id.split("/")
    assert lrms == "fork" and len(date) == 8 and date.isdigit() and native
    status = wait_for_status(gahp, blah_id, "4")
    assert status[:4] == ["9", "0", "No error", "4"]
    assert "ExitCode = 0" in status[4]
    assert (tmp_path / "args.txt").read_text() == "two words|line\none|"


def wait_for_status(gahp: Wire, blah_id: str, wanted: str) -> list[str]:
    deadline = time.monotonic() + 20
    while True:
        assert gahp.ask("BLAH_JOB_STATUS", "9", blah_id) == ["S"]
        result = gahp.collect({"9"})["9"]
        if result[3] == wanted or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def test_results_framing_and_r_notifications(gahp: Wire) -> None:
    assert gahp.ask("ASYNC_MODE_ON") == ["S"]
    assert gahp.ask("BLAH_PING", "11", "fork") == ["S"]
    # The result is announced with a lone R, once for the batch.
    assert split_fields(gahp.raw_line()) == ["R"]
    assert gahp.ask("BLAH_PING", "12", "fork") == ["S"]
    # Under load ping 12 may not be done at the first RESULTS: drain until both came.
    batches: list[int] = []
    got: list[list[str]] = []
    deadline = time.monotonic() + 30
    while len(got) < 2:
        head = gahp.ask("RESULTS")
        assert head[0] == "S" and time.monotonic() < deadline, head
        batches.append(int(head[1]))
        got += [gahp.line() for _ in range(batches[-1])]
        if len(got) < 2:
            time.sleep(0.05)
    assert got == [["11", "0", "No error"], ["12", "0", "No error"]]
    # No second R while 11's result waited; one only if 12's came after a RESULTS.
    assert gahp.notifications == (0 if batches[0] == 2 else 1)
    assert gahp.ask("RESULTS") == ["S", "0"]
    # The next result starts a new batch: a new R.
    assert gahp.ask("BLAH_PING", "13", "fork") == ["S"]
    assert split_fields(gahp.raw_line()) == ["R"]


def test_unused_result_slots_are_filled(gahp: Wire, tmp_path: Path) -> None:
    requests = [
        ("BLAH_JOB_SUBMIT", "1", "[ Cmd = "),
        ("BLAH_JOB_SUBMIT", "2", '[ Cmd = "/bin/true" ]'),
        ("BLAH_JOB_SUBMIT", "3", '[ gridtype = "fork" ]'),
        ("BLAH_JOB_SUBMIT", "4", '[ gridtype = "nosuch"; Cmd = "/bin/true" ]'),
        ("BLAH_JOB_STATUS", "5", "fork/20260101/999999999"),
        ("BLAH_JOB_STATUS", "6", "garbage"),
        ("BLAH_JOB_CANCEL", "7", "garbage"),
        ("BLAH_JOB_CANCEL", "8", "fork/20260101/999999999"),
        ("BLAH_JOB_HOLD", "9", "fork/20260101/999999999"),
        ("BLAH_PING", "10", "nosuch"),
    ]
    gahp.send(b"".join(request_line(*fields) for fields in requests))
    assert [gahp.line() for _ in requests] == [["S"]] * len(requests)
    got = gahp.collect({str(n) for n in range(1, 11)})
    # The grid manager asserts these field counts (id included).
    for request_id in ("1", "2", "3", "4"):
        assert len(got[request_id]) == 4 and got[request_id][3] == "N/A", got[request_id]
        assert got[request_id][1] != "0"
    assert got["1"][1:3] == ["1", "Error parsing classad"]
    assert got["2"][1:3] == ["1", "Missing gridtype in submission classAd"]
    assert got["3"][1:3] == ["7", "Cannot parse Cmd attribute in classad"]
    assert got["4"][1] == "3"
    for request_id in ("5", "6"):
        assert len(got[request_id]) == 5 and got[request_id][1] == "1", got[request_id]
        assert got[request_id][3:] == ["0", "N/A"]
    assert got["7"][1:] == ["2", "Malformed jobId garbage"]
    for request_id in ("8", "9", "10"):
        assert len(got[request_id]) == 3 and got[request_id][1] != "0", got[request_id]


def test_a_thousand_requests_in_flight(gahp: Wire, tmp_path: Path) -> None:
    ad = submit_ad(tmp_path, Arguments="\"-c 'exit 5'\"")
    assert gahp.ask("BLAH_JOB_SUBMIT", "1", ad) == ["S"]
    blah_id = gahp.collect({"1"})["1"][3]
    wait_for_status(gahp, blah_id, "4")
    ids = [str(n) for n in range(100, 1100)]
    # Every tenth asks about the real job, the rest about jobs nobody knows.
    targets = {n: (blah_id if int(n) % 10 == 0 else f"fork/20260101/{10**9 + int(n)}") for n in ids}
    gahp.send(b"".join(request_line("BLAH_JOB_STATUS", n, targets[n]) for n in ids))
    assert [gahp.line() for _ in ids] == [["S"]] * len(ids)
    got = gahp.collect(set(ids))
    for n in ids:
        result = got[n]
        assert len(result) == 5, result
        if targets[n] == blah_id:
            assert result[1:4] == ["0", "No error", "4"] and "ExitCode = 5" in result[4]
        else:
            assert result[1] == "1" and result[3:] == ["0", "N/A"]


def test_threads_limit_reached(tmp_path: Path) -> None:
    wire = Wire(batch_gahp_argv(str(tmp_path / "s"), "--submit-workers", "1"))
    try:
        wire.line()
        ad = submit_ad(tmp_path, Arguments="\"-c 'exit 0'\"")
        wire.send(b"".join(request_line("BLAH_JOB_SUBMIT", str(n), ad) for n in (1, 2, 3)))
        replies = [wire.line() for _ in range(3)]
        assert replies[0] == ["S"]
        assert ["F", "Threads limit reached"] in replies[1:]
        wire.collect({"1"})
        assert wire.ask("BLAH_JOB_SUBMIT", "4", ad) == ["S"]
        assert wire.collect({"4"})["4"][1] == "0"
    finally:
        wire.stop()


def test_quit_exits(gahp: Wire) -> None:
    assert gahp.ask("QUIT") == ["S"]
    assert gahp.wait() == 0
    with pytest.raises(EOFError):
        gahp.raw_line()


def test_eof_is_quit(gahp: Wire) -> None:
    assert gahp.ask("BLAH_PING", "1", "fork") == ["S"]
    gahp.close_stdin()
    assert gahp.wait() == 0


def test_a_partial_line_at_eof_is_not_run(gahp: Wire, tmp_path: Path) -> None:
    gahp.send(b"BLAH_JOB_SUBMIT 1 " + escape(submit_ad(tmp_path)))
    gahp.close_stdin()
    assert gahp.wait() == 0
    with pytest.raises(EOFError):
        gahp.raw_line()


def test_sigterm_exits(gahp: Wire) -> None:
    assert gahp.ask("VERSION")[0] == "S"
    os.kill(gahp.process.pid, signal.SIGTERM)
    assert gahp.wait() == 0
