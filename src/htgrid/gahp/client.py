"""An asyncio GAHP client: the grid manager's side of the pipe.

    client = await GahpClient.start(["htgrid", "gahp", "batch"])
    fields = await client.call("BLAH_JOB_SUBMIT", ad_text)   # result fields after the id
    await client.close()

It does what the grid manager's `GahpServer` does: reads the banner, runs the start-up
handshake (COMMANDS, CONDOR_VERSION and RESPONSE_PREFIX if listed, ASYNC_MODE_ON: COMMANDS
written without waiting for the banner, the others together once it is answered), numbers
requests from 1 (wrapping after 990,000,000 and skipping ids in use), keeps at most
`max_pending` requests at the server and queues the rest, polls RESULTS on `R` and on a
timer, and backs off on `F Threads limit reached`. Request lines are pipelined: return
lines come back in request order, so they are matched first in, first out.

The request ids, the in-flight limit and the matching of results to callers are the
`Dispatcher`'s (`_dispatch`); this module holds the process, the handshake and the lines.
When the server dies every request in flight fails with GahpServerExited; start a new
client to restart it. Time (`Clock`) and process spawning (`spawn`) are injectable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TypeVar

from htgrid import __version__
from htgrid.gahp._clock import Clock, SystemClock, wait_for
from htgrid.gahp._codec import (
    MAX_LINE_LENGTH,
    LineSplitter,
    Reply,
    ReplyCode,
    decode_fields,
    decode_reply,
    decode_result,
    encode_request,
    is_notification,
)
from htgrid.gahp._dispatch import Dispatcher
from htgrid.gahp._errors import (
    GahpError,
    GahpProtocolError,
    GahpRequestRefused,
    GahpServerExited,
    GahpTimeout,
    LocalGahpError,
)
from htgrid.gahp._ids import RequestIds
from htgrid.gahp._process import GahpProcess, Spawner, read_stderr, spawn_subprocess
from htgrid.gahp._session import (
    TRANSITIONS,
    Batch,
    ClientState,
    Lanes,
    Pending,
    Waiter,
    WaitKind,
)

__all__ = [
    "ClientState",
    "GahpClient",
    "GahpProcess",
    "RequestIds",
    "Spawner",
    "spawn_subprocess",
]

log = logging.getLogger("htgrid.gahp.client")

_T = TypeVar("_T")

#: The prefix the grid manager asks for when RESPONSE_PREFIX is listed.
RESPONSE_PREFIX = "GAHP:"
_BANNER_MAX = 150
_READ_SIZE = 256 * 1024
_STDERR_KEEP = 4
#: Request lines at the server unanswered at most (each is answered S, E or F as soon as
#: the server reads it); the rest wait in the client, behind an urgent RESULTS.
_WINDOW = 256
#: ...and at most this many bytes of them, about what a pipe holds: a line written past
#: it would wait in the pipe, where a RESULTS or a stage-in cannot pass it (256 SUBMIT
#: lines of 4 KiB ads held a stage-in back ~0.15 s).
_WINDOW_BYTES = 64 * 1024


class GahpClient:
    """One GAHP server process and the conversation with it."""

    def __init__(
        self,
        process: GahpProcess,
        *,
        clock: Clock | None = None,
        max_pending: int = 50,
        poll_interval: float = 5.0,
        async_poll_interval: float = 60.0,
        response_timeout: float = 20.0,
        max_line: int = MAX_LINE_LENGTH,
    ) -> None:
        self._process = process
        self._max_line = max_line
        self._clock: Clock = clock or SystemClock()
        self._poll_interval = poll_interval
        self._async_poll_interval = async_poll_interval
        self._response_timeout = response_timeout
        self._state = ClientState.STARTING
        self._waiters: deque[Waiter] = deque()
        self._out_bytes = 0  # of the lines in _waiters
        self._outgoing: Lanes[tuple[bytes, Waiter]] = Lanes()
        self._flush_due = False
        self._dispatch = Dispatcher(max_pending, self._send, lambda: self.alive, process.pid)
        self._prefix = ""
        self._batch: Batch | None = None
        self._polling = False
        self._poll_again = False
        self._banner: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiter_added = asyncio.Event()
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_KEEP)
        self._exit_status: int | None = None
        self._death: GahpServerExited | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.version = ""
        self.commands: frozenset[str] = frozenset()
        self.async_mode = False

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        spawn: Spawner = spawn_subprocess,
        clock: Clock | None = None,
        max_pending: int = 50,
        poll_interval: float = 5.0,
        async_poll_interval: float = 60.0,
        response_timeout: float = 20.0,
        max_line: int = MAX_LINE_LENGTH,
    ) -> GahpClient:
        """Spawn the server and do the start-up handshake.

        `poll_interval` is the RESULTS timer without async mode, `async_poll_interval` the
        safety-net timer with it; `response_timeout` is how long a return line may take
        before the server counts as hung (the grid manager's 20 s); `max_line` is the
        longest line read (HTCondor's grid manager reads 500 KiB).
        """
        process = await spawn(argv, env)
        client = cls(
            process,
            clock=clock,
            max_pending=max_pending,
            poll_interval=poll_interval,
            async_poll_interval=async_poll_interval,
            response_timeout=response_timeout,
            max_line=max_line,
        )
        try:
            await client._handshake()
        except BaseException:
            await client._kill("failed during start-up")
            raise
        return client

    # ---- public surface ------------------------------------------------------------------

    @property
    def state(self) -> ClientState:
        """Where the client is in its life."""
        return self._state

    @property
    def pid(self) -> int | None:
        """The server's process id."""
        return self._process.pid

    @property
    def alive(self) -> bool:
        """Whether requests can be sent."""
        return self._state in (ClientState.STARTING, ClientState.READY)

    @property
    def exit_status(self) -> int | None:
        """The server's exit status once it has exited."""
        return self._exit_status

    @property
    def stderr_tail(self) -> list[str]:
        """The last lines the server wrote on stderr (the grid manager keeps four)."""
        return list(self._stderr_tail)

    @property
    def in_flight(self) -> int:
        """Requests at the server whose results have not come back."""
        return self._dispatch.in_flight

    @property
    def max_pending(self) -> int:
        """The current in-flight limit (lowered when the server says it is overloaded)."""
        return self._dispatch.max_pending

    def supports(self, command: str) -> bool:
        """Whether COMMANDS listed `command` (case-insensitive)."""
        return command.upper() in self.commands

    async def command(self, name: str, *args: str) -> Reply:
        """A synchronous command (no request id); raises GahpRequestRefused unless S."""
        self._check_alive()
        waiter = self._write(encode_request(name, args), name)
        await self._drain()
        reply = await waiter.future
        if not reply.ok:
            raise GahpRequestRefused(name, reply.code.value, reply.reason)
        return reply

    async def call(
        self, name: str, *args: str, timeout: float | None = None, later: bool = False
    ) -> tuple[str, ...]:
        """An asynchronous command: the fields of its result line after the request id.

        A `later` request (new work, a submit) waits behind the others still queued here.
        """
        self._check_alive()
        if self.commands and not self.supports(name):
            raise LocalGahpError(f"the GAHP server does not support {name}")
        pending = self._dispatch.submit(name, args, later=later)
        await self._drain()
        try:
            return await self._wait(pending.result, timeout)
        except GahpTimeout:
            self._dispatch.abandon(pending)
            raise GahpTimeout(f"{name} {pending.request_id} got no result in {timeout} s") from None
        except asyncio.CancelledError:
            self._dispatch.abandon(pending)
            raise

    async def poll(self) -> None:
        """Ask for RESULTS now (normally `R` and the timer do it)."""
        self._check_alive()
        self._request_poll()
        await self._drain()

    async def close(self, timeout: float = 5.0) -> int | None:
        """QUIT, wait for the process to exit (killing it after `timeout`), return its status."""
        if self._state in (ClientState.STARTING, ClientState.READY):
            self._set_state(ClientState.CLOSING)
            with contextlib.suppress(GahpError, OSError, RuntimeError):
                waiter = self._write(encode_request("QUIT"), "QUIT")
                await self._drain()
                await self._wait(waiter.future, timeout)
            self._process.close_stdin()
            try:
                exited = asyncio.ensure_future(self._process.wait())
                self._exit_status = await self._wait(exited, timeout)
            except GahpTimeout:
                self._process.kill()
        await self._finish("was closed")
        return self._exit_status

    # ---- start-up -----------------------------------------------------------------------------

    async def _handshake(self) -> None:
        self._tasks.append(asyncio.create_task(self._read_loop()))
        self._tasks.append(asyncio.create_task(self._watchdog()))
        if self._process.stderr is not None:
            reader = read_stderr(self._process.stderr, self._stderr_tail, self.pid)
            self._tasks.append(asyncio.create_task(reader))
        # COMMANDS goes at once, ahead of the banner (the pipe keeps it until the server
        # reads): each round trip of the handshake waits for a turn of this loop, which is
        # busy with every job at the moment a first GAHP server is started.
        commands = self._write(encode_request("COMMANDS"), "COMMANDS")
        # When the banner's wait fails, nothing awaits this one: its error is the banner's.
        commands.future.add_done_callback(_mark_retrieved)
        await self._drain()
        try:
            self.version = await self._wait(self._banner, self._response_timeout)
        except GahpTimeout:
            raise GahpProtocolError(
                f"no $GahpVersion banner in {self._response_timeout} s"
            ) from None
        reply = await commands.future
        if not reply.ok:
            raise GahpRequestRefused("COMMANDS", reply.code.value, reply.reason)
        self.commands = frozenset(name.upper() for name in reply.args)
        # The rest of the handshake without a wait between its lines; the return lines
        # come back in order.
        sent: list[Waiter] = []
        if self.supports("CONDOR_VERSION"):
            version = f"$CondorVersion: {__version__} htgrid $"
            sent.append(self._write(encode_request("CONDOR_VERSION", [version]), "CONDOR_VERSION"))
        if self.supports("RESPONSE_PREFIX"):
            request = encode_request("RESPONSE_PREFIX", [RESPONSE_PREFIX])
            sent.append(self._write(request, "RESPONSE_PREFIX", WaitKind.PREFIX))
        if self.supports("ASYNC_MODE_ON"):
            sent.append(self._write(encode_request("ASYNC_MODE_ON"), "ASYNC_MODE_ON"))
        for waiter in sent:
            # The first refusal or death ends the handshake; the others' errors are the same.
            waiter.future.add_done_callback(_mark_retrieved)
        await self._drain()
        for waiter in sent:
            reply = await waiter.future
            if waiter.command == "ASYNC_MODE_ON":
                self.async_mode = reply.ok
            elif waiter.command == "CONDOR_VERSION" and not reply.ok:
                raise GahpRequestRefused(waiter.command, reply.code.value, reply.reason)
        # In async mode the grid manager still polls, rarely, in case an R is lost.
        interval = self._async_poll_interval if self.async_mode else self._poll_interval
        self._tasks.append(asyncio.create_task(self._poll_timer(interval)))
        self._set_state(ClientState.READY)

    # ---- writing ------------------------------------------------------------------------------

    def _write(
        self,
        data: bytes,
        command: str,
        kind: WaitKind = WaitKind.PLAIN,
        *,
        urgent: bool = False,
        later: bool = False,
    ) -> Waiter:
        """Queue a request line and the wait for its return line, with no await between.

        At most `_WINDOW` lines (`_WINDOW_BYTES` bytes) are at the server unanswered; the
        others wait here, where an `urgent` line (RESULTS) goes before them: results the
        server has ready must not wait behind a thousand requests written ahead of the poll.
        A `later` line goes after the others.
        """
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        waiter = Waiter(command, future, 0.0, kind, len(data))
        if urgent:
            self._outgoing.appendleft((data, waiter))
        else:
            self._outgoing.append((data, waiter), later=later)
        if len(self._waiters) < _WINDOW and self._out_bytes < _WINDOW_BYTES:
            # Out at once: a write per line costs microseconds, while waiting for the loop
            # to come round could hold the first line back behind a thousand callers
            # each building its request (0.4 s for 1,000 HTCondor-C submits).
            self._flush()
        return waiter

    def _flush(self) -> None:
        self._flush_due = False
        room = _WINDOW - len(self._waiters)
        if room <= 0 or not self._outgoing:
            return
        if not (self.alive or self._state is ClientState.CLOSING):
            self._outgoing.clear()
            return
        chunks = []
        deadline = self._clock.monotonic() + self._response_timeout
        while self._outgoing and room > 0:
            data, waiter = self._outgoing.peek()
            if self._waiters and self._out_bytes + len(data) > _WINDOW_BYTES:
                break  # a line longer than the window still goes, alone
            self._outgoing.popleft()
            waiter.deadline = deadline  # the server's time to answer starts now
            self._waiters.append(waiter)
            self._out_bytes += len(data)
            chunks.append(data)
            room -= 1
        self._waiter_added.set()
        try:
            self._process.stdin.write(b"".join(chunks))
        except (OSError, RuntimeError) as err:
            self._schedule_death(f"stopped reading requests ({err})")

    def _send(self, pending: Pending) -> Waiter:
        return self._write(pending.line, pending.command, later=pending.later)

    async def _drain(self) -> None:
        try:
            await self._process.stdin.drain()
        except (OSError, RuntimeError) as err:
            self._schedule_death(f"stopped reading requests ({err})")
            raise self._dead_error() from err

    # ---- polling ------------------------------------------------------------------------------

    def _request_poll(self) -> None:
        if not self.alive:
            return
        if self._polling:
            self._poll_again = True
            return
        self._polling = True
        self._poll_again = False
        try:
            waiter = self._write(
                encode_request("RESULTS"), "RESULTS", WaitKind.RESULTS, urgent=True
            )
        except GahpError:
            return
        waiter.future.add_done_callback(self._polled)

    def _polled(self, future: asyncio.Future[Reply]) -> None:
        self._polling = False
        if self._poll_again and not future.cancelled() and future.exception() is None:
            self._request_poll()

    async def _poll_timer(self, interval: float) -> None:
        while self.alive:
            await self._clock.sleep(interval)
            self._request_poll()

    # ---- reading ------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        splitter = LineSplitter(self._max_line)
        reason = "closed its stdout"
        try:
            while True:
                data = await self._process.stdout.read(_READ_SIZE)
                if not data:
                    break
                splitter.feed(data)
                while (line := splitter.next_line()) is not None:
                    self._on_line(line)
        except GahpProtocolError as err:
            reason = f"broke the protocol: {err}"
        except (OSError, RuntimeError) as err:
            reason = f"could not be read ({err})"
        await self._finish(reason)

    def _on_line(self, line: bytes) -> None:
        if not self._banner.done():
            # Like the grid manager: skip to the first '$' and drop backslashes.
            text = line.decode("utf-8", "surrogateescape")
            if "$" in text:
                version = text[text.index("$") :].replace("\\", "").replace("\r", "")
                self._banner.set_result(version[:_BANNER_MAX])
            return
        fields = decode_fields(line)
        if self._prefix:
            if not fields[0].startswith(self._prefix):
                log.debug("GAHP[%s] unprefixed line dropped: %r", self.pid, line)
                return
            fields[0] = fields[0][len(self._prefix) :]
        if is_notification(fields):
            self._request_poll()
            return
        if self._batch is not None:
            self._on_result_line(self._batch, fields)
            return
        if not self._waiters:
            raise GahpProtocolError(f"unexpected line from the GAHP server: {line!r}")
        waiter = self._waiters.popleft()
        self._out_bytes -= waiter.size
        if self._outgoing and not self._flush_due:  # room at the server for more lines
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)
        reply = decode_reply(fields)
        if waiter.kind is WaitKind.RESULTS and reply.ok:
            count = reply.args[0] if reply.args else ""
            if not count.isdigit():
                raise GahpProtocolError(f"bad RESULTS count {count!r}")
            if int(count) > 0:
                self._batch = Batch(waiter, int(count))
                return
        elif waiter.kind is WaitKind.PREFIX and reply.ok:
            self._prefix = RESPONSE_PREFIX
        waiter.future.set_result(reply)

    def _on_result_line(self, batch: Batch, fields: list[str]) -> None:
        try:
            batch.results.append(decode_result(fields))
        except GahpProtocolError as err:
            log.warning("GAHP[%s] bad RESULTS line: %s", self.pid, err)
        batch.left -= 1
        if batch.left:
            return
        self._batch = None
        for result in batch.results:
            self._dispatch.result(result)
        batch.waiter.future.set_result(Reply(ReplyCode.SUCCESS, (str(len(batch.results)),)))
        self._dispatch.pump()

    async def _watchdog(self) -> None:
        """Declare the server hung when a return line is `response_timeout` late."""
        while self.alive or self._state is ClientState.CLOSING:
            if not self._waiters:
                self._waiter_added.clear()
                await self._waiter_added.wait()
                continue
            waiter = self._waiters[0]
            delay = waiter.deadline - self._clock.monotonic()
            if not self._banner.done():
                # COMMANDS is written ahead of the banner: a server that never prints
                # one is the banner's wait to report, however late COMMANDS is.
                delay = max(delay, self._response_timeout)
            if delay > 0:
                await self._clock.sleep(delay)
                continue
            await self._kill(f"gave no reply to {waiter.command} in {self._response_timeout} s")
            return

    # ---- the end ------------------------------------------------------------------------------

    def _check_alive(self) -> None:
        if not self.alive:
            raise self._dead_error()

    def _dead_error(self) -> GahpServerExited:
        if self._death is not None:
            return self._death
        return GahpServerExited(f"GAHP server (pid {self.pid}) is {self._state.value}")

    def _schedule_death(self, reason: str) -> None:
        self._tasks.append(asyncio.create_task(self._kill(reason)))

    async def _kill(self, reason: str) -> None:
        self._process.kill()
        await self._finish(reason)

    async def _finish(self, reason: str) -> None:
        """Record how the server ended and fail everything still waiting on it."""
        if self._state in (ClientState.CLOSED, ClientState.DEAD):
            return
        clean = self._state is ClientState.CLOSING
        self._set_state(ClientState.CLOSED if clean else ClientState.DEAD)
        if self._exit_status is None:
            with contextlib.suppress(GahpTimeout):
                exited = asyncio.ensure_future(self._process.wait())
                self._exit_status = await self._wait(exited, 2.0)
        status = "" if self._exit_status is None else f", exit status {self._exit_status}"
        tail = " | ".join(self._stderr_tail)
        stderr = f"; stderr: {tail}" if tail else ""
        self._death = GahpServerExited(f"GAHP server (pid {self.pid}) {reason}{status}{stderr}")
        if not clean:
            log.warning("%s", self._death)
        unwritten = [waiter for _, waiter in self._outgoing]
        self._outgoing.clear()
        for waiter in [*self._waiters, *unwritten]:
            if not waiter.future.done():
                waiter.future.set_exception(self._death)
        self._waiters.clear()
        self._out_bytes = 0
        if self._batch is not None and not self._batch.waiter.future.done():
            self._batch.waiter.future.set_exception(self._death)
        self._dispatch.fail(self._death)
        if not self._banner.done():
            self._banner.set_exception(self._death)
        self._waiter_added.set()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

    async def _wait(self, future: asyncio.Future[_T], timeout: float | None) -> _T:
        """`future`'s result, or GahpTimeout after `timeout` seconds of the injected clock."""
        return await wait_for(future, timeout, self._clock)

    def _set_state(self, new: ClientState) -> None:
        if new not in TRANSITIONS[self._state]:
            raise LocalGahpError(f"GAHP client cannot go from {self._state.name} to {new.name}")
        self._state = new


def _mark_retrieved(future: asyncio.Future[Reply]) -> None:
    """Take a failed future's error so asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()
