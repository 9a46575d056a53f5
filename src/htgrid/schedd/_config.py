"""The knobs of the schedd and of the master it runs in (see `htgrid.pool` for the file).

    PERIODIC_EXPR_INTERVAL, JOB_MAX_VACATE_TIME, START_LOCAL_UNIVERSE_LIMIT, QUEUE_FSYNC,
    SCHEDD_INTERVAL, SCHEDD_NAME, SCHEDD_ADDRESS, MAX_TRANSFER_INPUT_MB,
    MAX_TRANSFER_OUTPUT_MB, ALIVE_INTERVAL, MAX_CLAIM_ALIVES_MISSED,
    RECONNECT_BACKOFF_FACTOR, RECONNECT_BACKOFF_CEILING, ALLOW_ROOT_JOBS,
    PRIVATE_NETWORK_NAME (execute nodes on the same one are reached directly, not by CCB),
    the API's limits (MAX_API_REQUEST_MB, API_HEADER_TIMEOUT, API_BODY_TIMEOUT); and the
    master's: DAEMON_LIST, COLLECTOR_HOST, NEGOTIATOR_INTERVAL, NEGOTIATOR_MIN_INTERVAL,
    MASTER_BACKOFF_*, MASTER_RECOVER_FACTOR, DEFAULT_MASTER_SHUTDOWN_SCRIPT,
    ANNEX_UPDATE_INTERVAL, ANNEX_TOKEN_MAX_LIFETIME.

`htgrid.pool._config` lists each with its default and meaning.
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid.pool import (
    DEFAULT_LIMITS,
    DEFAULT_TRANSFER_MB,
    ApiLimits,
    Backoff,
    ConfigFile,
    HomeLayout,
    PoolError,
    htgrid_home,
)
from htgrid.queue import SystemPolicy

__all__ = ["DAEMONS", "ScheddConfig", "ScheddError", "default_schedd_name"]

DAEMONS: Final = frozenset({"MASTER", "COLLECTOR", "NEGOTIATOR", "SCHEDD", "STARTD", "GRIDMANAGER"})
#: What DAEMON_LIST may name: the default's, and the job router (a CE's, htgrid.router).
KNOWN_DAEMONS: Final = DAEMONS | {"JOB_ROUTER"}


class ScheddError(PoolError):
    """The daemon could not start, stop or serve."""


def default_schedd_name() -> str:
    """SCHEDD_NAME's default: `htgrid@<this host>`."""
    return f"htgrid@{socket.gethostname()}"


@dataclass(frozen=True, slots=True)
class ScheddConfig(HomeLayout):
    """The daemon's settings (the schedd's and its master's), and the paths under its home."""

    periodic_interval: float = 60.0
    kill_grace: float = 10.0
    max_local_jobs: int = 200
    fsync: bool = True
    daemons: frozenset[str] = DAEMONS
    collector_host: str = "127.0.0.1:9618"
    negotiator_interval: float = 60.0
    negotiator_min_interval: float = 5.0
    schedd_interval: float = 300.0
    annex_update_interval: float = 60.0
    annex_token_max_lifetime: float = 604800.0
    alive_interval: float = 60.0
    max_alives_missed: int = 6
    reconnect_factor: float = 2.0
    reconnect_ceiling: float = 300.0
    backoff: Backoff = dataclasses.field(default_factory=Backoff)
    shutdown_script: str | None = None
    schedd_name: str = dataclasses.field(default_factory=default_schedd_name)
    schedd_address: tuple[str, int] = ("127.0.0.1", 0)  # the API's TLS listener
    max_transfer_input_mb: int | None = DEFAULT_TRANSFER_MB  # None: no limit
    max_transfer_output_mb: int | None = DEFAULT_TRANSFER_MB
    api_limits: ApiLimits = DEFAULT_LIMITS
    allow_root_jobs: bool = False
    private_network_name: str | None = None
    system_policy: SystemPolicy = dataclasses.field(default_factory=SystemPolicy)
    view_hosts: tuple[str, ...] = ()  # CONDOR_VIEW_HOST: more collectors for the schedd's ad
    use_voms_attributes: bool = False  # a job proxy's VOMS FQANs go into its ad

    @property
    def socket(self) -> Path:
        return self.schedd_socket

    @property
    def pid_file(self) -> Path:
        return self.schedd_pid_file

    @property
    def lock_file(self) -> Path:
        return self.schedd_lock_file

    @property
    def log_file(self) -> Path:
        return self.schedd_log

    @property
    def url_file(self) -> Path:
        """Where the API's URL (`https://host:port`) is written once it listens."""
        return self.schedd_url_file

    @property
    def ccb_port_file(self) -> Path:
        """The port the schedd listened on for nodes behind NAT: the next start's too."""
        return self.spool / "ccb_return.port"

    @property
    def claim_lease(self) -> float:
        """Seconds without a keep-alive after which a claim is given up."""
        return self.alive_interval * self.max_alives_missed

    def without_execute(self) -> ScheddConfig:
        """The same settings with no execute node (`htgrid up -no-execute`)."""
        return dataclasses.replace(self, daemons=self.daemons - {"STARTD"})

    @classmethod
    def load(cls, home: Path | None = None) -> ScheddConfig:
        """The settings of `home` (default $HTGRID_HOME), from its htgrid.conf if any."""
        home = home if home is not None else htgrid_home()
        conf = ConfigFile.read(home)
        daemons = frozenset(n.upper() for n in conf.names("DAEMON_LIST"))
        unknown = daemons - KNOWN_DAEMONS
        if unknown:
            raise PoolError(
                f"{conf.path}: DAEMON_LIST names {', '.join(sorted(unknown))}; htgrid runs "
                f"{', '.join(sorted(KNOWN_DAEMONS))}"
            )
        script = conf.text("DEFAULT_MASTER_SHUTDOWN_SCRIPT", "")
        return cls(
            home,
            periodic_interval=conf.number("PERIODIC_EXPR_INTERVAL"),
            kill_grace=conf.number("JOB_MAX_VACATE_TIME"),
            max_local_jobs=conf.integer("START_LOCAL_UNIVERSE_LIMIT"),
            fsync=conf.flag("QUEUE_FSYNC"),
            daemons=daemons | {"MASTER", "SCHEDD"},  # this daemon is both
            collector_host=conf.text("COLLECTOR_HOST"),
            negotiator_interval=conf.number("NEGOTIATOR_INTERVAL"),
            negotiator_min_interval=conf.number("NEGOTIATOR_MIN_INTERVAL", zero=True),
            schedd_interval=conf.number("SCHEDD_INTERVAL"),
            annex_update_interval=conf.number("ANNEX_UPDATE_INTERVAL"),
            annex_token_max_lifetime=conf.number("ANNEX_TOKEN_MAX_LIFETIME"),
            alive_interval=conf.number("ALIVE_INTERVAL"),
            max_alives_missed=conf.integer("MAX_CLAIM_ALIVES_MISSED"),
            reconnect_factor=conf.number("RECONNECT_BACKOFF_FACTOR"),
            reconnect_ceiling=conf.number("RECONNECT_BACKOFF_CEILING"),
            backoff=Backoff(
                constant=conf.number("MASTER_BACKOFF_CONSTANT"),
                factor=conf.number("MASTER_BACKOFF_FACTOR"),
                ceiling=conf.number("MASTER_BACKOFF_CEILING"),
                recover=conf.number("MASTER_RECOVER_FACTOR"),
            ),
            shutdown_script=script or None,
            schedd_name=conf.text("SCHEDD_NAME", default_schedd_name()),
            schedd_address=conf.address("SCHEDD_ADDRESS"),
            max_transfer_input_mb=conf.megabytes("MAX_TRANSFER_INPUT_MB"),
            max_transfer_output_mb=conf.megabytes("MAX_TRANSFER_OUTPUT_MB"),
            api_limits=conf.api_limits(),
            allow_root_jobs=conf.flag("ALLOW_ROOT_JOBS"),
            private_network_name=conf.text("PRIVATE_NETWORK_NAME", "") or None,
            system_policy=conf.system_policy(),
            view_hosts=conf.names("CONDOR_VIEW_HOST"),
            use_voms_attributes=conf.flag("USE_VOMS_ATTRIBUTES"),
        )
