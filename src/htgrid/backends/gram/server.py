"""The gt GAHP server: HTCondor's GRAM GAHP commands over the Grid Community Toolkit's
GRAM client library (ctypes, `_globus`), and a GASS server (`globus-gass-server`) that
the job managers read input from and write output to.

The library's calls block: they run one at a time on one worker thread (the library keeps
one credential per process and is not shared between threads here). The credential is
the proxy of INITIALIZE_FROM_FILE or `--proxy`; a change of the file (a renewal) is read
again before the next call, so a GRAM_JOB_REFRESH_PROXY after it delegates the new one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import hashlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from htgrid import __version__
from htgrid.backends.gram._globus import GlobusUnavailable, GramClient
from htgrid.gahp import Call, GahpServer, GahpVersion
from htgrid.gahp.commands import Spec, gram

__all__ = ["VERSION", "GramGahp", "GramOptions"]

VERSION = GahpVersion(__version__, datetime.date(2026, 11, 28), "htgrid GRAM GAHP")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GramOptions:
    """How a GRAM GAHP server runs."""

    #: The X.509 proxy to present (INITIALIZE_FROM_FILE overrides it).
    proxy: str | None = None
    #: Where the grid CAs are (OpenSSL hashed directory).
    ca_dir: str = "/etc/grid-security/certificates"
    #: The GASS server program (GASS_SERVER_INIT).
    gass_server: str = "globus-gass-server"
    #: Where the GASS server's pid and URL are kept for the next GAHP server (None: not
    #: kept; a restarted GAHP server then starts a new one and earlier jobs' output is lost).
    state_dir: str | None = None


class GramGahp:
    """The GRAM GAHP's commands."""

    def __init__(self, options: GramOptions | None = None) -> None:
        self.options = options or GramOptions()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gram")
        self._client: GramClient | None = None
        self._stamp: tuple[str, int, int, int] | None = None
        self._gass_pid: int | None = None
        self._gass_lock = asyncio.Lock()

    def server(self) -> GahpServer:
        def command(spec: Spec, work: Callable[[Call], Awaitable[Sequence[str]]]) -> Any:
            async def handler(call: Call) -> Sequence[str]:
                return await work(call)

            def on_error(reason: str) -> Sequence[str]:
                return (str(gram.LOCAL_FAILURE), "NULL")

            return spec.command(handler, 100, on_error=on_error)

        return GahpServer(
            VERSION,
            [
                command(gram.PING, self._ping),
                command(gram.JOB_REQUEST, self._job_request),
                command(gram.JOB_STATUS, self._job_status),
                command(gram.JOB_SIGNAL, self._job_signal),
                command(gram.JOB_CANCEL, self._job_cancel),
                command(gram.JOB_REFRESH_PROXY, self._job_refresh),
                command(gram.GET_JOBMANAGER_VERSION, self._version),
                command(gram.GASS_SERVER_INIT, self._gass_init),
            ],
        )

    async def serve_stdio(self) -> None:
        try:
            await self.server().serve_stdio()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- the library, on its thread -----------------------------------------------------

    async def _run(self, call: Call, work: Callable[[GramClient], T]) -> T:
        proxy = call.credentials.proxy or self.options.proxy
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._with_client, proxy, work)

    def _with_client(self, proxy: str | None, work: Callable[[GramClient], T]) -> T:
        stamp = None
        if proxy is not None:
            try:
                st = os.stat(proxy)
            except OSError as err:
                raise GlobusUnavailable(f"cannot read the proxy {proxy}: {err.strerror}") from None
            stamp = (proxy, st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp != self._stamp:
                self._use_proxy(proxy)
        if self._client is None:
            self._client = GramClient()
        elif stamp is not None and stamp != self._stamp:
            error = self._client.refresh_credential()
            if error is not None:
                raise GlobusUnavailable(error)
        self._stamp = stamp
        return work(self._client)

    def _use_proxy(self, proxy: str) -> None:
        # GSI reads these at each credential acquisition; as root it would otherwise
        # present the host's certificate.
        for name in ("X509_USER_PROXY", "X509_USER_CERT", "X509_USER_KEY"):
            os.environ[name] = proxy
        os.environ.setdefault("X509_CERT_DIR", self.options.ca_dir)

    # ---- the commands -------------------------------------------------------------------

    async def _ping(self, call: Call) -> Sequence[str]:
        return gram.Code(await self._run(call, lambda g: g.ping(call.args[0]))).fields()

    async def _job_request(self, call: Call) -> Sequence[str]:
        contact, callback, _limited, rsl = call.args
        code, job = await self._run(
            call, lambda g: g.job_request(contact, rsl, None if callback == "NULL" else callback)
        )
        return gram.JobRequest(code, job).fields()

    async def _job_status(self, call: Call) -> Sequence[str]:
        status = await self._run(call, lambda g: g.job_status(call.args[0]))
        return gram.JobState(status.code, status.failure, status.state, status.exit_code).fields()

    async def _job_signal(self, call: Call) -> Sequence[str]:
        contact, signal, arg = call.args
        if not signal.isdigit():
            return gram.JobState(gram.LOCAL_FAILURE).fields()
        status = await self._run(
            call, lambda g: g.job_signal(contact, int(signal), None if arg == "NULL" else arg)
        )
        return gram.JobState(status.code, status.failure, status.state).fields()

    async def _job_cancel(self, call: Call) -> Sequence[str]:
        return gram.Code(await self._run(call, lambda g: g.job_cancel(call.args[0]))).fields()

    async def _job_refresh(self, call: Call) -> Sequence[str]:
        return gram.Code(await self._run(call, lambda g: g.job_refresh(call.args[0]))).fields()

    async def _version(self, call: Call) -> Sequence[str]:
        code, found = await self._run(call, lambda g: g.jobmanager_version(call.args[0]))
        return gram.Version(code, found).fields()

    async def _gass_init(self, call: Call) -> Sequence[str]:
        """The GASS server's URL: read and write access to this user's files,
        authenticated with the same proxy as the GRAM calls.

        It outlives this GAHP server (its own session): the jobs' output goes to its URL,
        which a GAHP server restarted after a crash finds again in the state directory and
        uses, or starts a new one on the same port. A renewed proxy restarts it (on its
        port: the URLs stay good). It stays up when the GAHP server quits: jobs still
        running stage their output to it while no grid manager runs."""
        async with self._gass_lock:
            proxy = call.credentials.proxy or self.options.proxy
            stamp = _stamp(proxy)
            state = self._gass_state(proxy)
            known = _read_gass(state) if state is not None else None
            if known is not None and _is_gass(known.pid) and known.stamp == stamp:
                self._gass_pid = known.pid
                return ("0", known.url)
            if known is not None and _is_gass(known.pid):
                _kill(known.pid)  # its proxy is older than the file's
            port = call.args[0] if call.args[0].isdigit() and call.args[0] != "0" else None
            if port is None and known is not None:
                port = known.url.rpartition(":")[2].strip("/")
            started = await self._start_gass(proxy, port)
            if started is None and port is not None:
                started = await self._start_gass(proxy, None)  # the old port is taken
            if started is None:
                return (str(gram.LOCAL_FAILURE), "NULL")
            pid, url = started
            self._gass_pid = pid
            if state is not None:
                _write_gass(state, _Gass(pid, url, stamp))
            return ("0", url)

    def _gass_state(self, proxy: str | None) -> Path | None:
        if self.options.state_dir is None:
            return None
        digest = hashlib.sha256((proxy or "").encode()).hexdigest()[:16]
        return Path(self.options.state_dir) / f"gass-{os.getuid()}-{digest}.json"

    async def _start_gass(self, proxy: str | None, port: str | None) -> tuple[int, str] | None:
        program = shutil.which(self.options.gass_server)
        if program is None:
            return None
        if proxy is not None:
            self._use_proxy(proxy)
        # Its URL comes on its stdout: an unlinked file, not a pipe, so that it outlives
        # this process without a SIGPIPE on a later write.
        with tempfile.TemporaryFile() as out:
            process = await asyncio.create_subprocess_exec(
                program,
                "-r",
                "-w",
                *(("-p", port) if port else ()),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
            url = ""
            deadline = asyncio.get_running_loop().time() + 30
            while process.returncode is None and asyncio.get_running_loop().time() < deadline:
                text = os.pread(out.fileno(), 4096, 0).decode(errors="replace")
                if "\n" in text:
                    url = text.partition("\n")[0].strip()
                    break
                await asyncio.sleep(0.05)
        if not url.startswith("https://"):
            _kill(process.pid)
            await process.wait()
            return None
        return process.pid, url


@dataclass(frozen=True, slots=True)
class _Gass:
    """A GASS server this user's GAHP servers started: its pid, URL and proxy stamp."""

    pid: int
    url: str
    stamp: str


def _stamp(proxy: str | None) -> str:
    if proxy is None:
        return ""
    try:
        st = os.stat(proxy)
    except OSError:
        return ""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _read_gass(path: Path) -> _Gass | None:
    try:
        data = json.loads(path.read_text())
        return _Gass(int(data["pid"]), str(data["url"]), str(data["stamp"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_gass(path: Path, gass: _Gass) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": gass.pid, "url": gass.url, "stamp": gass.stamp}))
        tmp.replace(path)
    except OSError:
        pass  # without the file a restarted GAHP starts a GASS server of its own


def _is_gass(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return b"globus-gass-server" in cmdline and stat.rpartition(")")[2].split()[:1] != ["Z"]


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
