"""`htgrid config_val`: condor_config_val, the pool's knobs with their defaults applied.

    $ htgrid config_val COLLECTOR_HOST TRUST_DOMAIN
    127.0.0.1:41663
    site.example
    $ htgrid config_val TRUST_DOMAIN_CAFILE
    /home/alice/.htgrid/etc/ca/ca.crt
    $ htgrid config_val NO_SUCH_KNOB
    Not defined: NO_SUCH_KNOB
    $ htgrid config_val -dump          # every knob, NAME = value, by name

A knob set in $HTGRID_HOME/htgrid.conf prints as written there; one not set prints its
default, as the daemons would use it (`htgrid.pool.KNOBS`, or what its daemon computes). Some values are the pool's, as HTCondor scripts
ask for them: COLLECTOR_HOST is the address the collector listens on while the pool
runs (port 0 in the file means "any free port"), TRUST_DOMAIN is the pool's (the file,
else $HTGRID_TRUST_DOMAIN, else the host name), and the security files carry HTCondor's
names: TRUST_DOMAIN_CAFILE (the pool CA, which other pools trust), TRUST_DOMAIN_CAKEY,
AUTH_SSL_SERVER_CERTFILE/KEYFILE (the daemons' certificate), AUTH_SSL_CLIENT_CADIR
(other pools' CAs), SEC_TOKEN_DIRECTORY, SEC_TOKEN_SYSTEM_DIRECTORY,
SEC_PASSWORD_DIRECTORY, CERTIFICATE_MAPFILE.

Exit status: 0 when every knob asked for is defined, 1 when one is not ("Not defined:
NAME" on stderr, as condor_config_val), 2 for a broken htgrid.conf.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from htgrid.cli._common import EXIT_NO, EXIT_OK
from htgrid.errors import UsageError
from htgrid.net import DaemonUnavailable, ScheddClient
from htgrid.pool import KNOBS, ConfigFile, htgrid_home
from htgrid.schedd import ScheddConfig

__all__ = ["Knob", "pool_knobs", "register"]


@dataclass(frozen=True, slots=True)
class Knob:
    """One knob's value and where it comes from (`-verbose`)."""

    name: str
    value: str | None  # None: not defined (no setting and no default)
    source: str  # "<file>, line N", "default" or what computed it


def register(commands: Any) -> None:
    """Add `config_val` to the top-level parser."""
    cmd = commands.add_parser(
        "config_val",
        help="print the pool's configuration knobs (condor_config_val)",
        description=(
            "Print the values of knobs of the pool in $HTGRID_HOME: as set in its "
            "htgrid.conf, else their defaults; COLLECTOR_HOST is where the running "
            "collector listens."
        ),
    )
    cmd.add_argument("knobs", nargs="*", metavar="KNOB", help="knob names (any case)")
    cmd.add_argument(
        "-dump",
        "--dump",
        action="store_true",
        help="list every defined knob as NAME = value (only those whose names contain a "
        "KNOB argument, when given)",
    )
    cmd.add_argument(
        "-v",
        "-verbose",
        "--verbose",
        dest="verbose",
        action="store_true",
        help="also say where each value comes from",
    )
    cmd.set_defaults(handler=_config_val)


def _host_memory_mb() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))


def _free_disk_kb(path: Path) -> int:
    # EXECUTE is made by the execute node when it starts: measure the nearest existing dir.
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free // 1024


def _running_collector(home: Path) -> str | None:
    """Where the pool's collector listens, from its daemon; None when it does not run."""
    socket = ScheddConfig(home).socket
    if not socket.exists():
        return None
    try:
        with ScheddClient(socket, timeout=5.0) as schedd:
            health = schedd.health()
    except DaemonUnavailable:
        return None
    if "COLLECTOR" not in (health.get("daemons") or ()):
        return None
    collector = health.get("collector")
    return collector if isinstance(collector, str) else None


def pool_knobs(home: Path, *, live: bool = True) -> dict[str, Knob]:
    """Every knob of the pool in `home` with a value, and the defined-nowhere ones as
    None; `live` asks a running daemon where its collector listens."""
    # Imported here for start-up: building the parser (`htgrid --help`) loads no daemon.
    from htgrid.grid import GridManagerConfig
    from htgrid.net.security import SERVER_CERT, SecurityConfig, user_token_dir
    from htgrid.startd import StartdConfig

    # Loading checks the whole file first, so a bad setting is reported as `up` would.
    schedd = ScheddConfig.load(home)
    startd = StartdConfig.load(home)
    GridManagerConfig().with_knobs(home)
    security = SecurityConfig.load(home)
    conf = ConfigFile.read(home)

    # The defaults the daemons compute; the others are KNOBS' (the pool's table).
    computed: dict[str, Callable[[], str | None]] = {
        "SCHEDD_NAME": lambda: schedd.schedd_name,
        "TRUST_DOMAIN": lambda: security.trust_domain,
        "NUM_CPUS": lambda: str(len(os.sched_getaffinity(0)) or os.cpu_count() or 1),
        "MEMORY": lambda: str(_host_memory_mb()),
        "DISK": lambda: str(_free_disk_kb(startd.execute_dir)),
        "EXECUTE": lambda: str(startd.execute_dir),
        "NETWORK_HOSTNAME": socket.gethostname,
        "SCITOKENS_SERVER_AUDIENCE": lambda: conf.text("COLLECTOR_HOST"),
        "SCHEDD_AUDIT_LOG": lambda: str(schedd.log_dir / "AuditLog"),
        "SEC_SCITOKENS_CACHE": lambda: str(schedd.run_dir / "cache"),
    }
    # Where things are: not settable in htgrid.conf, named as HTCondor names them.
    paths: Mapping[str, Path] = {
        "LOCAL_DIR": home,
        "LOG": schedd.log_dir,
        "SPOOL": schedd.spool,
        "RUN": schedd.run_dir,
        "COLLECTOR_ADDRESS_FILE": schedd.collector_address_file,
        "SCHEDD_ADDRESS_FILE": schedd.url_file,
        "TRUST_DOMAIN_CAFILE": security.ca_dir / "ca.crt",
        "TRUST_DOMAIN_CAKEY": security.ca_dir / "ca.key",
        "AUTH_SSL_SERVER_CERTFILE": security.ca_dir / f"{SERVER_CERT}.crt",
        "AUTH_SSL_SERVER_KEYFILE": security.ca_dir / f"{SERVER_CERT}.key",
        "AUTH_SSL_CLIENT_CAFILE": security.ca_dir / "ca.crt",
        "AUTH_SSL_CLIENT_CADIR": security.trusted_ca_dir,
        "SEC_PASSWORD_DIRECTORY": security.password_dir,
        "SEC_TOKEN_SYSTEM_DIRECTORY": security.system_token_dir,
        "SEC_TOKEN_DIRECTORY": user_token_dir(),
        "CERTIFICATE_MAPFILE": security.mapfile,
    }

    knobs: dict[str, Knob] = {}
    for name, default in KNOBS.items():
        if conf.has(name):
            knobs[name] = Knob(
                name, conf.text(name, ""), f"{conf.path}, line {conf.values[name][1]}"
            )
        else:
            value = computed[name]() if name in computed else default
            knobs[name] = Knob(name, value, "default")
    for name, (text, line) in conf.values.items():  # STARTD_ATTRS' own names
        knobs.setdefault(name, Knob(name, text, f"{conf.path}, line {line}"))
    for name, path in paths.items():
        if not conf.has(name):  # CERTIFICATE_MAPFILE may be set
            knobs[name] = Knob(name, str(path), "the pool's layout")
    if not conf.has("TRUST_DOMAIN"):
        from_env = os.environ.get("HTGRID_TRUST_DOMAIN")
        where = "$HTGRID_TRUST_DOMAIN" if from_env else "the host name"
        knobs["TRUST_DOMAIN"] = Knob("TRUST_DOMAIN", security.trust_domain, where)
    if live:
        listening = _running_collector(home)
        if listening is not None:
            knobs["COLLECTOR_HOST"] = Knob("COLLECTOR_HOST", listening, "the running collector")
    return knobs


def _config_val(args: argparse.Namespace) -> int:
    if not args.knobs and not args.dump:
        raise UsageError("config_val: name a KNOB (or -dump to list them all)")
    home = htgrid_home()
    wanted = [name.upper() for name in args.knobs]
    needs_collector = args.dump or "COLLECTOR_HOST" in wanted
    knobs = pool_knobs(home, live=needs_collector)
    if args.dump:
        print(f"# Configuration of the pool in {home}")
        for name in sorted(knobs):
            knob = knobs[name]
            if knob.value is None or (wanted and not any(w in name for w in wanted)):
                continue
            print(f"{name} = {knob.value}")
            if args.verbose:
                print(f" # at: {knob.source}")
        return EXIT_OK
    status = EXIT_OK
    for name in wanted:
        found = knobs.get(name)
        if found is None or found.value is None:
            print(f"Not defined: {name}", file=sys.stderr)
            status = EXIT_NO
            continue
        print(f"{name} = {found.value}" if args.verbose else found.value)
        if args.verbose:
            print(f" # at: {found.source}")
    return status
