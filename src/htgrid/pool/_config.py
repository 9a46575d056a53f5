"""The pool's configuration file, $HTGRID_HOME/htgrid.conf, and the knobs it may set.

One file configures every daemon of a pool, HTCondor style: `NAME = value` lines and
`# comments`. `ConfigFile` reads it with each setting's line number, so a bad value is
reported as `htgrid.conf:LINE: NAME ...` by whichever daemon (or command) reads it; a
name htgrid does not know is refused, so that a typo does not pass silently.

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
    ANNEX_UPDATE_INTERVAL = 60      seconds between refreshes of this pool's annexes' ads
    ANNEX_TOKEN_MAX_LIFETIME = 604800  seconds an annex token the schedd mints for a user
                                    may last at most (its annex's lease)
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
                                    off with HTTP 408 (see htgrid.net.server)
    ALIVE_INTERVAL = 60             seconds between a claim's keep-alives (one a node, for
                                    all its claims, to a node of another host)
    MAX_CLAIM_ALIVES_MISSED = 6     keep-alives missed before a claim of a job that names no
                                    JobLeaseDuration is given up
    JOB_DEFAULT_LEASE_DURATION = 2400  the JobLeaseDuration of jobs whose submit file names
                                    none (`htgrid submit`): how long a job runs on without
                                    word from its schedd, which may reconnect to it meanwhile
    RECONNECT_BACKOFF_FACTOR = 2    a shadow's attempts to reconnect to a job wait FACTOR **
    RECONNECT_BACKOFF_CEILING = 300   (attempts + 2) seconds, at most CEILING, never past
                                    the job's lease
    MASTER_BACKOFF_CONSTANT = 1     a daemon that died is restarted after CONSTANT *
    MASTER_BACKOFF_FACTOR = 2         FACTOR ** (restarts) seconds, at most CEILING;
    MASTER_BACKOFF_CEILING = 300      restarts are forgotten once it has run
    MASTER_RECOVER_FACTOR = 300       RECOVER_FACTOR seconds
    DEFAULT_MASTER_SHUTDOWN_SCRIPT = (none)   a command run when the daemons exit
    TRUST_DOMAIN = (host name)      the issuer of the pool's tokens (htgrid.net.security)
    CERTIFICATE_MAPFILE = etc/mapfile  the unified map file: SCITOKENS and TOKEN lines map
                                    <issuer>,<subject> to local users (htgrid.net.security)
    SCITOKENS_SERVER_AUDIENCE = $(COLLECTOR_HOST)  the `aud` an issuer's token must name
                                    (issuers' keys are fetched trusting the system's CAs
                                    and the pool's, AUTH_SSL_CLIENT_CADIR: `htgrid trust add`)
    SEC_SCITOKENS_CACHE = run/cache  issuers' keys kept, used when an issuer is down
    SEC_SCITOKENS_ALLOWED_ISSUERS = (the map file's)  the only issuers whose keys are
                                    fetched (`*`: any); unset, those SCITOKENS lines name
                                    (one each: a line for any issuer names none). Their
                                    tokens no line maps are scitokens@unmapped: READ
    DENY_WRITE = anonymous@*, *@unmapped, *@banned.htcondor.org   mapped names refused
                                    WRITE (and DENY_READ, _NEGOTIATOR, _ADMINISTRATOR, _DAEMON)
    ALLOW_WRITE = (none)            when set, the only names let in WRITE (and ALLOW_READ...);
                                    DENY_* and ALLOW_* are read again when htgrid.conf changes
    SEC_READ_AUTHENTICATION = REQUIRED  OPTIONAL: HTCondor's clients (CEDAR) that do not
                                    insist on it read without authenticating, as
                                    unauthenticated@unmapped (READ only; DENY_READ applies)
    SEC_DEFAULT_SESSION_DURATION = 3600  seconds a CEDAR client may resume a session
    NETWORK_MAX_PENDING_CONNECTS = (80% of the descriptors)  CEDAR connections a daemon's
                                    port holds at once; past it newcomers are closed
    AUTH_SSL_SERVER_CERTFILE = etc/ca/server.crt  the certificate (and _KEYFILE its key) the
                                    daemons present to CEDAR's SSL authentication, whose
                                    clients' certificates are AUTH_SSL_SERVER_CAFILE's (the
                                    pool CA) and mapped by the map file's SSL lines
    AUTH_SSL_REQUIRE_CLIENT_CERTIFICATE = false  true: SSL without a certificate is refused
    USE_SHARED_PORT = false         true: the schedd's MyAddress is the collector's port
                                    (`<host:port?sock=schedd>`): HTCondor's clients reach
                                    it there, as through HTCondor's shared port daemon
    SCHEDD_AUDIT_LOG = log/AuditLog  every accepted or refused change, who and why (0600)
    MAX_SCHEDD_AUDIT_LOG = 1d       rotated after a day (or N bytes); MAX_NUM_SCHEDD_AUDIT_LOG
                                    = 90 old ones kept (and the COLLECTOR_ ones)
    COLLECTOR_AUDIT_LOG = (none)    the collector's
    GRIDMANAGER_JOB_PROBE_INTERVAL = 10  seconds between the grid manager's status polls
    GRIDMANAGER_COLLECTOR_UPDATE_INTERVAL = 300  seconds between the grid manager's Grid
                                    ads (one per resource: condor_status -grid)
    GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE = 1000  jobs submitted at once per resource
    GRIDMANAGER_RESOURCE_PROBE_INTERVAL = 300  most seconds between pings of a resource down
    GRIDMANAGER_GAHP_CALL_TIMEOUT = 300  seconds a GAHP request may take before it is lost
    GRIDMANAGER_GAHP_RESPONSE_TIMEOUT = 20  seconds a GAHP server may take to answer a line
    GRIDMANAGER_MAX_PENDING_REQUESTS = 50  GAHP requests in flight per resource (a restart
                                    takes a change; the others a reconfig)
    BATCH_GAHP = (htgrid gahp batch)  the batch GAHP server's command line (a wrapper,
                                    more options); a reconfig: from its next start
    USE_VOMS_ATTRIBUTES = false     whether the schedd sets a job's x509UserProxyVOName,
                                    x509UserProxyFirstFQAN and x509UserProxyFQAN from the
                                    VOMS attributes of its proxy (unverified, as HTCondor)
    GRAM_VERSION_DETECTION = true   a gt2 resource asks its job manager's version and runs
                                    as gt5 when it is GRAM5's
    ALLOW_ROOT_JOBS = false         whether a job may be root's (run as root); HTCondor has
                                    no such knob and never runs one. Daemons run by root
                                    run each job as its owner (a local account); daemons
                                    run by another user run that user's jobs only

The execute node's knobs (NUM_CPUS, MEMORY, DISK, EXECUTE, START, STARTD_ATTRS,
UPDATE_INTERVAL, STARTD_NOCLAIM_SHUTDOWN, CLAIM_WORKLIFE, FILESYSTEM_DOMAIN, UID_DOMAIN,
GPU_DISCOVERY, and the policy: WANT_SUSPEND, SUSPEND, CONTINUE, PREEMPT, WANT_VACATE, KILL,
MAXJOBRETIREMENTTIME, POLLING_INTERVAL)
are read by `htgrid.startd`; a name listed in STARTD_ATTRS may be set too (its value is
a ClassAd expression). Any other name is refused, so that a typo does not pass silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from htgrid.client import pool_home
from htgrid.errors import HTGridError

if TYPE_CHECKING:
    from htgrid.queue import SystemPolicy

__all__ = [
    "CONFIG_NAME",
    "DEFAULT_LIMITS",
    "DEFAULT_TRANSFER_MB",
    "KNOBS",
    "KNOB_PREFIXES",
    "ApiLimits",
    "Backoff",
    "ConfigFile",
    "PoolError",
    "htgrid_home",
]

CONFIG_NAME: Final = "htgrid.conf"
_MIB: Final = 1 << 20


class PoolError(HTGridError):
    """The pool's configuration or home cannot be used, or a daemon of it could not start
    or stop."""


def htgrid_home(env: Mapping[str, str] | None = None) -> Path:
    """$HTGRID_HOME, or ~/.htgrid; made absolute (the client side's reading of it)."""
    return pool_home(env)


#: Every knob htgrid.conf may set, with its default as the file would write it; None where
#: the daemon that reads it computes it (SCHEDD_NAME: htgrid@<host>; TRUST_DOMAIN; the
#: execute node's NUM_CPUS, MEMORY, DISK, EXECUTE), or where unset means none. A name
#: STARTD_ATTRS lists may be set too. `ConfigFile` falls back on these defaults, and
#: `htgrid config_val` prints them.
KNOBS: Final[Mapping[str, str | None]] = {
    "PERIODIC_EXPR_INTERVAL": "60",
    "JOB_MAX_VACATE_TIME": "10",
    "START_LOCAL_UNIVERSE_LIMIT": "200",
    "QUEUE_FSYNC": "true",
    "DAEMON_LIST": "MASTER, COLLECTOR, NEGOTIATOR, SCHEDD, STARTD, GRIDMANAGER",
    "COLLECTOR_HOST": "127.0.0.1:9618",
    "NEGOTIATOR_INTERVAL": "60",
    "NEGOTIATOR_MIN_INTERVAL": "5",
    "SCHEDD_INTERVAL": "300",
    "ANNEX_UPDATE_INTERVAL": "60",
    "ANNEX_TOKEN_MAX_LIFETIME": "604800",
    "SCHEDD_NAME": None,
    "SCHEDD_ADDRESS": "127.0.0.1:0",
    "MAX_TRANSFER_INPUT_MB": "10240",
    "MAX_TRANSFER_OUTPUT_MB": "10240",
    "MAX_API_REQUEST_MB": "64",
    "API_HEADER_TIMEOUT": "20",
    "API_BODY_TIMEOUT": "60",
    "ALIVE_INTERVAL": "60",
    "MAX_CLAIM_ALIVES_MISSED": "6",
    "JOB_DEFAULT_LEASE_DURATION": "2400",  # read by `htgrid submit`
    "RECONNECT_BACKOFF_FACTOR": "2.0",
    "RECONNECT_BACKOFF_CEILING": "300",
    "MASTER_BACKOFF_CONSTANT": "1",
    "MASTER_BACKOFF_FACTOR": "2",
    "MASTER_BACKOFF_CEILING": "300",
    "MASTER_RECOVER_FACTOR": "300",
    "DEFAULT_MASTER_SHUTDOWN_SCRIPT": None,
    "TRUST_DOMAIN": None,  # read by htgrid.net.security.SecurityConfig.load
    # who may come in, read by htgrid.net.security.GatekeeperConfig.load (HTCondor-CE's)
    "CERTIFICATE_MAPFILE": None,  # the unified map file: $HTGRID_HOME/etc/mapfile
    "SCITOKENS_SERVER_AUDIENCE": None,  # the aud an issuer's token must name: COLLECTOR_HOST
    "SEC_SCITOKENS_ALLOWED_ISSUERS": None,  # unset: the issuers the map file's lines name
    "DENY_READ": "",
    "DENY_WRITE": "anonymous@*, *@unmapped, *@banned.htcondor.org",
    "DENY_NEGOTIATOR": "anonymous@*, *@unmapped, *@banned.htcondor.org",
    "DENY_ADMINISTRATOR": "anonymous@*, *@unmapped, *@banned.htcondor.org",
    "DENY_DAEMON": "anonymous@*, *@unmapped, *@banned.htcondor.org",
    "ALLOW_READ": "",  # empty: whoever the token lets in (DENY_READ aside)
    "ALLOW_WRITE": "",
    "ALLOW_NEGOTIATOR": "",
    "ALLOW_ADMINISTRATOR": "",
    "ALLOW_DAEMON": "",
    "SEC_READ_AUTHENTICATION": "REQUIRED",
    "SEC_DEFAULT_SESSION_DURATION": "3600",  # read by htgrid.net.cedar.pool_security
    "NETWORK_MAX_PENDING_CONNECTS": None,  # ... 80% of the process's descriptors
    "AUTH_SSL_SERVER_CERTFILE": None,  # ... the pool CA's etc/ca/server.crt
    "AUTH_SSL_SERVER_KEYFILE": None,  # ... and .key
    "AUTH_SSL_SERVER_CAFILE": None,  # ... the pool CA's certificate
    "AUTH_SSL_REQUIRE_CLIENT_CERTIFICATE": "false",
    "USE_SHARED_PORT": "false",  # read by htgrid.schedd and the master
    "SEC_SCITOKENS_CACHE": None,  # issuers' keys kept across restarts: $(RUN)/cache
    "SCHEDD_AUDIT_LOG": None,  # $HTGRID_HOME/log/AuditLog
    "COLLECTOR_AUDIT_LOG": None,  # none
    "MAX_SCHEDD_AUDIT_LOG": "1d",  # rotated daily (or a size in bytes), as HTCondor-CE's
    "MAX_NUM_SCHEDD_AUDIT_LOG": "90",
    "MAX_COLLECTOR_AUDIT_LOG": "1d",
    "MAX_NUM_COLLECTOR_AUDIT_LOG": "90",
    "GRIDMANAGER_JOB_PROBE_INTERVAL": "10",  # read by htgrid.grid (GridManagerConfig.KNOBS)
    "GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE": "1000",  # ... and this one
    "GRIDMANAGER_COLLECTOR_UPDATE_INTERVAL": "300",  # ... and this one
    "GRIDMANAGER_RESOURCE_PROBE_INTERVAL": "300",  # ... and these
    "GRIDMANAGER_GAHP_CALL_TIMEOUT": "300",
    "GRIDMANAGER_GAHP_RESPONSE_TIMEOUT": "20",
    "GRIDMANAGER_MAX_PENDING_REQUESTS": "50",
    "BATCH_GAHP": None,  # htgrid gahp batch, as this Python runs it
    "GRAM_VERSION_DETECTION": "true",  # read by htgrid.grid.gram: gt2 asks for GRAM5
    "ALLOW_ROOT_JOBS": "false",
    "USE_VOMS_ATTRIBUTES": "false",  # HTCondor's default
    # the execute node's (htgrid.startd)
    "NUM_CPUS": None,
    "MEMORY": None,
    "DISK": None,
    "EXECUTE": None,
    "START": "true",
    "STARTD_ATTRS": "",
    "UPDATE_INTERVAL": "300",
    "STARTD_NOCLAIM_SHUTDOWN": None,  # 0: never
    "CLAIM_WORKLIFE": "1200",  # seconds a claim takes jobs (-1: no limit; 0: one job)
    "FILESYSTEM_DOMAIN": "localhost",
    "UID_DOMAIN": "localhost",
    "GPU_DISCOVERY": "true",
    "NETWORK_INTERFACE": None,  # a node on its own: the address that reaches the collector
    "NETWORK_HOSTNAME": None,  # the node's Machine: this host's name
    # its policy on running jobs (htgrid.startd._policy): HTCondor's names and defaults
    "WANT_SUSPEND": "false",
    "SUSPEND": "false",
    "CONTINUE": "true",
    "PREEMPT": "false",
    "WANT_VACATE": "true",
    "KILL": "false",
    "MAXJOBRETIREMENTTIME": "0",
    "POLLING_INTERVAL": "5",
    "WANT_SUSPEND_VANILLA": None,
    "SUSPEND_VANILLA": None,
    "CONTINUE_VANILLA": None,
    "PREEMPT_VANILLA": None,
    "WANT_VACATE_VANILLA": None,
    "KILL_VANILLA": None,
    "MAXJOBRETIREMENTTIME_VANILLA": None,
    # the job router's (htgrid.router), HTCondor's names and defaults
    "JOB_ROUTER_NAME": "jobrouter",
    "JOB_ROUTER_ROUTE_NAMES": "",
    "JOB_ROUTER_PRE_ROUTE_TRANSFORM_NAMES": "",
    "JOB_ROUTER_POST_ROUTE_TRANSFORM_NAMES": "",
    "JOB_ROUTER_ENTRIES": "",
    "JOB_ROUTER_ENTRIES_FILE": "",
    "JOB_ROUTER_DEFAULTS": "",
    "JOB_ROUTER_SOURCE_JOB_CONSTRAINT": "",
    "JOB_ROUTER_POLLING_PERIOD": "10",
    "JOB_ROUTER_MAX_JOBS": "-1",
    "JOB_ROUTER_DEFAULT_MAX_JOBS_PER_ROUTE": "100",
    "JOB_ROUTER_DEFAULT_MAX_IDLE_JOBS_PER_ROUTE": "50",
    "CCB_ADDRESS": None,  # a node behind NAT: its broker (with PRIVATE_NETWORK_NAME: the pool's)
    "PRIVATE_NETWORK_NAME": None,  # peers of the same name connect directly, others via CCB
    "CCB_HEARTBEAT_INTERVAL": "1200",
    "JOB_ROUTER_HOOK_KEYWORD": "",
    # more collectors the schedd's ad goes to (a CE's central collector), host:port each
    "CONDOR_VIEW_HOST": "",
    # the pool's policy for every job (the schedd's periodic pass; the job router's for
    # the jobs it manages); $(NAME) in them is replaced by knob NAME's value
    "SYSTEM_PERIODIC_HOLD": "",
    "SYSTEM_PERIODIC_HOLD_REASON": "",
    "SYSTEM_PERIODIC_HOLD_SUBCODE": "",
    "SYSTEM_PERIODIC_RELEASE": "",
    "SYSTEM_PERIODIC_RELEASE_REASON": "",
    "SYSTEM_PERIODIC_RELEASE_SUBCODE": "",
    "SYSTEM_PERIODIC_REMOVE": "",
    "SYSTEM_PERIODIC_REMOVE_REASON": "",
    "SYSTEM_PERIODIC_REMOVE_SUBCODE": "",
    # a CE's (`htgrid ce up`, HTCondor-CE's names): its jobs' longest run, in minutes,
    # whether a routed job that ran once may run again, days a completed job is kept
    "ROUTED_JOB_MAX_TIME": "4320",
    "ENABLE_JOB_RETRIES": "false",
    "COMPLETED_JOB_EXPIRATION": "30",
    "CONDORCE_MAX_JOBS": "10000",
    "DEFAULT_REMOVE_REASON": "",
}
#: Knob families: any name that begins so (a route, a transform, a hook of the job
#: router; the clauses of a CE's policy, as HTCondor-CE names them).
KNOB_PREFIXES: Final = (
    "JOB_ROUTER_ROUTE_",
    "JOB_ROUTER_TRANSFORM_",
    "HOLD_CLAUSE_",
    "HOLD_REASON_",
    "REMOVE_CLAUSE_",
    "REMOVE_REASON_",
)
#: ... and any name that ends so (the job router's hooks of a keyword, HTCondor's names).
KNOB_SUFFIXES: Final = (
    "_HOOK_TRANSLATE_JOB",
    "_HOOK_UPDATE_JOB_INFO",
    "_HOOK_JOB_FINALIZE",
    "_HOOK_JOB_CLEANUP",
    "_ATTRS_TO_COPY",
)
_MACRO: Final = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)(?::([^()]*))?\)")
_LIST_SPLIT: Final = re.compile(r"[\s,]+")
_MULTI_LINE: Final = re.compile(r"([A-Za-z0-9_]+)\s*@=\s*(\S+)\Z")
DEFAULT_TRANSFER_MB: Final = 10240  # MAX_TRANSFER_INPUT_MB and _OUTPUT_MB


@dataclass(frozen=True, slots=True)
class ApiLimits:
    """How much of a request a daemon reads, and how long it waits for it (htgrid.net)."""

    max_request_mb: int = 64  # MAX_API_REQUEST_MB
    header_timeout: float = 20.0  # API_HEADER_TIMEOUT
    body_timeout: float = 60.0  # API_BODY_TIMEOUT

    @property
    def max_body(self) -> int:
        return self.max_request_mb * _MIB


DEFAULT_LIMITS: Final = ApiLimits()


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
            raise PoolError(f"{path}: cannot read: {exc.strerror}") from exc
        return cls(path, _parse(text, path))

    def has(self, key: str) -> bool:
        return key in self.values

    def _error(self, key: str, problem: str) -> PoolError:
        return PoolError(f"{self.path}:{self.values[key][1]}: {key} {problem}")

    def text(self, key: str, default: str | None = None) -> str:
        """The value as written (the default when unset or empty: `default`, else the
        knob's in `KNOBS`)."""
        value = self.values.get(key, ("", 0))[0]
        return value or (default if default is not None else _default(key))

    def number(self, key: str, default: float | None = None, *, zero: bool = False) -> float:
        """A positive number (or zero, when `zero` allows it)."""
        if key not in self.values:
            return default if default is not None else float(_default(key))
        text = self.values[key][0]
        try:
            number = float(text)
        except ValueError:
            raise self._error(key, f"must be a number, not {text!r}") from None
        if number < 0 or (number == 0 and not zero):
            raise self._error(key, "must be positive" if not zero else "must not be negative")
        return number

    def integer(self, key: str, default: int | None = None, *, zero: bool = False) -> int:
        """A positive whole number (or zero, when `zero` allows it)."""
        number = self.number(key, default, zero=zero)
        if number != int(number):
            raise self._error(key, f"must be a whole number, not {self.values[key][0]!r}")
        return int(number)

    def megabytes(self, key: str) -> int | None:
        """A size in MiB; a negative one (HTCondor writes -1) is no limit (None)."""
        text = self.values[key][0] if key in self.values else _default(key)
        try:
            number = int(text)
        except ValueError:
            problem = f"must be a whole number of MiB (-1: no limit), not {text!r}"
            raise self._error(key, problem) from None
        return None if number < 0 else number

    def flag(self, key: str, default: bool | None = None) -> bool:
        if key not in self.values and default is not None:
            return default
        text = self.values[key][0] if key in self.values else _default(key)
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise self._error(key, f"must be true or false, not {text!r}")

    def api_limits(self) -> ApiLimits:
        """MAX_API_REQUEST_MB, API_HEADER_TIMEOUT, API_BODY_TIMEOUT: every daemon's API."""
        return ApiLimits(
            max_request_mb=self.integer("MAX_API_REQUEST_MB"),
            header_timeout=self.number("API_HEADER_TIMEOUT"),
            body_timeout=self.number("API_BODY_TIMEOUT"),
        )

    def expanded(self, key: str) -> str:
        """The value with each `$(NAME)` (or `$(NAME:default)`) replaced by knob NAME's
        expanded value, as HTCondor's configuration does ("" for a name without one).
        A knob that refers to itself, directly or not, is refused."""
        return self._expand(key, ())

    def _expand(self, key: str, seen: tuple[str, ...]) -> str:
        if key in seen:
            chain = " -> ".join((*seen, key))
            raise PoolError(f"{self.path}: {seen[0]} refers to itself through {chain}")
        text = self.values[key][0] if key in self.values else (KNOBS.get(key) or "")

        def value(match: re.Match[str]) -> str:
            name = match.group(1).upper()
            if name in self.values or KNOBS.get(name):
                return self._expand(name, (*seen, key))
            return match.group(2) or ""

        return _MACRO.sub(value, text)

    def system_policy(self) -> SystemPolicy:
        """SYSTEM_PERIODIC_HOLD, _RELEASE, _REMOVE (and their _REASON, _SUBCODE), macros
        expanded; one that is not an expression is an error naming it and its line."""
        # Here, not at the top: most readers of the file need no ClassAd machinery.
        from htgrid.classad import ExprTree
        from htgrid.queue import SystemPolicy

        for key in self.values:
            if key.startswith("SYSTEM_PERIODIC_") and (text := self.expanded(key).strip()):
                try:
                    ExprTree(text)
                except HTGridError as err:
                    raise self._error(key, f"is not a ClassAd expression: {err}") from None
        return SystemPolicy.parse(self.expanded)

    def address(self, key: str) -> tuple[str, int]:
        """A `host:port` (port 0: any free port)."""
        text = self.values[key][0] if key in self.values else _default(key)
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise self._error(key, f"must be host:port, not {text!r}")
        return host.strip("[]"), int(port)

    def names(self, key: str) -> tuple[str, ...]:
        """A list of names, separated by commas or spaces."""
        text = self.values[key][0] if key in self.values else _default(key)
        return tuple(n for n in _LIST_SPLIT.split(text) if n)


def _default(key: str) -> str:
    """The default of knob `key` in `KNOBS`; the caller names one for a knob without."""
    default = KNOBS.get(key)
    if default is None:
        raise KeyError(f"{key} has no default in htgrid.pool.KNOBS: the caller gives one")
    return default


def _parse(text: str, path: Path) -> dict[str, tuple[str, int]]:
    values: dict[str, tuple[str, int]] = {}
    lines = iter(enumerate(text.splitlines(), 1))
    for number, raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        multi = _MULTI_LINE.match(line)
        if multi is not None:
            # HTCondor's `NAME @=TAG` ... `@TAG`: the lines between, as they are.
            key, tag = multi.group(1).upper(), multi.group(2)
            body = []
            for _, inner in lines:
                if inner.strip() == f"@{tag}":
                    break
                body.append(inner)
            else:
                raise PoolError(f"{path}:{number}: {key} @={tag} has no closing @{tag} line")
            values[key] = ("\n".join(body), number)
            continue
        name, eq, value = line.partition("=")
        key = name.strip().upper()
        if not eq or not key.replace("_", "").isalnum():
            raise PoolError(f"{path}:{number}: expected NAME = value")
        values[key] = (value.strip(), number)
    custom = {n.upper() for n in _LIST_SPLIT.split(values.get("STARTD_ATTRS", ("", 0))[0]) if n}
    for key, (_, number) in values.items():
        if (
            key not in KNOBS
            and key not in custom
            and not key.startswith(KNOB_PREFIXES)
            and not key.endswith(KNOB_SUFFIXES)
        ):
            raise PoolError(
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
