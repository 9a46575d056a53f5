"""Helpers for tests and experiments: `PersonalPool`, a real daemon in a scratch
directory; `htgrid.testing.collector`, a collector in a thread.

    with PersonalPool(tmp_path / "pool", periodic_interval=0.5) as pool:
        with pool.client() as schedd:
            ...
        pool.kill()          # kill -9, as a crash would
        pool.start()         # and the recovery that follows

The daemon is the one `htgrid up` starts (a detached process), so tests see what users
see. By default it runs the job queue alone (DAEMON_LIST = MASTER, SCHEDD): vanilla jobs
stay idle. `daemons=WHOLE_POOL` adds the collector (on a free loopback port), the
negotiator and an execute node; `config` sets further knobs of htgrid.conf (the pool lets
root's jobs run, ALLOW_ROOT_JOBS = true, as the tests run as root and submit as root; a
test of whose rights jobs have sets it false and submits as another user). `wait_for`
polls with a deadline instead of sleeping a fixed time. `token` and `remote` reach the
daemon's TLS API as a token's holder would; `trust` lets one pool's users reach another
(its CA trusted, a user's token of it kept).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import io
import os
import shutil
import signal
import tarfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from htgrid.classad import ClassAd
from htgrid.cli import main
from htgrid.master import DaemonInfo, alive, pool_daemon, start, stop
from htgrid.net import ScheddClient
from htgrid.net.security import SecurityConfig, TokenIssuer, ensure_pool_security, save_token
from htgrid.pool import CONFIG_NAME, family_marker, kill_leftovers
from htgrid.schedd import ScheddConfig
from htgrid.startd import StartdConfig

__all__ = [
    "QUEUE_ONLY",
    "WHOLE_POOL",
    "PersonalPool",
    "completed",
    "held",
    "in_process",
    "proxy_pem",
    "run_cli",
    "tar_of",
    "untar",
    "until",
    "wait_for",
]

QUEUE_ONLY = ("MASTER", "SCHEDD")
WHOLE_POOL = ("MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR", "STARTD", "GRIDMANAGER")

T = TypeVar("T")


def run_cli(home: Path, *argv: str) -> tuple[int, str, str]:
    """`htgrid ARGV...` in this process, against the pool in `home`: (status, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    old = os.environ.get("HTGRID_HOME")
    os.environ["HTGRID_HOME"] = str(home)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            status = main(list(argv))
    finally:
        if old is None:
            del os.environ["HTGRID_HOME"]
        else:
            os.environ["HTGRID_HOME"] = old
    return status, out.getvalue(), err.getvalue()


def wait_for(
    probe: Callable[[], T | None], timeout: float = 20.0, interval: float = 0.05, what: str = ""
) -> T:
    """Poll `probe` until it returns something truthy; that value (TimeoutError otherwise)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what or probe!r}")
        time.sleep(interval)


async def until(probe: Callable[[], T | None], timeout: float = 60.0) -> T:
    """`wait_for` from a coroutine: the blocking probe polled in a thread, off the loop of
    a daemon running in this process (`in_process`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(probe)
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {probe!r}")
        await asyncio.sleep(0.05)


def in_process(
    config: ScheddConfig,
    scenario: Callable[[ScheddClient], Awaitable[None]],
    *,
    clock: Callable[[], float] = time.time,
) -> None:
    """Run the daemon of `config` in this process (its children are processes, as
    always) while `scenario` talks to it, then stop it. A test may so inject a fault
    into what the daemon itself runs: the periodic pass, the negotiator, the shadows..."""
    daemon = pool_daemon(config, clock=clock)

    async def main() -> None:
        serving = asyncio.create_task(daemon.run())
        try:
            await until(config.socket.exists)
            client = ScheddClient(config.socket)
            try:
                await scenario(client)
            finally:
                client.close()
        finally:
            daemon.request_stop()
            await serving

    asyncio.run(main())


async def held(schedd: ScheddClient, job: str) -> ClassAd:
    """The job's ad once it is held (from a coroutine, see `until`)."""
    return await until(lambda: (ad := schedd.get(job))["JobStatus"] == 5 and ad)


async def completed(schedd: ScheddClient, job: str) -> ClassAd:
    """The job's history ad once it has completed and left the queue."""
    cluster, proc = job.split(".")
    (ad,) = await until(lambda: schedd.history(f"ClusterId == {cluster} && ProcId == {proc}"))
    if ad["JobStatus"] != 4:
        raise AssertionError(f"job {job} left the queue {ad['JobStatus']}, not completed")
    return ad


def _gone(pid: int) -> bool:
    return not alive(pid)


def _children(pid: int, module: str) -> list[int]:
    """The process's children now running `module` (`python -m module`; Linux's /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            children = [int(word) for word in task.read_text().split()]
        except OSError:
            continue
        for child in children:
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if module.encode() in argv:
                found.append(child)
    return found


class PersonalPool:
    """One pool home with its daemon; knobs go to its htgrid.conf."""

    def __init__(
        self,
        home: Path,
        *,
        periodic_interval: float = 60.0,
        kill_grace: float = 10.0,
        max_local_jobs: int = 200,
        fsync: bool = True,
        daemons: Sequence[str] = QUEUE_ONLY,
        config: Mapping[str, object] | None = None,
    ) -> None:
        home.mkdir(parents=True, exist_ok=True)
        knobs: dict[str, object] = {
            "PERIODIC_EXPR_INTERVAL": periodic_interval,
            "JOB_MAX_VACATE_TIME": kill_grace,
            "START_LOCAL_UNIVERSE_LIMIT": max_local_jobs,
            "QUEUE_FSYNC": str(fsync).lower(),
            "DAEMON_LIST": ", ".join(daemons),
            "COLLECTOR_HOST": "127.0.0.1:0",  # tests run side by side: any free port
            # The tests run as root and submit as root: the pool lets root's jobs run.
            # The security tests set it false and submit as another local user.
            "ALLOW_ROOT_JOBS": "true",
            **(config or {}),
        }
        (home / CONFIG_NAME).write_text("".join(f"{k} = {v}\n" for k, v in knobs.items()))
        self.home = home
        self.config = ScheddConfig.load(home)
        self.pid: int | None = None

    def start(self) -> DaemonInfo:
        """Start the daemon (as `htgrid up`)."""
        info = start(self.config)
        self.pid = info.pid
        return info

    def stop(self) -> int | None:
        """Stop the daemon cleanly (as `htgrid down`)."""
        pid = stop(self.config)
        self.pid = None
        return pid

    def kill(self) -> None:
        """kill -9 the daemon and wait until it is gone (its jobs keep running)."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        collectors = _children(pid, "htgrid.collector")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        wait_for(lambda: not alive(pid), 10, what=f"daemon {pid} to die")
        # Its collector ends once it sees it gone: a start before then would find the
        # collector's port still taken. (Its jobs may run on: they are not waited for.)
        # Once at the whole suite's load one took over 30 s (perhaps asyncio's 30 s for
        # a peer to answer a TLS close): as long as the other children may take here.
        for child in collectors:
            wait_for(functools.partial(_gone, child), 60, what=f"collector {child} to end")

    def client(self) -> ScheddClient:
        """A client of this pool's daemon."""
        return ScheddClient(self.config.socket)

    @property
    def url(self) -> str:
        """The daemon's TLS API (https://127.0.0.1:port), from run/schedd.url."""
        return self.config.url_file.read_text().strip()

    def token(
        self, subject: str, *, authz: Sequence[str] = (), lifetime: float | None = None
    ) -> str:
        """A token of this pool for `subject` (`user@domain`), as `htgrid token create`."""
        return TokenIssuer(SecurityConfig.load(self.home)).create(
            subject, authz=authz, lifetime=lifetime
        )

    def trust(self, other: PersonalPool, *, user: str | None = None) -> None:
        """Let this pool's users reach `other` (HTCondor-C between pools): `other`'s CA
        goes to this pool's etc/ca/trusted.d; with `user`, a token of `other` for
        `user@<its trust domain>` goes to this pool's etc/tokens.d."""
        theirs = ensure_pool_security(SecurityConfig.load(other.home))
        mine = SecurityConfig.load(self.home)
        mine.trusted_ca_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(theirs.ca.cert, mine.trusted_ca_dir / f"{theirs.trust_domain}.crt")
        if user is not None:
            token = other.token(f"{user}@{theirs.trust_domain}")
            save_token(mine.system_token_dir / f"user-{theirs.trust_domain}", token)

    def remote(self, token: str | None) -> ScheddClient:
        """A client of the daemon's TLS API presenting `token`, trusting this pool's CA."""
        return ScheddClient.remote(self.url, home=self.home, token=token)

    def child_pid(self, name: str) -> int | None:
        """The pid of a child daemon ("collector", "startd"), if it runs."""
        with self.client() as schedd:
            child = schedd.health().get("children", {}).get(name, {})
        pid = child.get("pid")
        return pid if isinstance(pid, int) else None

    @property
    def collector(self) -> str:
        """host:port of the pool's collector (from the daemon)."""
        with self.client() as schedd:
            return str(schedd.health()["collector"])

    def __enter__(self) -> PersonalPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()
            # Jobs of a killed daemon keep running; a test must not leave them behind.
            kill_leftovers(family_marker(self.config.home))
            kill_leftovers(family_marker(StartdConfig.load(self.home).execute_dir))


def proxy_pem(expires: int) -> bytes:
    """A proxy-like file: a certificate valid until `expires` (epoch s), then its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "alice proxy")])
    until = datetime.datetime.fromtimestamp(expires, datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(until - datetime.timedelta(days=1))
        .not_valid_after(until)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def tar_of(files: Mapping[str, bytes], *, mode: int = 0o644) -> bytes:
    """A plain tar holding `files` (name -> contents), as a submitter sends a sandbox."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def untar(data: bytes) -> dict[str, bytes]:
    """The files of a plain tar (name -> contents); AssertionError for any other member."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        out: dict[str, bytes] = {}
        for member in tar.getmembers():
            extracted = tar.extractfile(member)
            assert extracted is not None and member.isfile()
            out[member.name] = extracted.read()
        return out
