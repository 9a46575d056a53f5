"""`python -m htgrid.annex.node SETTINGS.json`: an annex instance's execute node.

The boot script (user data) runs it once htgrid is installed. It

1. asks the instance metadata service (IMDSv2) for the instance's id;
2. reads the annex's token from its SSM SecureString with the instance role's
   credentials, and writes it to the node's etc/tokens.d (mode 0600);
3. closes the metadata service to everyone but root (iptables), so that jobs, which
   run as their owners, cannot take the role's credentials;
4. trusts the pool's CA, writes the node's htgrid.conf (named `<instance id>.NAME.annex`,
   which the annex's token may advertise; START admits only jobs aimed at the annex,
   of its owners; STARTD_NOCLAIM_SHUTDOWN is the idle time) and runs `htgrid startd
   -pool POOL`;
5. every `poll` seconds reads the lease's end and the token again (`htgrid annex
   extend` moves the one and renews the other); at the lease's end it stops the node,
   whether or not the pool can be reached;
6. when the node has stopped (idle, lease, refused), shuts the instance down, which
   terminates it (the instances are launched with that shutdown behaviour).

Test hooks, from the environment: HTGRID_ANNEX_METADATA_URL (default
http://169.254.169.254), HTGRID_ANNEX_SHUTDOWN (default `shutdown -h now`),
HTGRID_ANNEX_INTERFACE (the node's NETWORK_INTERFACE), HTGRID_ANNEX_NO_FIREWALL=1,
HTGRID_ANNEX_POLL (seconds between readings of the lease, default 60).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

__all__ = ["main"]

_log = logging.getLogger("htgrid.annex.node")
_METADATA: Final = "http://169.254.169.254"
_TRIES: Final = 30


def _metadata(base: str, path: str) -> str:
    token_request = urllib.request.Request(
        f"{base}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
    )
    with urllib.request.urlopen(token_request, timeout=5) as answer:
        token = answer.read().decode()
    request = urllib.request.Request(
        f"{base}/latest/meta-data/{path}", headers={"X-aws-ec2-metadata-token": token}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return str(answer.read().decode())


def _retry(what: str, fn: Any) -> Any:
    """fn(), tried for about a minute: an instance's network may come up late."""
    for attempt in range(_TRIES):
        try:
            return fn()
        except Exception as exc:
            if attempt == _TRIES - 1:
                raise
            _log.warning("%s: %s; trying again", what, exc)
            time.sleep(min(2.0, 0.1 * 2**attempt))
    raise AssertionError("unreachable")


class _Parameters:
    """The annex's SSM parameters, read with the instance role's credentials."""

    def __init__(self, region: str) -> None:
        import boto3  # type: ignore[import-untyped]

        self.ssm = boto3.session.Session(region_name=region).client("ssm")

    def get(self, name: str) -> str | None:
        from botocore.exceptions import ClientError  # type: ignore[import-untyped]

        try:
            answer = self.ssm.get_parameter(Name=name, WithDecryption=True)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
                return None
            raise
        return str(answer["Parameter"]["Value"])


def _write_secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(path.name + ".new")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text.strip() + "\n")
    os.replace(temp, path)


def _knobs(settings: Mapping[str, Any], instance: str, hostname: str) -> dict[str, str]:
    name = str(settings["annex"])
    knobs = {
        "NETWORK_HOSTNAME": hostname,
        "FILESYSTEM_DOMAIN": hostname,
        "UID_DOMAIN": hostname,
        "START": str(settings["start"]),
        "STARTD_ATTRS": "AnnexName, IsAnnex, EC2InstanceID",
        "AnnexName": json.dumps(name),
        "IsAnnex": "true",
        "EC2InstanceID": json.dumps(instance),
        "STARTD_NOCLAIM_SHUTDOWN": str(int(float(settings["idle"]))),
        "UPDATE_INTERVAL": str(int(settings.get("update_interval", 60))),
    }
    interface = os.environ.get("HTGRID_ANNEX_INTERFACE")
    if interface:
        knobs["NETWORK_INTERFACE"] = interface
    knobs.update({str(k): str(v) for k, v in dict(settings.get("config", {})).items()})
    return knobs


def _firewall() -> None:
    if os.environ.get("HTGRID_ANNEX_NO_FIREWALL") == "1":
        _log.info("not closing the metadata service to jobs (HTGRID_ANNEX_NO_FIREWALL)")
        return
    rule = ["OUTPUT", "-d", "169.254.169.254", "-m", "owner", "!", "--uid-owner", "0", "-j", "REJECT"]  # fmt: skip
    if subprocess.run(["iptables", "-C", *rule], capture_output=True).returncode != 0:
        subprocess.run(["iptables", "-A", *rule], check=True)


def _htgrid(*args: str) -> list[str]:
    return [sys.executable, "-m", "htgrid", *args]


def run(settings: Mapping[str, Any], home: Path) -> int:
    """The node's whole life on this instance; the shutdown command's exit status."""
    base = os.environ.get("HTGRID_ANNEX_METADATA_URL", _METADATA).rstrip("/")
    os.environ.setdefault("AWS_EC2_METADATA_SERVICE_ENDPOINT", base + "/")
    name = str(settings["annex"])
    instance = _retry("the instance metadata", lambda: _metadata(base, "instance-id"))
    hostname = f"{instance}.{name}.annex"
    params = _Parameters(str(settings["region"]))
    token = _retry("the annex's token", lambda: params.get(str(settings["token_parameter"])))
    lease_end = float(settings["lease_end"])
    moved = _retry("the annex's lease", lambda: params.get(str(settings["lease_parameter"])))
    if moved is not None:
        lease_end = float(moved)  # extended since this instance was requested
    try:
        if token is None:
            _log.error("annex %s has no token (it was shut down): not joining", name)
            return _shutdown()
        node = home / "node"
        env = {**os.environ, "HTGRID_HOME": str(node)}
        node.mkdir(parents=True, exist_ok=True)
        token_file = node / "etc" / "tokens.d" / "pool"
        _write_secret(token_file, token)
        _firewall()
        (home / "ca.crt").write_text(str(settings["ca"]))
        subprocess.run(
            _htgrid("trust", "add", str(settings["trust_domain"]), str(home / "ca.crt")),
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        knobs = _knobs(settings, instance, hostname)
        (node / "htgrid.conf").write_text("".join(f"{k} = {v}\n" for k, v in knobs.items()))
        with open(home / "startd.log", "ab") as out:
            startd = subprocess.Popen(
                _htgrid("startd", "-pool", str(settings["pool"])),
                env=env,
                stdout=out,
                stderr=out,
            )
        _log.info("annex %s: node %s started (pid %d)", name, hostname, startd.pid)
        poll = float(os.environ.get("HTGRID_ANNEX_POLL", settings.get("poll", 60)))
        while True:
            left = lease_end - time.time()
            if left <= 0:
                _log.info("annex %s: the lease has ended; stopping the node", name)
                startd.send_signal(signal.SIGTERM)
                try:
                    startd.wait(120)
                except subprocess.TimeoutExpired:
                    startd.kill()
                break
            try:
                status = startd.wait(min(poll, left))
            except subprocess.TimeoutExpired:
                lease_end, token = _refresh(params, settings, lease_end, token, token_file)
                continue
            _log.info("annex %s: the node exited with status %s", name, status)
            break
    except Exception:
        _log.exception("annex %s: the node failed", name)
    return _shutdown()


def _refresh(params: _Parameters, settings: Mapping[str, Any], lease_end: float,
             token: str, token_file: Path) -> tuple[float, str]:  # fmt: skip
    """The lease end and token as SSM has them now (unchanged if it cannot be read)."""
    try:
        lease = params.get(str(settings["lease_parameter"]))
        fresh = params.get(str(settings["token_parameter"]))
    except Exception as exc:  # cut off from the cloud: the lease known stands
        _log.warning("cannot read the annex's lease: %s", exc)
        return lease_end, token
    if lease is None or fresh is None:
        return 0.0, token  # the annex was shut down
    if fresh != token:
        _write_secret(token_file, fresh)
    return float(lease), fresh


def _shutdown() -> int:
    command = os.environ.get("HTGRID_ANNEX_SHUTDOWN", "shutdown -h now")
    _log.info("shutting the instance down: %s", command)
    return subprocess.run(["/bin/sh", "-c", command]).returncode


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m htgrid.annex.node SETTINGS.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    path = Path(args[0])
    settings = json.loads(path.read_text())
    return run(settings, path.parent)


if __name__ == "__main__":
    sys.exit(main())
