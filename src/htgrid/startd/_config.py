"""The execute node's settings, from the pool's htgrid.conf (see `htgrid.pool`).

    NUM_CPUS = 8                  cpus offered (default: those this process may use)
    MEMORY = 16384                memory offered, in MB (default: the host's)
    DISK = 100000000              disk offered, in KB (default: free space of EXECUTE)
    EXECUTE = /scratch/htgrid     where job sandboxes go (default $HTGRID_HOME/execute)
    START = TARGET.Owner == "alice"   which jobs it takes (a ClassAd expression; true)
    STARTD_ATTRS = HasData, Site  attributes added to the slot ads, each set below
    HasData = true                ... as a ClassAd expression
    Site = "attic"
    UPDATE_INTERVAL = 300         seconds between updates of the slot ads (and on change)
    STARTD_NOCLAIM_SHUTDOWN = 0   exit after this many seconds without a claim (0: never)
    CLAIM_WORKLIFE = 1200         seconds after its grant a claim takes no further job: a
                                  job ending later leaves it to be released, and the
                                  schedd's next job waits for a new match (-1: no limit;
                                  0: one job per claim)
    FILESYSTEM_DOMAIN = localhost jobs from this domain share our files (no transfer)
    UID_DOMAIN = localhost
    GPU_DISCOVERY = true          look for GPUs with nvidia-smi (if it is on PATH)
    JOB_MAX_VACATE_TIME = 10      seconds between a job's KillSig and SIGKILL
    MAX_TRANSFER_INPUT_MB = 10240 MiB an input sandbox may unpack to (as the schedd's)
    ALLOW_ROOT_JOBS = false       whether a job owned by root may run (as root)
    NETWORK_INTERFACE = 10.1.2.3  a node on its own: the address its API listens on over
                                  TLS (default: the one this host reaches the collector by)
    NETWORK_HOSTNAME = node7      the slots' Machine, slot1@node7 (default: this host's name);
                                  a node joining with a token must be named as its identity
                                  or a host under it (i-0abc.big.annex for big.annex@...)
    CCB_ADDRESS = cm.org:9618     a node schedds cannot connect to (behind NAT): the broker
                                  (a collector) it registers with; schedds then reach it
                                  through connections it makes back to them
    PRIVATE_NETWORK_NAME = cloud  the node's private network: schedds of the same name
                                  connect to it directly, others through its broker (the
                                  pool's collector when CCB_ADDRESS is not set)
    CCB_HEARTBEAT_INTERVAL = 1200 seconds between the broker's heartbeats on the
                                  registration (one missing twice: the node registers again)

The policy on running jobs (WANT_SUSPEND, SUSPEND, CONTINUE, PREEMPT, WANT_VACATE, KILL,
MAXJOBRETIREMENTTIME, POLLING_INTERVAL and their _VANILLA forms) is `_policy`'s.

A running node reads them again at a reconfig (`htgrid reconfig`, SIGHUP): START,
STARTD_ATTRS and their values, UPDATE_INTERVAL and the domains show in its ads at once;
the policy applies to the running jobs at once (evaluated then);
CLAIM_WORKLIFE, JOB_MAX_VACATE_TIME, MAX_TRANSFER_INPUT_MB and ALLOW_ROOT_JOBS apply to
the claims and jobs that come after. What the node is made of (NUM_CPUS, MEMORY, DISK,
EXECUTE, GPU_DISCOVERY) and where it listens or reports (NETWORK_*, COLLECTOR_HOST, CCB_*,
PRIVATE_NETWORK_NAME) needs a restart: a reconfig logs the change and keeps what runs.

FILESYSTEM_DOMAIN defaults to "localhost", the domain `htgrid submit` writes into job
ads: an execute node on the submit host shares its files. Set both when jobs run
elsewhere.

A node run by root runs each job as its owner, in a sandbox of the owner's under
EXECUTE (mode 0711: the owners pass through it to their sandboxes, and list nothing);
EXECUTE and the directories above it must let them pass (not under a 0700 /root).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from htgrid.pool import (
    DEFAULT_LIMITS,
    DEFAULT_TRANSFER_MB,
    ApiLimits,
    ConfigFile,
    HomeLayout,
    PoolError,
    htgrid_home,
)
from htgrid.startd._policy_knobs import StartdPolicy, expression_knob

__all__ = ["StartdConfig"]

#: The knob of each setting a running node takes at a reconfig.
LIVE_KNOBS: Final = {
    "start": "START",
    "attrs": "STARTD_ATTRS",
    "update_interval": "UPDATE_INTERVAL",
    "noclaim_shutdown": "STARTD_NOCLAIM_SHUTDOWN",
    "claim_worklife": "CLAIM_WORKLIFE",
    "filesystem_domain": "FILESYSTEM_DOMAIN",
    "uid_domain": "UID_DOMAIN",
    "vacate_time": "JOB_MAX_VACATE_TIME",
    "shutdown_script": "DEFAULT_MASTER_SHUTDOWN_SCRIPT",
    "max_transfer_input_mb": "MAX_TRANSFER_INPUT_MB",
    "allow_root_jobs": "ALLOW_ROOT_JOBS",
}
#: ... and of each that needs a restart (as HTCondor's startd says of its slots' sizes).
RESTART_KNOBS: Final = {
    "execute_dir": "EXECUTE",
    "num_cpus": "NUM_CPUS",
    "memory": "MEMORY",
    "disk": "DISK",
    "gpu_discovery": "GPU_DISCOVERY",
    "collector_host": "COLLECTOR_HOST",
    "api_limits": "the API's limits (API_*)",
    "network_interface": "NETWORK_INTERFACE",
    "network_hostname": "NETWORK_HOSTNAME",
    "ccb_address": "CCB_ADDRESS",
    "private_network_name": "PRIVATE_NETWORK_NAME",
    "ccb_heartbeat": "CCB_HEARTBEAT_INTERVAL",
}


@dataclass(frozen=True, slots=True)
class StartdConfig(HomeLayout):
    """The execute node's settings and its paths under the pool's home."""

    execute_dir: Path
    num_cpus: int | None = None
    memory: int | None = None
    disk: int | None = None
    start: str = "true"
    attrs: tuple[tuple[str, str], ...] = ()
    update_interval: float = 300.0
    noclaim_shutdown: float = 0.0
    claim_worklife: float | None = 1200.0  # None: no limit
    filesystem_domain: str = "localhost"
    uid_domain: str = "localhost"
    gpu_discovery: bool = True
    collector_host: str = "127.0.0.1:9618"
    vacate_time: float = 10.0
    shutdown_script: str | None = None
    api_limits: ApiLimits = DEFAULT_LIMITS
    max_transfer_input_mb: int | None = DEFAULT_TRANSFER_MB  # an input sandbox's files
    allow_root_jobs: bool = False
    network_interface: str | None = None
    network_hostname: str | None = None
    ccb_address: str | None = None
    private_network_name: str | None = None
    ccb_heartbeat: float = 1200.0
    policy: StartdPolicy = dataclasses.field(
        default_factory=StartdPolicy
    )  # WANT_SUSPEND, SUSPEND, ... (see `_policy`)

    def reconfigured(self, new: StartdConfig) -> tuple[StartdConfig, list[str], list[str]]:
        """`new` as the running node takes it: the settings that need a restart kept as
        they are in `self`; the knobs that changed, and those that wait for a restart."""
        changed = [knob for name, knob in LIVE_KNOBS.items() if _differ(self, new, name)]
        changed += self.policy.changed(new.policy)
        later = [knob for name, knob in RESTART_KNOBS.items() if _differ(self, new, name)]
        kept: dict[str, Any] = {name: getattr(self, name) for name in RESTART_KNOBS}
        return dataclasses.replace(new, **kept), changed, later

    def broker(self, pool: str) -> str | None:
        """The broker the node registers with: CCB_ADDRESS, else `pool` (its collector)
        for a node on a PRIVATE_NETWORK_NAME; None for a node schedds connect to."""
        if self.ccb_address:
            return self.ccb_address
        return pool if self.private_network_name else None

    def make_execute_dir(self) -> None:
        """EXECUTE, made if missing: 0711 when the node runs as root (each job's owner
        passes through to its sandbox), else 0700."""
        mode = 0o711 if os.geteuid() == 0 else 0o700
        self.execute_dir.mkdir(parents=True, exist_ok=True, mode=mode)
        os.chmod(self.execute_dir, mode)

    @property
    def socket(self) -> Path:
        return self.startd_socket

    @property
    def lock_file(self) -> Path:
        return self.startd_lock_file

    @property
    def log_file(self) -> Path:
        return self.startd_log

    @classmethod
    def load(cls, home: Path | None = None) -> StartdConfig:
        """The settings of `home` (default $HTGRID_HOME)."""
        home = (home if home is not None else htgrid_home()).absolute()
        conf = ConfigFile.read(home)

        def worklife() -> float | None:
            text = conf.text("CLAIM_WORKLIFE")
            try:
                seconds = float(text)
            except ValueError:
                line = conf.values["CLAIM_WORKLIFE"][1]
                raise PoolError(
                    f"{conf.path}:{line}: CLAIM_WORKLIFE must be a number of seconds "
                    f"(-1: no limit), not {text!r}"
                ) from None
            return None if seconds < 0 else seconds

        def optional(key: str) -> int | None:
            return conf.integer(key, 0) if conf.has(key) else None

        attrs = tuple(
            (name, expression_knob(conf, name.upper(), "undefined"))
            for name in conf.names("STARTD_ATTRS")
            if conf.has(name.upper())
        )
        script = conf.text("DEFAULT_MASTER_SHUTDOWN_SCRIPT", "")
        return cls(
            home,
            execute_dir=Path(conf.text("EXECUTE", str(HomeLayout(home).default_execute_dir)))
            .expanduser()
            .absolute(),
            num_cpus=optional("NUM_CPUS"),
            memory=optional("MEMORY"),
            disk=optional("DISK"),
            start=expression_knob(conf, "START"),
            attrs=attrs,
            update_interval=conf.number("UPDATE_INTERVAL"),
            noclaim_shutdown=conf.number("STARTD_NOCLAIM_SHUTDOWN", 0.0, zero=True),
            claim_worklife=worklife(),
            filesystem_domain=conf.text("FILESYSTEM_DOMAIN"),
            uid_domain=conf.text("UID_DOMAIN"),
            gpu_discovery=conf.flag("GPU_DISCOVERY"),
            collector_host=conf.text("COLLECTOR_HOST"),
            vacate_time=conf.number("JOB_MAX_VACATE_TIME"),
            shutdown_script=script or None,
            api_limits=conf.api_limits(),
            max_transfer_input_mb=conf.megabytes("MAX_TRANSFER_INPUT_MB"),
            allow_root_jobs=conf.flag("ALLOW_ROOT_JOBS"),
            network_interface=conf.text("NETWORK_INTERFACE", "") or None,
            network_hostname=conf.text("NETWORK_HOSTNAME", "") or None,
            ccb_address=conf.text("CCB_ADDRESS", "") or None,
            private_network_name=conf.text("PRIVATE_NETWORK_NAME", "") or None,
            ccb_heartbeat=conf.number("CCB_HEARTBEAT_INTERVAL"),
            policy=StartdPolicy.load(conf),
        )


def _differ(old: StartdConfig, new: StartdConfig, name: str) -> bool:
    return bool(getattr(old, name) != getattr(new, name))
