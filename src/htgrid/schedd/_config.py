"""Where the personal pool keeps its state, and the knobs of its daemons.

    $HTGRID_HOME (default ~/.htgrid)
    ├── htgrid.conf          optional, HTCondor style: NAME = value, # comments
    ├── spool/queue.db       the job queue (SQLite)
    ├── spool/userlog.seq    the last change written to user event logs
    ├── spool/sandboxes/     output kept from evicted jobs (when_to_transfer_output ON_EXIT_OR_EVICT)
    ├── spool/<c>/<p>/       the sandbox of a job whose input was spooled (HTCondor-C)
    ├── execute/             the execute node's job sandboxes
    ├── log/                 SchedLog (this daemon, the negotiator), CollectorLog, StartLog
    └── run/                 mode 0700: schedd.sock, startd.sock (0600), pid and lock files,
                             collector.address (the collector's host:port), schedd.url

Knobs (htgrid.conf), named as HTCondor names the closest setting:

    PERIODIC_EXPR_INTERVAL = 60     seconds between evaluations of periodic policies
    JOB_MAX_VACATE_TIME = 10        seconds between a job's KillSig and SIGKILL
    START_LOCAL_UNIVERSE_LIMIT = 200  local universe jobs running at once
    QUEUE_FSYNC = true              sync each queue commit to disk

    DAEMON_LIST = MASTER, COLLECTOR, NEGOTIATOR, SCHEDD, STARTD, GRIDMANAGER  what `up` runs
    COLLECTOR_HOST = 127.0.0.1:9618 the collector's address (port 0: any free port)
    NEGOTIATOR_INTERVAL = 60        seconds between negotiation cycles, at most
    NEGOTIATOR_MIN_INTERVAL = 5     ... and at least (a submit asks for a cycle sooner)
    SCHEDD_INTERVAL = 300           seconds between updates of the schedd's ad
    SCHEDD_NAME = htgrid@<host>     the schedd's Name in the pool (two pools on a host differ)
    SCHEDD_ADDRESS = 127.0.0.1:0    where the API listens over TLS (port 0: any free port);
                                    its URL is written to run/schedd.url
    MAX_TRANSFER_INPUT_MB = 10240   MiB a job's uploaded input tar may hold (-1: no limit;
                                    HTCondor's default is -1, but this daemon listens on
                                    the network); more is refused with HTTP 413
    MAX_TRANSFER_OUTPUT_MB = 10240  MiB of files a job's output sandbox may hand out
                                    (-1: no limit)
    MAX_API_REQUEST_MB = 64         MiB of a JSON request to any daemon's API; more is
                                    refused with HTTP 413 before it is read
    API_HEADER_TIMEOUT = 20         seconds a request's headers may take to arrive, and
    API_BODY_TIMEOUT = 60           its body (plus 1 s per KiB); a slower client is cut
                                    off with HTTP 408 (see htgrid.net._limits)
    ALIVE_INTERVAL = 60             seconds between a claim's keep-alives
    MAX_CLAIM_ALIVES_MISSED = 6     keep-alives missed before a claim is given up
    MASTER_BACKOFF_CONSTANT = 1     a daemon that died is restarted after CONSTANT *
    MASTER_BACKOFF_FACTOR = 2         FACTOR ** (restarts) seconds, at most CEILING;
    MASTER_BACKOFF_CEILING = 300      restarts are forgotten once it has run
    MASTER_RECOVER_FACTOR = 300       RECOVER_FACTOR seconds
    DEFAULT_MASTER_SHUTDOWN_SCRIPT = (none)   a command run when the daemons exit
    TRUST_DOMAIN = (host name)      the issuer of the pool's tokens (htgrid.net.security)
    GRIDMANAGER_JOB_PROBE_INTERVAL = 10  seconds between the grid manager's status polls

The execute node's knobs (NUM_CPUS, MEMORY, DISK, EXECUTE, START, STARTD_ATTRS,
UPDATE_INTERVAL, STARTD_NOCLAIM_SHUTDOWN, FILESYSTEM_DOMAIN, UID_DOMAIN, GPU_DISCOVERY)
are read by `htgrid.startd`; a name listed in STARTD_ATTRS may be set too (its value is
a ClassAd expression). Any other name is refused, so that a typo does not pass silently.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid.errors import HTGridError
from htgrid.net._limits import DEFAULT_LIMITS, ApiLimits

__all__ = [
    "Backoff",
    "ConfigFile",
    "ScheddConfig",
    "ScheddError",
    "default_schedd_name",
    "htgrid_home",
]

CONFIG_NAME: Final = "htgrid.conf"
DAEMONS: Final = frozenset({"MASTER", "COLLECTOR", "NEGOTIATOR", "SCHEDD", "STARTD", "GRIDMANAGER"})


class ScheddError(HTGridError):
    """The daemon could not start, stop or be configured."""


def default_schedd_name() -> str:
    """SCHEDD_NAME's default: `htgrid@<this host>`."""
    return f"htgrid@{socket.gethostname()}"


def htgrid_home(env: Mapping[str, str] | None = None) -> Path:
    """$HTGRID_HOME, or ~/.htgrid; made absolute."""
    environ = os.environ if env is None else env
    home = environ.get("HTGRID_HOME") or str(Path("~/.htgrid").expanduser())
    return Path(home).expanduser().absolute()


_KNOWN: Final = frozenset(
    {
        "PERIODIC_EXPR_INTERVAL",
        "JOB_MAX_VACATE_TIME",
        "START_LOCAL_UNIVERSE_LIMIT",
        "QUEUE_FSYNC",
        "DAEMON_LIST",
        "COLLECTOR_HOST",
        "NEGOTIATOR_INTERVAL",
        "NEGOTIATOR_MIN_INTERVAL",
        "SCHEDD_INTERVAL",
        "SCHEDD_NAME",
        "SCHEDD_ADDRESS",
        "MAX_TRANSFER_INPUT_MB",
        "MAX_TRANSFER_OUTPUT_MB",
        "MAX_API_REQUEST_MB",
        "API_HEADER_TIMEOUT",
        "API_BODY_TIMEOUT",
        "ALIVE_INTERVAL",
        "MAX_CLAIM_ALIVES_MISSED",
        "MASTER_BACKOFF_CONSTANT",
        "MASTER_BACKOFF_FACTOR",
        "MASTER_BACKOFF_CEILING",
        "MASTER_RECOVER_FACTOR",
        "DEFAULT_MASTER_SHUTDOWN_SCRIPT",
        "TRUST_DOMAIN",  # read by htgrid.net.security.SecurityConfig.load
        "GRIDMANAGER_JOB_PROBE_INTERVAL",  # read by htgrid.grid (GridManagerConfig.KNOBS)
        # the execute node's (htgrid.startd)
        "NUM_CPUS",
        "MEMORY",
        "DISK",
        "EXECUTE",
        "START",
        "STARTD_ATTRS",
        "UPDATE_INTERVAL",
        "STARTD_NOCLAIM_SHUTDOWN",
        "FILESYSTEM_DOMAIN",
        "UID_DOMAIN",
        "GPU_DISCOVERY",
    }
)
_LIST_SPLIT: Final = re.compile(r"[\s,]+")
DEFAULT_TRANSFER_MB: Final = 10240


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """The settings of one htgrid.conf: upper-case NAME -> (value text, line number)."""

    path: Path
    values: Mapping[str, tuple[str, int]]

    @classmethod
    def read(cls, home: Path) -> ConfigFile:
        """`home`'s htgrid.conf (no settings when there is none)."""
        path = home / CONFIG_NAME
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path, {})
        except OSError as exc:
            raise ScheddError(f"{path}: cannot read: {exc.strerror}") from exc
        return cls(path, _parse(text, path))

    def has(self, key: str) -> bool:
        return key in self.values

    def _error(self, key: str, problem: str) -> ScheddError:
        return ScheddError(f"{self.path}:{self.values[key][1]}: {key} {problem}")

    def text(self, key: str, default: str) -> str:
        """The value as written (the default when unset or empty)."""
        value = self.values.get(key, ("", 0))[0]
        return value or default

    def number(self, key: str, default: float, *, zero: bool = False) -> float:
        """A positive number (or zero, when `zero` allows it)."""
        if key not in self.values:
            return default
        text = self.values[key][0]
        try:
            number = float(text)
        except ValueError:
            raise self._error(key, f"must be a number, not {text!r}") from None
        if number < 0 or (number == 0 and not zero):
            raise self._error(key, "must be positive" if not zero else "must not be negative")
        return number

    def integer(self, key: str, default: int, *, zero: bool = False) -> int:
        """A positive whole number (or zero, when `zero` allows it)."""
        number = self.number(key, default, zero=zero)
        if number != int(number):
            raise self._error(key, f"must be a whole number, not {self.values[key][0]!r}")
        return int(number)

    def megabytes(self, key: str, default: int | None) -> int | None:
        """A size in MiB; a negative one (HTCondor writes -1) is no limit (None)."""
        if key not in self.values:
            return default
        text = self.values[key][0]
        try:
            number = int(text)
        except ValueError:
            problem = f"must be a whole number of MiB (-1: no limit), not {text!r}"
            raise self._error(key, problem) from None
        return None if number < 0 else number

    def flag(self, key: str, default: bool) -> bool:
        if key not in self.values:
            return default
        text = self.values[key][0].lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise self._error(key, f"must be true or false, not {self.values[key][0]!r}")

    def api_limits(self) -> ApiLimits:
        """MAX_API_REQUEST_MB, API_HEADER_TIMEOUT, API_BODY_TIMEOUT: every daemon's API."""
        size = self.integer("MAX_API_REQUEST_MB", DEFAULT_LIMITS.max_request_mb)
        return ApiLimits(
            max_request_mb=size,
            header_timeout=self.number("API_HEADER_TIMEOUT", DEFAULT_LIMITS.header_timeout),
            body_timeout=self.number("API_BODY_TIMEOUT", DEFAULT_LIMITS.body_timeout),
        )

    def address(self, key: str, default: tuple[str, int]) -> tuple[str, int]:
        """A `host:port` (port 0: any free port)."""
        if key not in self.values:
            return default
        text = self.values[key][0]
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise self._error(key, f"must be host:port, not {text!r}")
        return host.strip("[]"), int(port)

    def names(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        """A list of names, separated by commas or spaces."""
        if key not in self.values:
            return default
        return tuple(n for n in _LIST_SPLIT.split(self.values[key][0]) if n)


def _parse(text: str, path: Path) -> dict[str, tuple[str, int]]:
    values: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        key = name.strip().upper()
        if not eq or not key.replace("_", "").isalnum():
            raise ScheddError(f"{path}:{number}: expected NAME = value")
        values[key] = (value.strip(), number)
    custom = {n.upper() for n in _LIST_SPLIT.split(values.get("STARTD_ATTRS", ("", 0))[0]) if n}
    for key, (_, number) in values.items():
        if key not in _KNOWN and key not in custom:
            raise ScheddError(
                f"{path}:{number}: expected NAME = value with a NAME htgrid knows, not {key} "
                "(a name listed in STARTD_ATTRS is advertised in the execute node's ad)"
            )
    return values


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long the master waits before restarting a daemon that died (MASTER_BACKOFF_*)."""

    constant: float = 1.0
    factor: float = 2.0
    ceiling: float = 300.0
    recover: float = 300.0  # a daemon that ran this long has recovered: count from 0

    def delay(self, restarts: int) -> float:
        """The wait before restart number `restarts` + 1."""
        return float(min(self.ceiling, self.constant * self.factor ** min(restarts, 64)))


@dataclass(frozen=True, slots=True)
class ScheddConfig:
    """The daemon's settings and the paths under its home."""

    home: Path
    periodic_interval: float = 60.0
    kill_grace: float = 10.0
    max_local_jobs: int = 200
    fsync: bool = True
    daemons: frozenset[str] = DAEMONS
    collector_host: str = "127.0.0.1:9618"
    negotiator_interval: float = 60.0
    negotiator_min_interval: float = 5.0
    schedd_interval: float = 300.0
    alive_interval: float = 60.0
    max_alives_missed: int = 6
    backoff: Backoff = Backoff()
    shutdown_script: str | None = None
    schedd_name: str = dataclasses.field(default_factory=default_schedd_name)
    schedd_address: tuple[str, int] = ("127.0.0.1", 0)  # the API's TLS listener
    max_transfer_input_mb: int | None = DEFAULT_TRANSFER_MB  # None: no limit
    max_transfer_output_mb: int | None = DEFAULT_TRANSFER_MB
    api_limits: ApiLimits = DEFAULT_LIMITS

    @property
    def spool(self) -> Path:
        return self.home / "spool"

    @property
    def log_dir(self) -> Path:
        return self.home / "log"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def socket(self) -> Path:
        return self.run_dir / "schedd.sock"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "schedd.pid"

    @property
    def lock_file(self) -> Path:
        return self.run_dir / "schedd.lock"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "SchedLog"

    @property
    def userlog_seq_file(self) -> Path:
        return self.spool / "userlog.seq"

    @property
    def gridmanager_feed_file(self) -> Path:
        """Where the grid manager keeps its position in the change feed."""
        return self.spool / "gridmanager" / "feed.seq"

    @property
    def gridmanager_doorbell(self) -> Path:
        """The grid manager's doorbell, rung after each change to the queue."""
        return self.spool / "gridmanager" / "wake"

    @property
    def collector_address_file(self) -> Path:
        """Where the running collector's host:port is written (COLLECTOR_ADDRESS_FILE)."""
        return self.run_dir / "collector.address"

    @property
    def url_file(self) -> Path:
        """Where the API's URL (`https://host:port`) is written once it listens."""
        return self.run_dir / "schedd.url"

    def job_spool(self, cluster: int, proc: int) -> Path:
        """The spool directory of a job whose input is spooled (its Iwd here)."""
        return self.spool / str(cluster) / str(proc)

    @property
    def sandbox_spool(self) -> Path:
        """Output kept from evicted jobs, one directory per job."""
        return self.spool / "sandboxes"

    @property
    def claim_lease(self) -> float:
        """Seconds without a keep-alive after which a claim is given up."""
        return self.alive_interval * self.max_alives_missed

    def without_execute(self) -> ScheddConfig:
        """The same settings with no execute node (`htgrid up -no-execute`)."""
        return dataclasses.replace(self, daemons=self.daemons - {"STARTD"})

    def make_dirs(self) -> None:
        """Create the directories; run/ is private to the user (mode 0700)."""
        for path in (self.spool, self.log_dir):
            path.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.run_dir, 0o700)

    @classmethod
    def load(cls, home: Path | None = None) -> ScheddConfig:
        """The settings of `home` (default $HTGRID_HOME), from its htgrid.conf if any."""
        home = home if home is not None else htgrid_home()
        conf = ConfigFile.read(home)
        daemons = frozenset(n.upper() for n in conf.names("DAEMON_LIST", tuple(DAEMONS)))
        unknown = daemons - DAEMONS
        if unknown:
            raise ScheddError(
                f"{conf.path}: DAEMON_LIST names {', '.join(sorted(unknown))}; htgrid runs "
                f"{', '.join(sorted(DAEMONS))}"
            )
        script = conf.text("DEFAULT_MASTER_SHUTDOWN_SCRIPT", "")
        return cls(
            home,
            periodic_interval=conf.number("PERIODIC_EXPR_INTERVAL", 60.0),
            kill_grace=conf.number("JOB_MAX_VACATE_TIME", 10.0),
            max_local_jobs=conf.integer("START_LOCAL_UNIVERSE_LIMIT", 200),
            fsync=conf.flag("QUEUE_FSYNC", True),
            daemons=daemons | {"MASTER", "SCHEDD"},  # this daemon is both
            collector_host=conf.text("COLLECTOR_HOST", "127.0.0.1:9618"),
            negotiator_interval=conf.number("NEGOTIATOR_INTERVAL", 60.0),
            negotiator_min_interval=conf.number("NEGOTIATOR_MIN_INTERVAL", 5.0, zero=True),
            schedd_interval=conf.number("SCHEDD_INTERVAL", 300.0),
            alive_interval=conf.number("ALIVE_INTERVAL", 60.0),
            max_alives_missed=conf.integer("MAX_CLAIM_ALIVES_MISSED", 6),
            backoff=Backoff(
                constant=conf.number("MASTER_BACKOFF_CONSTANT", 1.0),
                factor=conf.number("MASTER_BACKOFF_FACTOR", 2.0),
                ceiling=conf.number("MASTER_BACKOFF_CEILING", 300.0),
                recover=conf.number("MASTER_RECOVER_FACTOR", 300.0),
            ),
            shutdown_script=script or None,
            schedd_name=conf.text("SCHEDD_NAME", default_schedd_name()),
            schedd_address=conf.address("SCHEDD_ADDRESS", ("127.0.0.1", 0)),
            max_transfer_input_mb=conf.megabytes("MAX_TRANSFER_INPUT_MB", DEFAULT_TRANSFER_MB),
            max_transfer_output_mb=conf.megabytes("MAX_TRANSFER_OUTPUT_MB", DEFAULT_TRANSFER_MB),
            api_limits=conf.api_limits(),
        )
