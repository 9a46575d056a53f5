"""The GAHP server runtime in process: bytes in, bytes out, with toy commands."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence

import pytest

import htgrid.gahp.server as gahp_server
from htgrid.gahp import BadArguments, Call, Command, GahpServer, GahpVersion
from htgrid.gahp.server import ServerState

from ._fakes import settle
from ._wire import request_line, split_fields

VERSION = GahpVersion("9.8.7", datetime.date(2026, 1, 2), "toy GAHP")


class Pipe:
    """The server's stdin (fed by the test) and stdout (collected)."""

    def __init__(self) -> None:
        self.reader = asyncio.StreamReader()
        self.written = bytearray()
        self._read = 0

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        return None

    def send(self, *fields: str) -> None:
        self.reader.feed_data(request_line(*fields))

    def lines(self) -> list[list[str]]:
        """Lines written since the last call."""
        text = bytes(self.written[self._read :])
        self._read = len(self.written)
        chunks = text.split(b"\r\n")
        assert chunks[-1] == b""
        return [split_fields(chunk) for chunk in chunks[:-1]]


class Toy:
    """Commands whose handlers the test releases by hand."""

    def __init__(self) -> None:
        self.gates: dict[int, asyncio.Event] = {}
        self.calls: list[Call] = []

    async def wait(self, call: Call) -> Sequence[str]:
        self.calls.append(call)
        gate = self.gates.setdefault(call.request_id, asyncio.Event())
        await gate.wait()
        return ("0", *call.args)

    async def echo(self, call: Call) -> Sequence[str]:
        self.calls.append(call)
        return ("0", *call.args)

    async def boom(self, call: Call) -> Sequence[str]:
        raise RuntimeError("kaput")

    def release(self, request_id: int) -> None:
        self.gates.setdefault(request_id, asyncio.Event()).set()


def make_server(toy: Toy) -> GahpServer:
    return GahpServer(
        VERSION,
        [
            Command("WAIT", 1, toy.wait, workers=2),
            Command("ECHO", 2, toy.echo),
            Command("MANY", 0, toy.echo, variadic=True),
            Command("BOOM", 0, toy.boom, on_error=lambda reason: ("1", reason)),
            Command("SILENT_BOOM", 0, toy.boom),
        ],
        max_line=200,
    )


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_banner_version_commands() -> None:
    async def main() -> None:
        toy = Toy()
        server = make_server(toy)
        pipe = Pipe()
        task = asyncio.create_task(server.serve(pipe.reader, pipe))
        pipe.send("VERSION")
        pipe.send("commands")
        pipe.send("QUIT")
        await task
        banner, version, commands, quit_ = pipe.lines()
        assert banner == ["$GahpVersion:", "9.8.7", "Jan", "02", "2026", "toy GAHP", "$"]
        assert version == ["S", *banner]
        assert commands[0] == "S"
        assert commands[1:] == sorted(commands[1:])
        assert {"WAIT", "ECHO", "RESULTS", "QUIT", "RESPONSE_PREFIX", "UPDATE_TOKEN"} <= set(
            commands
        )
        assert quit_ == ["S"]
        assert server.state is ServerState.CLOSED

    run(main())


def test_errors_for_bad_requests() -> None:
    async def main() -> None:
        toy = Toy()
        pipe = Pipe()
        task = asyncio.create_task(make_server(toy).serve(pipe.reader, pipe))
        pipe.reader.feed_data(b"\r\n")
        pipe.send("NOPE", "1")
        pipe.send("ECHO", "1", "a")
        pipe.send("ECHO", "1", "a", "b", "c")
        pipe.send("ECHO", "x", "a", "b")
        pipe.send("ECHO", "0", "a", "b")
        pipe.send("RESULTS", "extra")
        pipe.send("QUIT")
        await task
        assert pipe.lines()[1:] == [
            ["E", "Unknown command"],
            ["E", "Unknown command"],
            ["E", "expected 3 parameters, 2 found"],
            ["E", "expected 3 parameters, 4 found"],
            ["E", "Bad request id x"],
            ["E", "Bad request id 0"],
            ["E", "expected 0 parameters, 1 found"],
            ["S"],
        ]
        assert toy.calls == []

    run(main())


def test_results_keep_their_order_and_r_comes_once_per_batch() -> None:
    async def main() -> None:
        toy = Toy()
        pipe = Pipe()
        task = asyncio.create_task(make_server(toy).serve(pipe.reader, pipe))
        pipe.send("ASYNC_MODE_ON")
        pipe.send("WAIT", "5", "a")
        pipe.send("WAIT", "6", "b")
        await settle()
        assert pipe.lines()[1:] == [["S"], ["S"], ["S"]]
        toy.release(6)
        await settle()
        toy.release(5)
        await settle()
        # One R for the batch, not one per result.
        assert pipe.lines() == [["R"]]
        pipe.send("RESULTS")
        await settle()
        assert pipe.lines() == [["S", "2"], ["6", "0", "b"], ["5", "0", "a"]]
        pipe.send("ECHO", "7", "x y", "z\nw")
        await settle()
        assert pipe.lines() == [["S"], ["R"]]
        pipe.send("RESULTS")
        pipe.send("RESULTS")
        pipe.send("QUIT")
        await task
        assert pipe.lines() == [["S", "1"], ["7", "0", "x y", "z\nw"], ["S", "0"], ["S"]]

    run(main())


def test_without_async_mode_there_is_no_r() -> None:
    async def main() -> None:
        toy = Toy()
        pipe = Pipe()
        task = asyncio.create_task(make_server(toy).serve(pipe.reader, pipe))
        pipe.send("ECHO", "1", "a", "b")
        await settle()
        pipe.send("ASYNC_MODE_ON")  # a result is already waiting: say so at once
        pipe.send("ASYNC_MODE_OFF")
        pipe.send("ECHO", "2", "c", "d")
        await settle()
        pipe.send("RESULTS")
        pipe.send("QUIT")
        await task
        assert pipe.lines()[1:] == [
            ["S"],
            ["S"],
            ["R"],
            ["S"],
            ["S"],
            ["S", "2"],
            ["1", "0", "a", "b"],
            ["2", "0", "c", "d"],
            ["S"],
        ]

    run(main())


def test_threads_limit_reached() -> None:
    async def main() -> None:
        toy = Toy()
        pipe = Pipe()
        task = asyncio.create_task(make_server(toy).serve(pipe.reader, pipe))
        for request_id in (1, 2, 3):
            pipe.send("WAIT", str(request_id), "x")
        await settle()
        assert pipe.lines()[1:] == [["S"], ["S"], ["F", "Threads limit reached"]]
        toy.release(1)
        await settle()
        pipe.send("WAIT", "3", "x")
        await settle()
        assert pipe.lines() == [["S"]]
        pipe.send("QUIT")
        await task

    run(main())


def test_response_prefix_covers_every_later_line() -> None:
    async def main() -> None:
        toy = Toy()
        pipe = Pipe()
        task = asyncio.create_task(make_server(toy).serve(pipe.reader, pipe))
        pipe.send("RESPONSE_PREFIX", "GAHP:")
        pipe.send("ASYNC_MODE_ON")
        pipe.send("ECHO", "3", "a", "b")
        await settle()
        pipe.send("RESULTS")
        pipe.send("NOPE")
        pipe.send("QUIT")
        await task
        assert pipe.lines()[1:] == [
            ["S"],
            ["GAHP:S"],
            ["GAHP:S"],
            ["GAHP:R"],
            ["GAHP:S", "1"],
            ["GAHP:3", "0", "a", "b"],
            ["GAHP:E", "Unknown command"],
            ["GAHP:S"],
        ]

    run(main())


def test_credentials_reach_handlers_as_they_stood() -> None:
    async def main() -> None:
        toy = Toy()
        server = make_server(toy)
        pipe = Pipe()
        task = asyncio.create_task(server.serve(pipe.reader, pipe))
        pipe.send("INITIALIZE_FROM_FILE", "/tmp/x509 up")
        pipe.send("ECHO", "1", "a", "b")
        pipe.send("CACHE_PROXY_FROM_FILE", "3", "/tmp/other")
        pipe.send("USE_CACHED_PROXY", "3")
        pipe.send("UPDATE_TOKEN", "/tmp/token")
        pipe.send("ECHO", "2", "a", "b")
        pipe.send("USE_CACHED_PROXY", "4")
        pipe.send("UNCACHE_PROXY", "3")
        pipe.send("UNCACHE_PROXY", "3")
        pipe.send("REFRESH_PROXY_FROM_FILE", "/tmp/new")
        pipe.send("ECHO", "3", "a", "b")
        pipe.send("QUIT")
        await task
        replies = pipe.lines()[1:]
        assert replies[6] == ["F", "Cannot find required proxyId"]
        assert replies[8] == ["F", "proxyId not found"]
        first, second, third = (call.credentials for call in toy.calls)
        assert first.proxy == "/tmp/x509 up" and first.token_file is None
        assert second.proxy == "/tmp/other" and second.token_file == "/tmp/token"
        assert third.proxy == "/tmp/new" and third.cached_proxies == {}
        assert server.credentials == third

    run(main())


def test_a_failing_handler() -> None:
    async def main() -> None:
        toy = Toy()
        pipe = Pipe()
        task = asyncio.create_task(make_server(toy).serve(pipe.reader, pipe))
        pipe.send("BOOM", "1")
        pipe.send("SILENT_BOOM", "2")
        await settle()
        pipe.send("RESULTS")
        pipe.send("QUIT")
        await task
        assert pipe.lines()[-3:] == [["S", "1"], ["1", "1", "RuntimeError: kaput"], ["S"]]

    run(main())


def test_over_long_line_gets_e_and_the_next_line_is_served() -> None:
    async def main() -> None:
        toy = Toy()
        pipe = Pipe()
        task = asyncio.create_task(make_server(toy).serve(pipe.reader, pipe))
        pipe.reader.feed_data(b"ECHO 1 " + b"x" * 300)
        pipe.reader.feed_data(b"x" * 300 + b"\r\nVERSION\r\n")
        pipe.send("QUIT")
        await task
        replies = pipe.lines()[1:]
        assert replies[0] == ["E", "a GAHP line is longer than 200 bytes"]
        assert replies[1][0] == "S" and replies[1][1] == "$GahpVersion:"
        assert replies[2] == ["S"]

    run(main())


def test_variadic_commands() -> None:
    async def main() -> None:
        toy = Toy()
        pipe = Pipe()
        task = asyncio.create_task(make_server(toy).serve(pipe.reader, pipe))
        pipe.send("MANY")
        pipe.send("MANY", "1")
        pipe.send("MANY", "2", "a", "b", "c")
        await settle()
        pipe.send("RESULTS")
        pipe.send("QUIT")
        await task
        assert pipe.lines()[1:] == [
            ["E", "expected 1 parameters, 0 found"],
            ["S"],
            ["S"],
            ["S", "2"],
            ["1", "0"],
            ["2", "0", "a", "b", "c"],
            ["S"],
        ]

    run(main())


def test_quit_and_eof_cancel_unfinished_work() -> None:
    async def main() -> None:
        toy = Toy()
        pipe = Pipe()
        task = asyncio.create_task(make_server(toy).serve(pipe.reader, pipe))
        pipe.send("WAIT", "1", "x")
        await settle()
        pipe.reader.feed_eof()
        await asyncio.wait_for(task, 5)
        assert len(toy.calls) == 1

    run(main())


def test_request_quit_stops_a_waiting_server() -> None:
    async def main() -> None:
        toy = Toy()
        server = make_server(toy)
        pipe = Pipe()
        task = asyncio.create_task(server.serve(pipe.reader, pipe))
        await settle()
        server.request_quit()
        await asyncio.wait_for(task, 5)
        assert server.state is ServerState.CLOSED

    run(main())


def test_duplicate_commands_are_refused() -> None:
    toy = Toy()
    with pytest.raises(ValueError, match="defined twice"):
        GahpServer(VERSION, [Command("RESULTS", 0, toy.echo)])
    with pytest.raises(ValueError, match="worker"):
        GahpServer(VERSION, [Command("X", 0, toy.echo, workers=0)])


class Numbers:
    """A command whose parser reads its argument as a number, recording what ran when."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def parse(self, args: tuple[str, ...]) -> int:
        self.events.append(f"parsed {args[0]}")
        if not args[0].isdigit():
            raise BadArguments(f"not a number: {args[0]!r}")
        return int(args[0])

    async def double(self, call: Call) -> Sequence[str]:
        await asyncio.sleep(0)  # a handler that waits: it goes on in a task
        self.events.append(f"ran {call.args[0]}")
        return (str(2 * call.parsed),)

    def server(self) -> GahpServer:
        return GahpServer(VERSION, [Command("DOUBLE", 1, self.double, parse=self.parse)])


def test_a_commands_parser_answers_e_and_hands_what_it_made_to_the_handler() -> None:
    async def main() -> None:
        numbers = Numbers()
        pipe = Pipe()
        task = asyncio.create_task(numbers.server().serve(pipe.reader, pipe))
        pipe.send("DOUBLE", "1", "x7")
        pipe.send("DOUBLE", "2", "21")
        await settle()
        pipe.send("RESULTS")
        pipe.send("QUIT")
        await task
        assert pipe.lines()[1:] == [
            ["E", "not a number: 'x7'"],
            ["S"],
            ["S", "1"],
            ["2", "42"],
            ["S"],
        ]
        # Each request parsed once; the refused one never reached the handler.
        assert numbers.events == ["parsed x7", "parsed 21", "ran 21"]

    run(main())


def test_a_long_burst_of_requests_lets_the_handlers_started_run_while_it_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every request makes its time slice run out: the reading task lets the loop run after
    # each line, as it does every few milliseconds of a real burst.
    monkeypatch.setattr(gahp_server, "_SLICE", -1.0)

    async def main() -> None:
        numbers = Numbers()
        pipe = Pipe()
        task = asyncio.create_task(numbers.server().serve(pipe.reader, pipe))
        pipe.reader.feed_data(b"".join(request_line("DOUBLE", str(n), str(n)) for n in range(1, 7)))
        pipe.send("QUIT")
        await task
        assert numbers.events.index("ran 1") < numbers.events.index("parsed 6")
        assert [line for line in pipe.lines()[1:] if line != ["R"]] == [["S"]] * 7

    run(main())
