"""An asyncio GAHP server: the protocol's common commands, with a GAHP type's commands plugged in.

A GAHP type (the batch GAHP, a cloud GAHP...) supplies `Command`s: a name, how many arguments
follow the request id, an async handler returning the result line's fields, a worker
limit, and optionally a parser of the arguments (it raises BadArguments for a request to
answer E; what it returns reaches the handler as `Call.parsed`, so nothing is parsed twice).
The runtime answers every request line at once (S, E or F), starts the handler
(a handler that has to wait goes on in a task; see _eager.py), queues result lines for
`RESULTS` and, in async mode, prints `R` when a batch starts. The common commands (COMMANDS,
VERSION, QUIT, RESULTS, ASYNC_MODE_ON/OFF, RESPONSE_PREFIX and the credential commands) are
built in; what the credential commands said reaches handlers as `Call.credentials`.

    server = GahpServer(version, [Command("PING", 0, ping)])
    asyncio.run(server.serve_stdio())

Output lines are written whole and in order: everything goes through one writer from the
event loop's single thread, and RESULTS is written as one block.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from htgrid.gahp._codec import (
    MAX_LINE_LENGTH,
    GahpVersion,
    LineSplitter,
    ReplyCode,
    decode_fields,
    encode_line,
    encode_notification,
    encode_reply,
    encode_result,
    encode_results,
    parse_request_id,
    unnull,
)
from htgrid.gahp._eager import finish_in_task
from htgrid.gahp._errors import BadArguments, GahpError, GahpProtocolError
from htgrid.gahp._streams import ByteReader, ByteWriter, stdin_reader, stdout_writer

__all__ = [
    "Call",
    "Command",
    "Credentials",
    "GahpServer",
    "ServerState",
]

log = logging.getLogger("htgrid.gahp.server")

THREADS_LIMIT_REACHED = "Threads limit reached"


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the credential commands said, as it stood when a request arrived."""

    #: INITIALIZE_FROM_FILE / REFRESH_PROXY_FROM_FILE: the master proxy.
    proxy_file: str | None = None
    #: CACHE_PROXY_FROM_FILE: proxies by the client's small integer id.
    cached_proxies: Mapping[str, str] = field(default_factory=dict)
    #: USE_CACHED_PROXY: the cached proxy in force, if any.
    active_proxy_id: str | None = None
    #: UPDATE_TOKEN: the token file.
    token_file: str | None = None

    @property
    def proxy(self) -> str | None:
        """The proxy requests should use: the cached one in force, else the master proxy."""
        if self.active_proxy_id is not None:
            return self.cached_proxies.get(self.active_proxy_id, self.proxy_file)
        return self.proxy_file


class Call(NamedTuple):
    """One request handed to a handler.

    Immutable like the frozen dataclasses elsewhere, but a NamedTuple: one is made per
    request on the server's hottest path, and it builds in half the time.
    """

    command: str
    request_id: int
    args: tuple[str, ...]
    credentials: Credentials
    #: What the command's `parse` made of `args` (None without one).
    parsed: Any = None


Handler = Callable[[Call], Coroutine[Any, Any, Sequence[str]]]


@dataclass(frozen=True, slots=True)
class Command:
    """An asynchronous command of a GAHP type.

    `params` counts the arguments after the request id (at least that many when
    `variadic`). `workers` bounds how many run at once; one more is refused with
    `F Threads limit reached`, as the blahp does. `on_error` builds the result fields
    reported when the handler raises (without it the request gets no result). `parse`
    reads the arguments before the handler starts: BadArguments from it is answered
    `E <its message>`; its value is the handler's `Call.parsed`.
    """

    name: str
    params: int
    handler: Handler
    workers: int = 50
    variadic: bool = False
    on_error: Callable[[str], Sequence[str]] | None = None
    parse: Callable[[tuple[str, ...]], Any] | None = None


class ServerState(enum.Enum):
    """The server's life: serving requests, then quitting (QUIT, EOF or SIGTERM), then closed."""

    NEW = "new"
    SERVING = "serving"
    QUITTING = "quitting"
    CLOSED = "closed"


_TRANSITIONS: dict[ServerState, frozenset[ServerState]] = {
    ServerState.NEW: frozenset({ServerState.SERVING}),
    ServerState.SERVING: frozenset({ServerState.QUITTING}),
    ServerState.QUITTING: frozenset({ServerState.CLOSED}),
    ServerState.CLOSED: frozenset(),
}

_READ_SIZE = 256 * 1024
# The longest the reading task dispatches requests before letting the loop run: a burst of
# requests must not hold back the handlers (and their network traffic) of the first ones.
_SLICE = 0.005

_Builtin = Callable[["GahpServer", tuple[str, ...]], bytes]


class GahpServer:
    """Serves one client on a pair of byte streams (normally stdin and stdout)."""

    def __init__(
        self,
        version: GahpVersion,
        commands: Iterable[Command],
        *,
        max_line: int = MAX_LINE_LENGTH,
    ) -> None:
        self.version = version
        self._commands: dict[str, Command] = {}
        for command in commands:
            name = command.name.upper()
            if name in _BUILTINS or name in self._commands:
                raise ValueError(f"GAHP command {name} is defined twice")
            if command.workers < 1:
                raise ValueError(f"GAHP command {name} needs at least one worker")
            self._commands[name] = command
        self._busy = dict.fromkeys(self._commands, 0)
        self._max_line = max_line
        self._state = ServerState.NEW
        self._results: list[bytes] = []
        self._async_mode = False
        self._notify_armed = False
        self._prefix = ""
        self._credentials = Credentials()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writer: ByteWriter | None = None
        self._in_batch = False
        self._notify_due = False
        # QUIT or SIGTERM: stop reading request lines.
        self._quit_requested = False
        self._reading: asyncio.Task[None] | None = None

    # ---- public surface ------------------------------------------------------------------

    @property
    def state(self) -> ServerState:
        """Where the server is in its life."""
        return self._state

    @property
    def credentials(self) -> Credentials:
        """The credentials in force now."""
        return self._credentials

    def command_names(self) -> list[str]:
        """What COMMANDS lists: the common commands and the GAHP type's, sorted."""
        return sorted([*_BUILTINS, *self._commands])

    def request_quit(self) -> None:
        """Stop as QUIT would (used for SIGTERM)."""
        self._quit_requested = True
        if self._state is ServerState.SERVING:
            self._set_state(ServerState.QUITTING)
        if self._reading is not None:
            self._reading.cancel()

    async def serve(self, reader: ByteReader, writer: ByteWriter) -> None:
        """Print the banner, answer requests until QUIT or EOF, then cancel unfinished work."""
        self._set_state(ServerState.SERVING)
        self._writer = writer
        try:
            writer.write(encode_line(self.version.fields()))
            self._reading = asyncio.create_task(self._read_loop(reader, writer))
            try:
                await self._reading
            except asyncio.CancelledError:
                # request_quit() cancels the reader; a cancellation of serve() itself goes on.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        finally:
            if self._state is ServerState.SERVING:
                self._set_state(ServerState.QUITTING)
            await self._cancel_tasks()
            with contextlib.suppress(OSError, RuntimeError):
                await writer.drain()
            self._set_state(ServerState.CLOSED)

    async def serve_stdio(self) -> None:
        """Serve on this process's stdin and stdout; SIGTERM quits."""
        loop = asyncio.get_running_loop()
        reader = await stdin_reader(loop)
        writer = await stdout_writer(loop)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, self.request_quit)
        try:
            await self.serve(reader, writer)
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGTERM)
            # asyncio made the descriptors non-blocking; a shell sharing the terminal
            # would otherwise inherit that.
            for fd in (0, 1):
                with contextlib.suppress(OSError):
                    os.set_blocking(fd, True)

    # ---- reading and dispatching --------------------------------------------------------------

    async def _read_loop(self, reader: ByteReader, writer: ByteWriter) -> None:
        splitter = LineSplitter(self._max_line)
        clock = asyncio.get_running_loop().time
        while self._state is ServerState.SERVING:
            try:
                data = await reader.read(_READ_SIZE)
            except OSError as err:
                log.warning("reading requests failed: %s", err)
                data = b""
            if not data:
                # EOF on stdin is QUIT: the grid manager closes the pipe when it goes away.
                return
            splitter.feed(data)
            replies: list[bytes] = []
            # Handlers that finish at once queue results meanwhile: their R goes after
            # the return lines (the protocol allows either order; this one reads better).
            self._in_batch = True
            due = clock() + _SLICE
            try:
                while self._state is ServerState.SERVING:
                    try:
                        lines = splitter.lines()
                    except GahpProtocolError as err:
                        replies.append(self._reply(ReplyCode.ERROR, str(err)))
                        continue
                    if not lines:
                        break
                    for line in lines:
                        replies.append(self._dispatch(line))
                        if self._quit_requested:
                            break
                        if clock() > due:
                            # A long burst: answer what was read so far and let the
                            # handlers started run before reading on.
                            self._in_batch = False
                            if not await self._send_replies(replies, writer):
                                return
                            replies = []
                            await asyncio.sleep(0)
                            self._in_batch = True
                            due = clock() + _SLICE
            finally:
                self._in_batch = False
            if not await self._send_replies(replies, writer):
                return

    async def _send_replies(self, replies: list[bytes], writer: ByteWriter) -> bool:
        """Write the return lines (and an R due meanwhile); False when the client is gone."""
        if self._notify_due:
            self._notify_due = False
            replies.append(encode_notification(self._prefix))
        try:
            writer.write(b"".join(replies))
            await writer.drain()
        except (OSError, RuntimeError) as err:
            log.warning("writing replies failed: %s", err)
            return False
        return True

    def _dispatch(self, line: bytes) -> bytes:
        """The return line for one request line; starts the handler of an async command."""
        fields = decode_fields(line)
        name = fields[0].upper()
        command = self._commands.get(name)
        if command is None:
            return self._dispatch_builtin(name, fields[1:])
        found = len(fields) - 1
        wanted = command.params + 1
        if found != wanted and (found < wanted or not command.variadic):
            return self._wrong_count(wanted, found)
        text = fields[1]
        if text.isdigit() and text.isascii() and text[0] != "0" and len(text) < 9:
            request_id = int(text)  # the common case, spelled out: this is the hot path
        else:
            try:
                request_id = parse_request_id(text)
            except GahpProtocolError:
                return self._reply(ReplyCode.ERROR, f"Bad request id {text}")
        args = tuple(fields[2:])
        parsed = None
        if command.parse is not None:
            try:
                parsed = command.parse(args)
            except BadArguments as err:
                return self._reply(ReplyCode.ERROR, str(err))
        busy = self._busy
        if busy[name] >= command.workers:
            return self._reply(ReplyCode.FAILURE, THREADS_LIMIT_REACHED)
        busy[name] += 1
        call = Call(name, request_id, args, self._credentials, parsed)
        # The handler's first step runs here (run_eagerly, inlined: this is the hot path);
        # only a handler that has to wait costs a task.
        coro = command.handler(call)
        try:
            awaited = coro.send(None)
        except StopIteration as stop:
            self._finished(command, call, stop.value)
        except Exception as err:
            self._failed(command, call, err)
        else:
            task = finish_in_task(
                coro,
                awaited,
                lambda fields: self._finished(command, call, fields),
                lambda error: self._failed(command, call, error),
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return _S_LINE if not self._prefix else self._reply(ReplyCode.SUCCESS)

    def _dispatch_builtin(self, name: str, args: list[str]) -> bytes:
        builtin = _BUILTINS.get(name)
        if builtin is None:
            return self._reply(ReplyCode.ERROR, "Unknown command")
        params, method = builtin
        if len(args) != params:
            return self._wrong_count(params, len(args))
        return method(self, tuple(args))

    def _finished(self, command: Command, call: Call, fields: Sequence[str]) -> None:
        self._busy[call.command] -= 1
        try:
            body = encode_result(call.request_id, fields, self._max_line)
        except GahpError as err:  # e.g. a result line over the grid manager's limit
            log.error("%s %d: %s", call.command, call.request_id, err)
            self._report(command, call, str(err))
            return
        self._results.append(body)
        if self._notify_armed:
            self._notify()

    def _failed(self, command: Command, call: Call, error: BaseException) -> None:
        self._busy[call.command] -= 1
        if isinstance(error, asyncio.CancelledError):
            return
        # A handler that raises is a bug in the GAHP type; say so on stderr (the grid
        # manager logs it) and still answer when the command knows how to.
        log.error("%s %d failed", call.command, call.request_id, exc_info=error)
        reason = str(error) if isinstance(error, GahpError) else f"{type(error).__name__}: {error}"
        self._report(command, call, reason)

    def _report(self, command: Command, call: Call, reason: str) -> None:
        if command.on_error is None:
            return
        try:
            body = encode_result(call.request_id, command.on_error(reason[:4096]), self._max_line)
        except Exception:
            log.exception("%s %d: no result line can be made", call.command, call.request_id)
            return
        self._push_result(body)

    def _push_result(self, body: bytes) -> None:
        self._results.append(body)
        if self._notify_armed:
            self._notify()

    def _notify(self) -> None:
        """Say R: the first result queued since the last RESULTS, in async mode."""
        if self._async_mode:
            self._notify_armed = False
            if self._in_batch:
                self._notify_due = True
            else:
                self._write(encode_notification(self._prefix))

    async def _cancel_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- output -----------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self._writer is None or self._state is ServerState.CLOSED:
            return
        try:
            self._writer.write(data)
        except (OSError, RuntimeError) as err:
            log.warning("writing a notification failed: %s", err)

    def _reply(self, code: ReplyCode, *args: str) -> bytes:
        return encode_reply(code, *args, prefix=self._prefix)

    def _wrong_count(self, wanted: int, found: int) -> bytes:
        return self._reply(ReplyCode.ERROR, f"expected {wanted} parameters, {found} found")

    def _set_state(self, new: ServerState) -> None:
        if new not in _TRANSITIONS[self._state]:
            raise RuntimeError(f"GAHP server cannot go from {self._state.name} to {new.name}")
        self._state = new

    # ---- the common commands ----------------------------------------------------------------

    def _cmd_commands(self, args: tuple[str, ...]) -> bytes:
        return self._reply(ReplyCode.SUCCESS, *self.command_names())

    def _cmd_version(self, args: tuple[str, ...]) -> bytes:
        return self._reply(ReplyCode.SUCCESS, *self.version.fields())

    def _cmd_quit(self, args: tuple[str, ...]) -> bytes:
        reply = self._reply(ReplyCode.SUCCESS)
        self._quit_requested = True
        self._set_state(ServerState.QUITTING)
        return reply

    def _cmd_results(self, args: tuple[str, ...]) -> bytes:
        bodies, self._results = self._results, []
        # Re-arm: the next result queued after this RESULTS starts a new batch.
        self._notify_armed = self._async_mode
        return encode_results(bodies, self._prefix)

    def _cmd_async_on(self, args: tuple[str, ...]) -> bytes:
        self._async_mode = True
        reply = self._reply(ReplyCode.SUCCESS)
        if self._results:
            # Results already waiting would otherwise wait for the client's next poll.
            self._notify_armed = False
            return reply + encode_notification(self._prefix)
        self._notify_armed = True
        return reply

    def _cmd_async_off(self, args: tuple[str, ...]) -> bytes:
        self._async_mode = False
        self._notify_armed = False
        return self._reply(ReplyCode.SUCCESS)

    def _cmd_response_prefix(self, args: tuple[str, ...]) -> bytes:
        reply = self._reply(ReplyCode.SUCCESS)
        # The reply to RESPONSE_PREFIX itself still carries the old prefix.
        self._prefix = args[0]
        return reply

    def _cmd_proxy_file(self, args: tuple[str, ...]) -> bytes:
        self._credentials = replace(self._credentials, proxy_file=unnull(args[0]))
        return self._reply(ReplyCode.SUCCESS)

    def _cmd_cache_proxy(self, args: tuple[str, ...]) -> bytes:
        cached = dict(self._credentials.cached_proxies)
        cached[args[0]] = args[1]
        self._credentials = replace(self._credentials, cached_proxies=cached)
        return self._reply(ReplyCode.SUCCESS)

    def _cmd_use_cached_proxy(self, args: tuple[str, ...]) -> bytes:
        if args[0] not in self._credentials.cached_proxies:
            return self._reply(ReplyCode.FAILURE, "Cannot find required proxyId")
        self._credentials = replace(self._credentials, active_proxy_id=args[0])
        return self._reply(ReplyCode.SUCCESS)

    def _cmd_uncache_proxy(self, args: tuple[str, ...]) -> bytes:
        cached = dict(self._credentials.cached_proxies)
        if cached.pop(args[0], None) is None:
            return self._reply(ReplyCode.FAILURE, "proxyId not found")
        active = self._credentials.active_proxy_id
        self._credentials = replace(
            self._credentials,
            cached_proxies=cached,
            active_proxy_id=None if active == args[0] else active,
        )
        return self._reply(ReplyCode.SUCCESS)

    def _cmd_update_token(self, args: tuple[str, ...]) -> bytes:
        self._credentials = replace(self._credentials, token_file=unnull(args[0]))
        return self._reply(ReplyCode.SUCCESS)


# name -> (number of arguments, method); none of these takes a request id.
_BUILTINS: dict[str, tuple[int, _Builtin]] = {
    "ASYNC_MODE_OFF": (0, GahpServer._cmd_async_off),
    "ASYNC_MODE_ON": (0, GahpServer._cmd_async_on),
    "CACHE_PROXY_FROM_FILE": (2, GahpServer._cmd_cache_proxy),
    "COMMANDS": (0, GahpServer._cmd_commands),
    "INITIALIZE_FROM_FILE": (1, GahpServer._cmd_proxy_file),
    "QUIT": (0, GahpServer._cmd_quit),
    "REFRESH_PROXY_FROM_FILE": (1, GahpServer._cmd_proxy_file),
    "RESPONSE_PREFIX": (1, GahpServer._cmd_response_prefix),
    "RESULTS": (0, GahpServer._cmd_results),
    "UNCACHE_PROXY": (1, GahpServer._cmd_uncache_proxy),
    "UPDATE_TOKEN": (1, GahpServer._cmd_update_token),
    "USE_CACHED_PROXY": (1, GahpServer._cmd_use_cached_proxy),
    "VERSION": (0, GahpServer._cmd_version),
}


_S_LINE = encode_reply(ReplyCode.SUCCESS)
