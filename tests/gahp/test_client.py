"""GahpClient against the real batch GAHP process, and against scripted servers on a fake clock."""

from __future__ import annotations

import asyncio
import datetime
import gc
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import pytest

import htgrid.gahp.client as client_module
from htgrid.gahp import (
    Call,
    Command,
    GahpClient,
    GahpRequestRefused,
    GahpServer,
    GahpServerExited,
    GahpTimeout,
    GahpVersion,
    LocalGahpError,
)
from htgrid.gahp.client import ClientState, GahpProcess

from ._fakes import ManualClock, settle
from ._wire import request_line, split_fields


def batch_argv(scratch: Path, *options: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "htgrid.cli._gahp",
        "batch",
        "--scratch",
        str(scratch),
        *options,
    ]


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


# ---- against the real server process ----------------------------------------------------------


def test_handshake_and_calls(tmp_path: Path) -> None:
    async def main() -> None:
        client = await GahpClient.start(batch_argv(tmp_path, "--status-window", "0.02"))
        assert client.state is ClientState.READY
        assert client.version.startswith("$GahpVersion: ")
        assert "htgrid batch GAHP" in client.version
        assert client.supports("blah_job_submit") and client.supports("BLAH_JOB_STATUS_ALL")
        assert client.async_mode
        assert await client.call("BLAH_PING", "fork") == ("0", "No error")
        status = await client.call("BLAH_JOB_STATUS", "fork/20260101/999999999")
        assert status[0] == "1" and status[2:] == ("0", "N/A")
        with pytest.raises(LocalGahpError, match="does not support"):
            await client.call("CONDOR_JOB_SUBMIT", "x")
        with pytest.raises(GahpRequestRefused, match="proxyId"):
            await client.command("USE_CACHED_PROXY", "99")
        with pytest.raises(LocalGahpError, match="limit"):
            await client.call("BLAH_PING", "x" * 600_000)
        assert await client.call("BLAH_PING", "fork") == ("0", "No error")
        assert await client.close() == 0
        assert client.state.value == "closed"
        with pytest.raises(GahpServerExited):
            await client.call("BLAH_PING", "fork")

    run(main())


def test_in_flight_limit(tmp_path: Path) -> None:
    async def main() -> None:
        client = await GahpClient.start(
            batch_argv(tmp_path, "--status-window", "0.01"), max_pending=20
        )
        most = 0

        async def watch() -> None:
            nonlocal most
            while True:
                most = max(most, client.in_flight)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        ids = [f"fork/20260101/{10**9 + n}" for n in range(300)]
        results = await asyncio.gather(*(client.call("BLAH_JOB_STATUS", i) for i in ids))
        watcher.cancel()
        assert all(
            r[0] == "1" and f"Job {i} not found" == r[1] for r, i in zip(results, ids, strict=True)
        )
        assert 1 < most <= 20
        assert client.in_flight == 0
        await client.close()

    run(main())


def test_threads_limit_reached_lowers_the_limit(tmp_path: Path) -> None:
    async def main() -> None:
        client = await GahpClient.start(
            batch_argv(tmp_path, "--status-window", "0.05", "--status-workers", "3")
        )
        ids = [f"fork/20260101/{10**9 + n}" for n in range(30)]
        results = await asyncio.gather(*(client.call("BLAH_JOB_STATUS", i) for i in ids))
        assert len(results) == 30 and all(len(r) == 4 for r in results)
        assert client.max_pending <= 3
        await client.close()

    run(main())


def test_a_dead_server_fails_everything_in_flight(tmp_path: Path) -> None:
    async def main() -> None:
        client = await GahpClient.start(batch_argv(tmp_path, "--status-window", "30"))
        calls = [
            asyncio.create_task(client.call("BLAH_JOB_STATUS", f"fork/20260101/{n}"))
            for n in range(5)
        ]
        await asyncio.sleep(0.2)
        assert client.pid is not None
        os.kill(client.pid, signal.SIGKILL)
        for call in calls:
            with pytest.raises(GahpServerExited, match=f"pid {client.pid}"):
                await call
        assert client.state is ClientState.DEAD
        assert not client.alive
        assert client.exit_status == -signal.SIGKILL
        with pytest.raises(GahpServerExited):
            await client.call("BLAH_PING", "fork")
        # The caller restarts it.
        again = await GahpClient.start(batch_argv(tmp_path))
        assert await again.call("BLAH_PING", "fork") == ("0", "No error")
        await again.close()

    run(main())


def test_a_server_that_does_not_start(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(GahpServerExited, match="exit status 3"):
            await GahpClient.start([sys.executable, "-c", "import sys; sys.exit(3)"])

    run(main())


def test_a_server_that_dies_at_start_leaves_no_unretrieved_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The COMMANDS line goes ahead of the banner: its failed wait must not be logged later."""
    unhandled: list[str] = []
    # pytest keeps the records logged, and the death's record would keep the futures alive.
    monkeypatch.setattr(client_module.log, "disabled", True)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: unhandled.append(context["message"]))
        try:
            await GahpClient.start([sys.executable, "-c", "import sys; sys.exit(3)"])
        except GahpServerExited:
            pass  # Not pytest.raises: its record would keep the failed futures alive.
        else:
            raise AssertionError("the server's death was not reported")
        for _ in range(3):  # The client's cancelled tasks end over a few turns.
            gc.collect()
            await asyncio.sleep(0.01)

    run(main())
    assert unhandled == []


# ---- scripted servers, injected clock and spawner --------------------------------------------


class FakeProcess:
    """A GahpProcess made of two in-memory streams."""

    pid = 4242

    def __init__(self) -> None:
        self.to_server = asyncio.StreamReader()
        self.to_client = asyncio.StreamReader()
        self.exited = asyncio.Event()
        self.status: int | None = None

    # GahpProcess
    @property
    def stdin(self) -> FakeProcess:
        return self

    @property
    def stdout(self) -> asyncio.StreamReader:
        return self.to_client

    @property
    def stderr(self) -> None:
        return None

    def write(self, data: bytes) -> None:
        self.to_server.feed_data(data)

    async def drain(self) -> None:
        return None

    async def wait(self) -> int | None:
        await self.exited.wait()
        return self.status

    def close_stdin(self) -> None:
        self.to_server.feed_eof()

    def kill(self) -> None:
        self.exit(-9)

    def exit(self, status: int) -> None:
        if not self.exited.is_set():
            self.status = status
            self.to_client.feed_eof()
            self.exited.set()

    # the server side
    def reply(self, *fields: str) -> None:
        self.to_client.feed_data(request_line(*fields))

    async def request(self) -> list[str]:
        return split_fields((await self.to_server.readuntil(b"\n")).rstrip(b"\n"))


def spawner(process: FakeProcess) -> Callable[..., Awaitable[GahpProcess]]:
    async def spawn(argv: Sequence[str], env: Mapping[str, str] | None) -> GahpProcess:
        return process

    return spawn


async def scripted_start(
    process: FakeProcess, clock: ManualClock, commands: Sequence[str], max_pending: int = 50
) -> asyncio.Task[GahpClient]:
    starting = asyncio.create_task(
        GahpClient.start(["fake"], spawn=spawner(process), clock=clock, max_pending=max_pending)
    )
    process.reply("$GahpVersion:", "1.0.0", "Jan", "01", "2026", "fake", "$")
    assert await process.request() == ["COMMANDS"]
    process.reply("S", *commands)
    return starting


def test_polling_on_a_timer_without_async_mode() -> None:
    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        client = await (await scripted_start(process, clock, ["RESULTS", "QUIT", "ECHO"]))
        assert not client.async_mode
        first = asyncio.create_task(client.call("ECHO", "a b"))
        second = asyncio.create_task(client.call("ECHO", "c"))
        assert await process.request() == ["ECHO", "1", "a b"]
        assert await process.request() == ["ECHO", "2", "c"]
        process.reply("S")
        process.reply("S")
        await settle()
        # Nothing asks for results until the 5 s poll timer fires.
        await clock.advance(4.9)
        assert process.to_server._buffer == b""  # type: ignore[attr-defined]
        await clock.advance(0.2)
        assert await process.request() == ["RESULTS"]
        process.to_client.feed_data(b"S 2\r\n2 ok\r\n77 stray\r\n")
        await settle()
        assert await second == ("ok",)
        assert not first.done()
        await clock.advance(5)
        assert await process.request() == ["RESULTS"]
        process.reply("S", "1")
        process.reply("1", "fine", "")
        assert await first == ("fine", "")
        process.exit(0)

    run(main())


def test_the_handshake_is_two_round_trips() -> None:
    """COMMANDS goes before the banner is read; the rest of the handshake goes in one
    write once COMMANDS is answered, and the answers are read in order."""

    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        starting = asyncio.create_task(
            GahpClient.start(["fake"], spawn=spawner(process), clock=clock)
        )
        # The server has printed nothing yet.
        assert await asyncio.wait_for(process.request(), 10) == ["COMMANDS"]
        process.reply("$GahpVersion:", "1.0.0", "Jan", "01", "2026", "fake", "$")
        process.reply("S", "RESULTS", "CONDOR_VERSION", "RESPONSE_PREFIX", "ASYNC_MODE_ON")
        assert (await process.request())[0] == "CONDOR_VERSION"
        assert await process.request() == ["RESPONSE_PREFIX", "GAHP:"]
        assert await process.request() == ["ASYNC_MODE_ON"]  # all three before any answer
        assert not starting.done()
        process.reply("S")
        process.reply("S")
        process.reply("GAHP:S")  # prefixed: RESPONSE_PREFIX was answered first
        client = await starting
        assert client.state is ClientState.READY and client.async_mode
        assert client.version == "$GahpVersion: 1.0.0 Jan 01 2026 fake $"
        process.exit(0)

    run(main())


def test_a_refused_handshake_step() -> None:
    """A refused ASYNC_MODE_ON leaves the client polling on its timer; a refused
    CONDOR_VERSION fails the start, naming the command."""

    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        starting = await scripted_start(process, clock, ["RESULTS", "ASYNC_MODE_ON"])
        assert await process.request() == ["ASYNC_MODE_ON"]
        process.reply("E")
        client = await starting
        assert client.state is ClientState.READY and not client.async_mode
        process.exit(0)

        process = FakeProcess()
        starting = await scripted_start(process, clock, ["RESULTS", "CONDOR_VERSION"])
        assert (await process.request())[0] == "CONDOR_VERSION"
        process.reply("E", "unknown version")
        with pytest.raises(GahpRequestRefused, match="CONDOR_VERSION"):
            await starting

    run(main())


def test_r_asks_for_results_at_once_and_the_prefix_is_used() -> None:
    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        starting = await scripted_start(
            process, clock, ["RESULTS", "ASYNC_MODE_ON", "RESPONSE_PREFIX", "ECHO"]
        )
        assert await process.request() == ["RESPONSE_PREFIX", "GAHP:"]
        process.reply("S")
        assert await process.request() == ["ASYNC_MODE_ON"]
        process.reply("GAHP:S")
        client = await starting
        assert client.async_mode
        call = asyncio.create_task(client.call("ECHO", "x"))
        assert await process.request() == ["ECHO", "1", "x"]
        process.reply("noise from a library")  # unprefixed: ignored
        process.reply("GAHP:S")
        process.reply("GAHP:R")
        assert await process.request() == ["RESULTS"]
        process.reply("GAHP:S", "1")
        process.reply("GAHP:1", "done")
        assert await call == ("done",)
        process.exit(0)

    run(main())


def test_results_ready_are_asked_for_before_a_backlog_of_requests() -> None:
    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        client = await (await scripted_start(process, clock, ["RESULTS", "ECHO"], 1000))
        calls = [asyncio.create_task(client.call("ECHO", str(n))) for n in range(300)]
        await settle()
        # The server is sent a window of requests, not all 300 at once...
        sent = []
        while process.to_server._buffer:  # type: ignore[attr-defined]
            sent.append(await process.request())
        assert 0 < len(sent) < 300 and sent[0] == ["ECHO", "1", "0"]
        # ... so that when it says a result is ready, RESULTS goes before the rest.
        for _ in sent:
            process.reply("S")
        process.reply("R")
        await settle()
        assert await process.request() == ["RESULTS"]
        process.reply("S", "1")
        process.reply("1", "first")
        assert await calls[0] == ("first",)
        # Every request still reaches the server, in order.
        rest = []
        while len(sent) + len(rest) < 300:
            rest.append(await process.request())
            process.reply("S")
        assert [line[2] for line in sent + rest] == [str(n) for n in range(300)]
        for call in calls[1:]:
            call.cancel()
        process.exit(0)

    run(main())


def test_long_request_lines_wait_here_beyond_a_pipeful() -> None:
    # 300 requests of ~8 KiB (a SUBMIT's ad): the window of lines (256) would put 2 MiB in
    # the pipe ahead of the next RESULTS. Only about a pipeful (64 KiB) goes out unanswered.
    big = "x" * 8000

    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        client = await (await scripted_start(process, clock, ["RESULTS", "ECHO"], 1000))
        calls = [asyncio.create_task(client.call("ECHO", big)) for _ in range(300)]
        await settle()
        sent = []
        while process.to_server._buffer:  # type: ignore[attr-defined]
            sent.append(await process.request())
        assert 1 < len(sent) <= client_module._WINDOW_BYTES // len(big)
        # Answered, they make room for as many more; RESULTS still goes first.
        for _ in sent:
            process.reply("S")
        process.reply("R")
        await settle()
        assert await process.request() == ["RESULTS"]
        for call in calls:
            call.cancel()
        process.exit(0)

    run(main())


async def finish(process: FakeProcess, *request_ids: int) -> None:
    """The server says results are ready; the client asks; these requests are done."""
    process.reply("R")
    assert (await process.request())[0] == "RESULTS"
    process.reply("S", str(len(request_ids)))
    for request_id in request_ids:
        process.reply(str(request_id), "done")


@pytest.mark.parametrize("limit", [1000, 280])
def test_new_work_waits_behind_the_requests_of_work_under_way(limit: int) -> None:
    # 300 submits (new work) are asked for, then 3 stage-ins (work under way). The window
    # of lines at the server (1000) or the in-flight limit (280) holds some submits back:
    # the stage-ins go before those.
    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        client = await (await scripted_start(process, clock, ["RESULTS", "ECHO"], limit))
        submits = [
            asyncio.create_task(client.call("ECHO", f"submit {n}", later=True)) for n in range(300)
        ]
        await settle()
        stages = [asyncio.create_task(client.call("ECHO", f"stage {n}")) for n in range(3)]
        await settle()
        # Submits written before the stage-ins: the window's worth, or all those issued.
        ahead = client_module._WINDOW if limit > 300 else limit
        expected = min(303, limit + 3)
        order = []
        while len(order) < expected:
            order.append((await process.request())[2])
            process.reply("S")
            if len(order) == limit:  # three submits finish: room for three requests
                await finish(process, 1, 2, 3)
        submitted = [f"submit {n}" for n in range(300)]
        stage_ins = ["stage 0", "stage 1", "stage 2"]
        assert order == [*submitted[:ahead], *stage_ins, *submitted[ahead:]][:expected]
        if limit < 300:  # the held-back submits follow as room comes
            await finish(process, 4, 5, 6)
            assert [(await process.request())[2] for _ in range(3)] == submitted[limit:][:3]
        for task in [*submits[3:], *stages]:
            task.cancel()
        process.exit(0)

    run(main())


def test_a_hung_server_is_killed_after_the_response_timeout() -> None:
    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        client = await (await scripted_start(process, clock, ["RESULTS", "ECHO"]))
        call = asyncio.create_task(client.call("ECHO", "x"))
        assert await process.request() == ["ECHO", "1", "x"]
        await clock.advance(19)
        assert not call.done()
        await clock.advance(2)
        with pytest.raises(GahpServerExited, match=r"gave no reply to ECHO in 20\.0 s"):
            await call
        assert client.state is ClientState.DEAD
        assert process.status == -9

    run(main())


def test_a_call_timeout_and_the_late_result() -> None:
    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        client = await (await scripted_start(process, clock, ["RESULTS", "ECHO"]))
        call = asyncio.create_task(client.call("ECHO", "slow", timeout=3))
        assert await process.request() == ["ECHO", "1", "slow"]
        process.reply("S")
        await clock.advance(3.1)
        with pytest.raises(GahpTimeout, match="ECHO 1"):
            await call
        assert client.in_flight == 0
        nxt = asyncio.create_task(client.call("ECHO", "next"))
        assert await process.request() == ["ECHO", "2", "next"]
        process.reply("S")
        await clock.advance(2)  # the 5 s poll timer
        assert await process.request() == ["RESULTS"]
        # The abandoned request's result comes late and is dropped.
        process.to_client.feed_data(b"S 2\r\n1 late\r\n2 ok\r\n")
        assert await nxt == ("ok",)
        third = asyncio.create_task(client.call("ECHO", "third"))
        assert await process.request() == ["ECHO", "3", "third"]
        third.cancel()
        process.exit(0)

    run(main())


def test_a_request_put_back_on_overload_is_sent_again_when_nothing_is_in_flight() -> None:
    # Both requests are refused for overload. The first was put back while the second was
    # still counted in flight; the second, refused with nothing else in flight, fails. The
    # first must go to the server again, not wait for a result nothing will bring.
    async def main() -> None:
        clock = ManualClock()
        process = FakeProcess()
        client = await (await scripted_start(process, clock, ["RESULTS", "ECHO"]))
        first = asyncio.create_task(client.call("ECHO", "a"))
        second = asyncio.create_task(client.call("ECHO", "b"))
        assert await process.request() == ["ECHO", "1", "a"]
        assert await process.request() == ["ECHO", "2", "b"]
        process.reply("F", "Threads limit reached")
        process.reply("F", "Threads limit reached")
        with pytest.raises(GahpRequestRefused, match="Threads limit reached"):
            await second
        assert await asyncio.wait_for(process.request(), 5) == ["ECHO", "1", "a"]
        process.reply("S")
        await finish(process, 1)
        assert await first == ("done",)
        assert client.in_flight == 0
        process.exit(0)

    run(main())


def test_an_abandoned_request_refused_for_overload_is_dropped_quietly() -> None:
    # The caller gave up before the refusal came: nothing awaits the request, the count of
    # requests in flight is not lowered twice, and the next request is sent.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        unretrieved: list[object] = []
        loop.set_exception_handler(lambda _, context: unretrieved.append(context))
        clock = ManualClock()
        process = FakeProcess()
        client = await (await scripted_start(process, clock, ["RESULTS", "ECHO"]))
        call = asyncio.create_task(client.call("ECHO", "gone"))
        assert await process.request() == ["ECHO", "1", "gone"]
        call.cancel()
        await settle()
        process.reply("F", "Threads limit reached")
        await settle()
        assert client.in_flight == 0
        nxt = asyncio.create_task(client.call("ECHO", "next"))
        _, request_id, text = await process.request()
        assert text == "next"
        process.reply("S")
        await settle()
        assert client.in_flight == 1
        await finish(process, int(request_id))
        assert await nxt == ("done",)
        gc.collect()
        await settle()
        assert unretrieved == []
        process.exit(0)

    run(main())


class Feed:
    """A writer that feeds a StreamReader."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def write(self, data: bytes) -> None:
        self.reader.feed_data(data)

    async def drain(self) -> None:
        return None


class InProcess(FakeProcess):
    """A real GahpServer running in this process, behind the GahpProcess interface."""

    def __init__(self, server: GahpServer) -> None:
        super().__init__()
        self.serving = asyncio.create_task(self._serve(server))

    async def _serve(self, server: GahpServer) -> None:
        await server.serve(self.to_server, Feed(self.to_client))
        self.exit(0)


def test_an_in_process_server_through_the_spawner() -> None:
    async def main() -> None:
        async def double(call: Call) -> Sequence[str]:
            await asyncio.sleep(0)
            return (call.args[0] * 2,)

        server = GahpServer(
            GahpVersion("1.0.0", datetime.date(2026, 1, 1), "in process"),
            [Command("DOUBLE", 1, double, workers=7)],
        )
        process = InProcess(server)
        client = await GahpClient.start(["x"], spawn=spawner(process), clock=ManualClock())
        assert client.async_mode
        results = await asyncio.gather(*(client.call("DOUBLE", str(n)) for n in range(200)))
        assert [r[0] for r in results] == [str(n) * 2 for n in range(200)]
        assert client.max_pending <= 7
        assert await client.close() == 0
        await process.serving

    run(main())
