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
processes at once, as a VM that is gone does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from htgrid.annex import INSTANCE_ROLE
from htgrid.pool import family_marker, kill_leftovers
from htgrid.startd import StartdConfig

__all__ = ["InstanceHarness"]

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
    gone: bool = False


def _metadata_server(address: str, instance_id: str, shutdown: Any) -> ThreadingHTTPServer:
    booted_requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            booted_requests.append(f"PUT {self.path}")
            if self.path == "/latest/api/token":
                self._send(200, "harness-imds-token")
            else:
                self._send(404, "")

        def do_GET(self) -> None:
            booted_requests.append(f"GET {self.path}")
            creds = "/latest/meta-data/iam/security-credentials/"
            if self.path == "/latest/meta-data/instance-id":
                self._send(200, instance_id)
            elif self.path == creds:
                self._send(200, INSTANCE_ROLE)
            elif self.path == creds + INSTANCE_ROLE:
                self._send(200, json.dumps(_CREDENTIALS))
            else:
                self._send(404, "")

        def do_POST(self) -> None:
            if self.path == "/harness/shutdown":
                shutdown(instance_id)
                self._send(200, "")
            else:
                self._send(404, "")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), Handler)
    server.daemon_threads = True
    server.requests = booted_requests  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class InstanceHarness:
    """Boots the annex instances moto runs, as processes on loopback addresses."""

    def __init__(
        self,
        workdir: Path,
        *,
        region: str = "us-east-1",
        first_address: int = 10,
        wheel: Path | None = None,
        env: Mapping[str, str] | None = None,
        interval: float = 0.2,
    ) -> None:
        import boto3  # type: ignore[import-untyped]

        self.workdir = workdir
        self.region = region
        self.ec2 = boto3.session.Session(region_name=region).client("ec2")
        self.next_address = first_address
        self.wheel = wheel
        self.extra_env = dict(env or {})
        self.interval = interval
        self.instances: dict[str, _Booted] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # ---- the cloud's side -----------------------------------------------------------

    def _states(self) -> dict[str, str]:
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

    def _terminate(self, instance_id: str) -> None:
        """The instance shut itself down: EC2 terminates it."""
        self.ec2.terminate_instances(InstanceIds=[instance_id])

    def step(self) -> None:
        """Boot what is newly running, end what is gone."""
        for instance_id, state in self._states().items():
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
        import base64

        raw = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        user_data = base64.b64decode(raw.get("UserData", {}).get("Value", "")).decode()
        address = f"127.0.0.{self.next_address}"
        self.next_address += 1
        home = self.workdir / instance_id
        home.mkdir(parents=True, exist_ok=True)
        script = home / "user-data"
        script.write_text(user_data)
        metadata = _metadata_server(address, instance_id, self._terminate)
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
            self.instances[instance_id] = _Booted(instance_id, address, home, metadata, process)

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

    def start(self) -> InstanceHarness:
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

    def __enter__(self) -> InstanceHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
