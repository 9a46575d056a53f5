"""`ExecuteNode`: an execute node of another "machine" joining a `PersonalPool`.

    with PersonalPool(tmp_path / "pool", daemons=CENTRAL_MANAGER, ...) as pool:
        with ExecuteNode(pool, tmp_path / "node2", "node2", "127.0.0.2") as node:
            node.joined()                      # its slots, once the collector has them
            ...

Each node has a home of its own (its own HTGRID_HOME, execute directory and
certificate), listens on a loopback address of its own (NETWORK_INTERFACE), is named
as its token says (NETWORK_HOSTNAME), shares no files with the submit host
(FILESYSTEM_DOMAIN), trusts the pool's CA as `htgrid trust add` leaves it, and holds
the token the pool's administrator made for it with `htgrid token create -identity
<name>@<trust domain> -authz ADVERTISE_STARTD`: what an administrator copies to a
machine joining the pool. It runs as `htgrid startd -pool <collector>`, a process;
behind a `htgrid.testing.nat.Gateway` (`behind=`), as a machine behind NAT: in a network
namespace of its own, which reaches the pool's ports the gateway carries and which
nothing outside can reach.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from htgrid.classad import ClassAd, quote
from htgrid.collector import CollectorClient
from htgrid.net.security import SecurityConfig, ensure_pool_security
from htgrid.pool import CONFIG_NAME, family_marker, kill_leftovers
from htgrid.startd import StartdConfig
from htgrid.testing import PersonalPool, run_cli, wait_for
from htgrid.testing.nat import Gateway

__all__ = ["CENTRAL_MANAGER", "FAST_CYCLES", "ExecuteNode"]

#: A pool without an execute node of its own: its jobs run on the nodes that join it.
CENTRAL_MANAGER = ("MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR")
#: Quick cycles and short leases, so that tests wait for seconds, not minutes.
FAST_CYCLES: dict[str, object] = {
    "NEGOTIATOR_INTERVAL": 2,
    "NEGOTIATOR_MIN_INTERVAL": 0.1,
    "SCHEDD_INTERVAL": 1,
    "ALIVE_INTERVAL": 2,
    "MAX_CLAIM_ALIVES_MISSED": 3,
    "MASTER_BACKOFF_CONSTANT": 0.5,
}


class ExecuteNode:
    """`htgrid startd -pool` in a home of its own, as on another machine of `pool`."""

    def __init__(
        self,
        pool: PersonalPool,
        home: Path,
        name: str,
        address: str,
        *,
        identity: str | None = None,
        authz: Sequence[str] = ("ADVERTISE_STARTD",),
        token: bool = True,
        config: Mapping[str, object] | None = None,
        behind: Gateway | None = None,
    ) -> None:
        """`identity` is the token's (default `name@<the pool's trust domain>`);
        `token=False` gives the node none; `behind`: the NAT it runs behind."""
        home.mkdir(parents=True, exist_ok=True)
        knobs: dict[str, object] = {
            "NETWORK_INTERFACE": address,
            "NETWORK_HOSTNAME": name,
            "FILESYSTEM_DOMAIN": name,
            "UID_DOMAIN": name,
            "NUM_CPUS": 2,
            "MEMORY": 2048,
            "JOB_MAX_VACATE_TIME": 1,
            "ALLOW_ROOT_JOBS": "true",  # the tests run as root
            **(config or {}),
        }
        (home / CONFIG_NAME).write_text("".join(f"{k} = {v}\n" for k, v in knobs.items()))
        self.pool, self.home, self.name, self.address = pool, home, name, address
        theirs = ensure_pool_security(SecurityConfig.load(pool.home))
        self.trust_domain = theirs.trust_domain
        status, _, err = run_cli(home, "trust", "add", theirs.trust_domain, str(theirs.ca.cert))
        assert status == 0, err
        if token:
            who = identity or f"{name}@{theirs.trust_domain}"
            args = ["token", "create", "-identity", who, "-token", str(self.token_file)]
            for each in authz:
                args += ["-authz", each]
            status, _, err = run_cli(pool.home, *args)
            assert status == 0, err
        self.config = StartdConfig.load(home)
        self.behind = behind
        self.process: subprocess.Popen[bytes] | None = None
        self.started = 0  # when it was last started (whole seconds, as DaemonStartTime)
        self._earlier: set[str] = set()  # the addresses its earlier runs advertised
        self._address: str | None = None  # the one this run advertises, once joined

    @property
    def token_file(self) -> Path:
        """Where the node's token is (its etc/tokens.d)."""
        return self.home / "etc" / "tokens.d" / "pool"

    @property
    def output(self) -> Path:
        """What the node wrote to stdout and stderr (its log lines)."""
        return self.home / "startd.out"

    def start(self) -> subprocess.Popen[bytes]:
        """Run `htgrid startd -pool <the pool's collector>` with this home."""
        env = {**os.environ, "HTGRID_HOME": str(self.home)}
        command = [sys.executable, "-m", "htgrid.cli", "startd", "-pool", self.pool.collector]
        if self.behind is not None:
            command = self.behind.wrap(command)
        if self._address is not None:
            self._earlier.add(self._address)
            self._address = None
        self.started = int(time.time())
        with open(self.output, "ab") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
        return self.process

    def slots(self) -> list[ClassAd]:
        """The node's slot ads in the pool's collector, as the pool's daemons read them."""

        async def query() -> list[ClassAd]:
            pool = self.pool
            async with CollectorClient(pool.collector, home=pool.home, daemon=True) as c:
                return await c.query("Machine", f"Machine == {quote(self.name)}")

        return asyncio.run(query())

    def joined(self, timeout: float = 30.0) -> list[ClassAd]:
        """The slot ads of the node as last started, once the pool's collector has them
        (not those an earlier run of it left there: a test would go on before the node
        is there, and its job be matched to the ads of a node that is gone)."""

        def mine() -> list[ClassAd]:
            return [
                ad
                for ad in self.slots()
                if _number(ad.get("DaemonStartTime")) >= self.started
                and ad.get("MyAddress") not in self._earlier
            ]

        ads = wait_for(mine, timeout, what=f"the slots of {self.name} in the collector")
        address = ads[0].get("MyAddress")
        self._address = address if isinstance(address, str) else None
        return ads

    def wait(self, timeout: float = 30.0) -> int:
        """The node's exit status, once it has exited."""
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> int | None:
        """SIGTERM, as `kill` would: its exit status (None if it was not started)."""
        proc, self.process = self.process, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                return proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait()

    def log(self) -> str:
        try:
            return self.output.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> ExecuteNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the node; should it not stop cleanly, no job of its outlives the test."""
        try:
            self.stop()
        finally:
            kill_leftovers(family_marker(self.config.execute_dir))


def _number(value: object) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0
