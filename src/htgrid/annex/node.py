"""`python -m htgrid.annex.node SETTINGS.json`: an annex instance's execute node.

The boot script (user data) runs it once htgrid is installed. It

1. asks the instance metadata service for the instance's id (EC2: IMDSv2; Azure: the
   scale set VM's name);
2. reads the annex's token (EC2: its SSM SecureString, with the instance role's
   credentials; Azure: its Key Vault secret, with the scale set's managed identity)
   and writes it to the node's etc/tokens.d (mode 0600);
3. closes the metadata service to everyone but root (iptables), so that jobs, which
   run as their owners, cannot take the role's credentials or the identity's tokens;
4. trusts the pool's CA, writes the node's htgrid.conf (named `<instance id>.NAME.annex`,
   which the annex's token may advertise; START admits only jobs aimed at the annex,
   of its owners; STARTD_NOCLAIM_SHUTDOWN is the idle time) and runs `htgrid startd
   -pool POOL`;
5. every `poll` seconds reads the lease's end and the token again (`htgrid annex
   extend` moves the one and renews the other); at the lease's end it stops the node,
   whether or not the pool can be reached;
6. when the node has stopped (idle, lease, refused), shuts the instance down, which
   terminates it on EC2 (the instances are launched with that shutdown behaviour). On
   Azure a VM shut down from inside stays allocated, and billed: the node first deletes
   its own VM from its scale set through ARM with the scale set's managed identity
   (whose role allows that on its own scale set only); should ARM be out of reach, the
   lease timer (every minute) deletes the stopped VM. A Spot VM only shuts down: the
   timer deletes it, and lowers its set's target, which it keeps against evictions.

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
import urllib.error
import urllib.parse
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


def _retry(what: str, fn: Any, tries: int = _TRIES, until: float = float("inf")) -> Any:
    """fn(), tried for about a minute (and not past `until`): an instance's network may
    come up late."""
    for attempt in range(tries):
        try:
            return fn()
        except Exception as exc:
            if attempt == tries - 1 or time.time() >= until:
                raise
            _log.warning("%s: %s; trying again", what, exc)
            time.sleep(min(2.0, 0.1 * 2**attempt))
    raise AssertionError("unreachable")


class _Ec2:
    """EC2: the instance's id from IMDSv2; the annex's SSM parameters, read with the
    instance role's credentials."""

    attribute = "EC2InstanceID"
    #: Tries to read the annex's secrets at boot (about a minute).
    tries = _TRIES

    def __init__(self, settings: Mapping[str, Any], base: str) -> None:
        os.environ.setdefault("AWS_EC2_METADATA_SERVICE_ENDPOINT", base + "/")
        self.base = base
        self.names = {w: str(settings[f"{w}_parameter"]) for w in ("token", "lease")}
        self.region = str(settings["region"])
        self.ssm = self._client()

    def _client(self) -> Any:
        import boto3  # type: ignore[import-untyped]

        return boto3.session.Session(region_name=self.region).client("ssm")

    def instance(self) -> str:
        return _metadata(self.base, "instance-id")

    def release(self) -> None:
        """Nothing: the instance's shutdown terminates it."""

    def get(self, what: str) -> str | None:
        from botocore.exceptions import (  # type: ignore[import-untyped]
            ClientError,
            NoCredentialsError,
        )

        try:
            answer = self.ssm.get_parameter(Name=self.names[what], WithDecryption=True)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
                return None
            raise
        except NoCredentialsError:
            # The role's credentials come from the metadata service, which may answer
            # late at boot (botocore waits a second, once): a client made then has
            # none for good, so the next try makes another.
            self.ssm = self._client()
            raise
        return str(answer["Parameter"]["Value"])


class _Azure:
    """Azure: the VM's name from the instance metadata service; the annex's Key Vault
    secrets, read with the scale set's managed identity (its token from the same)."""

    attribute = "AzureVMName"
    #: About 11 minutes: Key Vault applies a new role assignment (the identity's
    #: Secrets User on the annex's secrets) up to 10 minutes after it is made.
    tries = _TRIES + 300

    def __init__(self, settings: Mapping[str, Any], base: str) -> None:
        self.base = base
        self.vault = str(settings["vault_url"]).rstrip("/")
        self.names = {w: str(settings[f"{w}_secret"]) for w in ("token", "lease")}
        self.arm = str(settings.get("arm_url") or "https://management.azure.com").rstrip("/")
        self.compute: dict[str, Any] = {}

    def _imds(self, path: str) -> Any:
        request = urllib.request.Request(f"{self.base}{path}", headers={"Metadata": "true"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            return json.loads(answer.read())

    def _bearer(self, resource: str) -> dict[str, str]:
        query = urllib.parse.urlencode({"api-version": "2018-02-01", "resource": resource})
        identity = self._imds(f"/metadata/identity/oauth2/token?{query}")
        return {"Authorization": f"Bearer {identity['access_token']}"}

    def instance(self) -> str:
        self.compute = self._imds("/metadata/instance/compute?api-version=2021-02-01")
        return str(self.compute["name"])

    def release(self) -> None:
        """Delete this VM from its scale set (the set shrinks by one): a VM stopped from
        inside would stay allocated. The call returns once ARM has accepted it."""
        resource = str(self.compute.get("resourceId", ""))
        if self.compute.get("priority") == "Spot":
            # The lease timer deletes a stopped Spot VM and lowers its set's target, which
            # it keeps against evictions: a VM that deleted itself would look evicted.
            _log.info("leaving this Spot VM to the lease timer once it is stopped")
            return
        scale_set, _, number = resource.rpartition("/virtualMachines/")
        if not scale_set or not number:
            raise ValueError(f"not a scale set's VM: resourceId {resource!r}")
        request = urllib.request.Request(
            f"{self.arm}{scale_set}/delete?api-version=2024-07-01",
            data=json.dumps({"instanceIds": [number]}).encode(),
            method="POST",
            headers={"Content-Type": "application/json", **self._bearer(self.arm + "/")},
        )
        with urllib.request.urlopen(request, timeout=30):
            pass
        _log.info("asked Azure to delete this VM (%s)", resource)

    def get(self, what: str) -> str | None:
        request = urllib.request.Request(
            f"{self.vault}/secrets/{self.names[what]}?api-version=7.4",
            headers=self._bearer("https://vault.azure.net"),
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return str(json.loads(answer.read())["value"])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise


def _cloud(settings: Mapping[str, Any], base: str) -> _Ec2 | _Azure:
    return _Azure(settings, base) if settings.get("cloud") == "azure" else _Ec2(settings, base)


def _write_secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(path.name + ".new")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text.strip() + "\n")
    os.replace(temp, path)


def _knobs(settings: Mapping[str, Any], instance: str, hostname: str,
           attribute: str = "EC2InstanceID") -> dict[str, str]:  # fmt: skip
    name = str(settings["annex"])
    knobs = {
        "NETWORK_HOSTNAME": hostname,
        "FILESYSTEM_DOMAIN": hostname,
        "UID_DOMAIN": hostname,
        "START": str(settings["start"]),
        "STARTD_ATTRS": f"AnnexName, IsAnnex, {attribute}",
        "AnnexName": json.dumps(name),
        "IsAnnex": "true",
        attribute: json.dumps(instance),
        "STARTD_NOCLAIM_SHUTDOWN": str(int(float(settings["idle"]))),
        "UPDATE_INTERVAL": str(int(settings.get("update_interval", 60))),
        # Through the pool's broker, as condor_annex does: the schedds reach the instance
        # over connections it opens, so no inbound rule is needed and NAT does not matter
        # (`--config CCB_ADDRESS=` connects directly instead).
        "CCB_ADDRESS": str(settings["pool"]),
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
    name = str(settings["annex"])
    params = _cloud(settings, base)
    lease_end = float(settings["lease_end"])
    try:
        instance = _retry("the instance metadata", params.instance, until=lease_end)
        token = _retry("the annex's token", lambda: params.get("token"), params.tries, lease_end)
        moved = _retry("the annex's lease", lambda: params.get("lease"), params.tries, lease_end)
    except Exception:  # the instance would run, and be billed, doing nothing
        _log.exception("annex %s: cannot read the instance's metadata or the annex's secrets", name)
        return _shutdown(params)
    # A scale set's VM is NAME_N: a host name has no underscore.
    hostname = f"{instance.replace('_', '-').lower()}.{name}.annex"
    if moved is not None:
        lease_end = float(moved)  # extended since this instance was requested
    try:
        if token is None:
            _log.error("annex %s has no token (it was shut down): not joining", name)
            return _shutdown(params)
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
        knobs = _knobs(settings, instance, hostname, params.attribute)
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
                lease_end, token = _refresh(params, lease_end, token, token_file)
                continue
            _log.info("annex %s: the node exited with status %s", name, status)
            break
    except Exception:
        _log.exception("annex %s: the node failed", name)
    return _shutdown(params)


def _refresh(params: _Ec2 | _Azure, lease_end: float, token: str,
             token_file: Path) -> tuple[float, str]:  # fmt: skip
    """The lease end and token as the cloud has them now (unchanged if unreadable)."""
    try:
        lease = params.get("lease")
        fresh = params.get("token")
    except Exception as exc:  # cut off from the cloud: the lease known stands
        _log.warning("cannot read the annex's lease: %s", exc)
        return lease_end, token
    if lease is None or fresh is None:
        return 0.0, token  # the annex was shut down
    if fresh != token:
        _write_secret(token_file, fresh)
    return float(lease), fresh


def _shutdown(params: _Ec2 | _Azure) -> int:
    try:
        _retry("deleting this instance", params.release, tries=5)
    except Exception as exc:  # cut off: the shutdown stands, the cloud's sweeper ends it
        _log.warning("cannot delete this instance: %s", exc)
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
