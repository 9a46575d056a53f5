"""`InstanceHarness`: boots the instances moto says are running, for real, on loopback.

    with InstanceHarness(tmp_path / "cloud", region="us-east-1") as harness:
        ...  # htgrid annex create ...; the instances boot and join the pool
        harness.booted()                   # instance ids booted so far

moto runs no instance. For each one of an annex (tagged htgrid:AnnexName) that moto
reports running, the harness runs its real boot script (its user data, as moto holds
it) as a local process, with

* its own loopback address (127.0.0.10, .11, ...), which its execute node listens on;
* a small instance metadata service on that address (IMDSv2's token, the instance's
  id, the instance role's credentials), so the node's boto3 reads the annex's token
  from SSM (moto) with the instance's credentials, not the test's;
* the boot script's test hooks: htgrid is not installed from PyPI (it is importable
  already, or `wheel=` installs a local wheel into a virtualenv), the metadata service
  is not firewalled (that takes iptables on the test host), and "shutdown -h now"
  asks the harness to terminate the instance in moto, as EC2 does for an instance
  launched with InstanceInitiatedShutdownBehavior=terminate.

An instance moto reports terminated (the lease function, `annex shutdown`) loses its
processes at once, as a VM that is gone does. `BootHarness` is the cloud-neutral part
(tests/annex/_azure_cloud.py boots Azure scale sets of the fake ARM with it).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from htgrid.pool import family_marker, kill_leftovers
from htgrid.startd import StartdConfig

__all__ = ["BootHarness", "InstanceHarness", "Route", "metadata_server"]

_ANNEX_TAG = "htgrid:AnnexName"
_CREDENTIALS = {
    "Code": "Success",
    "Type": "AWS-HMAC",
    "AccessKeyId": "ASIAHARNESSINSTANCE",
    "SecretAccessKey": "harness-instance-secret",
    "Token": "harness-instance-session",
    "Expiration": "2099-01-01T00:00:00Z",
    "LastUpdated": "2026-01-01T00:00:00Z",
}


@dataclass
class _Booted:
    instance_id: str
    address: str
    home: Path
    metadata: ThreadingHTTPServer
    process: subprocess.Popen[bytes]
    started: float  # time.monotonic() when its boot script started
    gone: bool = False


Route = Callable[[str, str], tuple[int, str] | None]  # (method, path) -> (status, body)


def metadata_server(
    address: str, routes: Route, shutdown: Callable[[], None]
) -> ThreadingHTTPServer:
    """A small instance metadata service on `address`: `routes` answers, and POST
    /harness/shutdown (the boot script's "shutdown -h now") calls `shutdown`."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            if self.command == "POST" and self.path == "/harness/shutdown":
                shutdown()
                status, body = 200, ""
            else:
                status, body = routes(self.command, self.path) or (404, "")
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# The name the metadata service gives the instance's role (its credentials are fixed).
_ROLE = "htgrid-annex-instance"


def _ec2_routes(instance_id: str) -> Route:
    """IMDSv2: a session token, the instance's id, the instance role's credentials."""
    creds = "/latest/meta-data/iam/security-credentials/"

    def route(method: str, path: str) -> tuple[int, str] | None:
        if method == "PUT" and path == "/latest/api/token":
            return 200, "harness-imds-token"
        if method != "GET":
            return None
        return {
            "/latest/meta-data/instance-id": (200, instance_id),
            creds: (200, _ROLE),
            creds + _ROLE: (200, json.dumps(_CREDENTIALS)),
        }.get(path)

    return route


class BootHarness:
    """Boots a cloud's annex instances as processes on loopback addresses; a subclass
    says what the cloud runs (`states`), each instance's user data and metadata
    service (`user_data`, `routes`), and what its own shutdown does (`shut_down`)."""

    def __init__(
        self,
        workdir: Path,
        *,
        first_address: int = 10,
        wheel: Path | None = None,
        env: Mapping[str, str] | None = None,
        interval: float = 0.2,
    ) -> None:
        self.workdir = workdir
        self.next_address = first_address
        self.wheel = wheel
        self.extra_env = dict(env or {})
        self.interval = interval
        self.instances: dict[str, _Booted] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # ---- the cloud's side (a subclass's) ---------------------------------------------

    def states(self) -> dict[str, str]:
        """Every annex instance's state, in EC2's words (running, terminated...)."""
        raise NotImplementedError

    def user_data(self, instance_id: str) -> str:
        raise NotImplementedError

    def routes(self, instance_id: str) -> Route:
        raise NotImplementedError

    def shut_down(self, instance_id: str) -> None:
        """The instance shut itself down."""
        raise NotImplementedError

    def step(self) -> None:
        """Boot what is newly running, end what is gone."""
        for instance_id, state in self.states().items():
            with self._lock:
                known = self.instances.get(instance_id)
            if state == "running" and known is None:
                self._boot(instance_id)
            elif state in ("shutting-down", "terminated") and known and not known.gone:
                self._vanish(known)

    # ---- an instance ----------------------------------------------------------------

    def _env(self, booted_home: Path, address: str, metadata: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_ACCESS_KEY", "AWS_SECRET", "AWS_SESSION", "HTGRID_"))
            and k not in ("AWS_PROFILE", "AWS_SECURITY_TOKEN", "AWS_EC2_METADATA_DISABLED")
        }
        shutdown = (
            f"{sys.executable} -c 'import urllib.request as u; "
            f'u.urlopen(u.Request("{metadata}/harness/shutdown", method="POST"))\''
        )
        env.update(
            HTGRID_ANNEX_HOME=str(booted_home),
            HTGRID_ANNEX_METADATA_URL=metadata,
            HTGRID_ANNEX_INTERFACE=address,
            HTGRID_ANNEX_NO_FIREWALL="1",
            HTGRID_ANNEX_SHUTDOWN=shutdown,
        )
        if self.wheel is None:
            env.update(HTGRID_ANNEX_SKIP_INSTALL="1", HTGRID_ANNEX_PYTHON=sys.executable)
        else:
            env.pop("PYTHONPATH", None)  # the wheel's htgrid, not the worktree's
            env["HTGRID_ANNEX_PIP_ARGS"] = f"--no-deps --no-index {self.wheel}"
        env.update(self.extra_env)
        return env

    def _boot(self, instance_id: str) -> None:
        user_data = self.user_data(instance_id)
        address = f"127.0.0.{self.next_address}"
        self.next_address += 1
        home = self.workdir / instance_id
        home.mkdir(parents=True, exist_ok=True)
        script = home / "user-data"
        script.write_text(user_data)
        metadata = metadata_server(
            address, self.routes(instance_id), lambda: self.shut_down(instance_id)
        )
        url = f"http://{address}:{metadata.server_address[1]}"
        with open(home / "boot.log", "ab") as out:
            process = subprocess.Popen(
                ["/bin/sh", str(script)],
                env=self._env(home, address, url),
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        with self._lock:
            self.instances[instance_id] = _Booted(
                instance_id, address, home, metadata, process, time.monotonic()
            )

    def _vanish(self, booted: _Booted) -> None:
        booted.gone = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(booted.process.pid, signal.SIGKILL)
        booted.process.wait()
        self._kill_jobs(booted)
        booted.metadata.shutdown()
        booted.metadata.server_close()

    @staticmethod
    def _kill_jobs(booted: _Booted) -> None:
        node = booted.home / "node"
        if (node / "htgrid.conf").exists():
            kill_leftovers(family_marker(StartdConfig.load(node).execute_dir))

    # ---- what tests ask ---------------------------------------------------------------

    def booted(self) -> list[str]:
        with self._lock:
            return sorted(self.instances)

    def started(self, instance_id: str) -> float:
        """When the instance began to run (its boot script started), on time.monotonic()."""
        with self._lock:
            return self.instances[instance_id].started

    def running(self) -> list[str]:
        """The booted instances whose boot process still runs."""
        with self._lock:
            return sorted(i for i, b in self.instances.items() if b.process.poll() is None)

    def log(self, instance_id: str) -> str:
        booted = self.instances[instance_id]
        parts = []
        for name in ("boot.log", "startd.log"):
            path = booted.home / name
            if path.exists():
                parts.append(f"--- {name}\n{path.read_text(errors='replace')}")
        return "\n".join(parts)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except Exception as exc:  # moto busy: the next step tries again
                self.errors.append(repr(exc))

    def start(self) -> BootHarness:
        self._thread = threading.Thread(target=self._loop, name="instance-harness", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            left = [b for b in self.instances.values() if not b.gone]
        for booted in left:
            self._vanish(booted)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InstanceHarness(BootHarness):
    """Boots the annex instances moto runs (EC2)."""

    def __init__(self, workdir: Path, *, region: str = "us-east-1", **kwargs: Any) -> None:
        import boto3  # type: ignore[import-untyped]

        super().__init__(workdir, **kwargs)
        self.region = region
        self.ec2 = boto3.session.Session(region_name=region).client("ec2")

    def states(self) -> dict[str, str]:
        out: dict[str, str] = {}
        kwargs: dict[str, Any] = {"Filters": [{"Name": "tag-key", "Values": [_ANNEX_TAG]}]}
        while True:
            page = self.ec2.describe_instances(**kwargs)
            for reservation in page["Reservations"]:
                for i in reservation["Instances"]:
                    out[i["InstanceId"]] = i["State"]["Name"]
            if not page.get("NextToken"):
                return out
            kwargs["NextToken"] = page["NextToken"]

    def user_data(self, instance_id: str) -> str:
        raw = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        return base64.b64decode(raw.get("UserData", {}).get("Value", "")).decode()

    def routes(self, instance_id: str) -> Route:
        return _ec2_routes(instance_id)

    def shut_down(self, instance_id: str) -> None:
        """EC2 terminates an instance launched with shutdown behaviour `terminate`."""
        self.ec2.terminate_instances(InstanceIds=[instance_id])
