"""Where a pool keeps its state: the layout of its home, $HTGRID_HOME (default ~/.htgrid).

    $HTGRID_HOME
    ├── htgrid.conf          optional, HTCondor style: NAME = value, # comments (_config)
    ├── etc/                 the pool's keys, CA and tokens (htgrid.net.security):
    │   ├── passwords.d/     token signing keys (0600, directory 0700)  SEC_PASSWORD_DIRECTORY
    │   ├── tokens.d/        tokens the pool's daemons present          SEC_TOKEN_SYSTEM_DIRECTORY
    │   ├── tokens.revoked   revoked token ids (jti), one a line
    │   ├── mapfile          IDTOKENS lines mapping subjects to users   CERTIFICATE_MAPFILE
    │   └── ca/              the pool CA (ca.crt) and the daemons' certificate (server.crt;
    │       │                keys 0600)
    │       └── trusted.d/   other pools' CA certificates, for HTCondor-C between pools
    ├── spool/queue.db       the job queue (SQLite)
    ├── spool/userlog.seq    the last change written to user event logs
    ├── spool/userlog.pending  the batch of events being written, and its logs' sizes
    ├── spool/gridmanager/   the grid manager's state: its place in the change feed, its doorbell
    ├── spool/jobrouter/     the job router's lock and doorbell
    ├── spool/sandboxes/     output kept from evicted jobs (when_to_transfer_output ON_EXIT_OR_EVICT)
    ├── spool/<c>/<p>/       the sandbox of a job whose input was spooled (HTCondor-C)
    ├── execute/             the execute node's job sandboxes (EXECUTE)
    ├── log/                 SchedLog (the schedd, the master, the negotiator), CollectorLog,
    │                        StartLog, GridmanagerLog
    └── run/                 schedd.sock, startd.sock (0600), pid and lock files,
                             collector.address (the collector's host:port), schedd.url

    ~/.htgrid/tokens.d/      a user's own tokens (htgrid.client)        SEC_TOKEN_DIRECTORY

Nothing of the daemons' is readable by another local user, whatever the umask they were
started with (`make_dirs`; the daemons' own umask is 077). Run by an ordinary user (a
personal pool) every directory is 0700 and the socket 0600: that user alone uses the
pool. Run by root (a pool of the host's users, whose jobs run as their owners), the
home, spool/, execute/, run/ and etc/ are 0711: users pass through to the socket (0666;
the kernel names each caller, and each may act on their own jobs only), to their jobs'
directories (theirs, 0700) and to the CA certificates their GAHP servers trust
(etc/ca/*.crt), and list nothing; log/, etc/passwords.d and etc/tokens.d stay 0700.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HomeLayout", "trusted_ca_files"]


@dataclass(frozen=True, slots=True)
class HomeLayout:
    """The paths under a pool's home. Each daemon's settings extend it (ScheddConfig,
    StartdConfig, SecurityConfig): every path of the pool is named here, once."""

    home: Path

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
    def etc(self) -> Path:
        return self.home / "etc"

    # ---- the schedd's (and the master's: one process)

    @property
    def schedd_socket(self) -> Path:
        return self.run_dir / "schedd.sock"

    @property
    def schedd_pid_file(self) -> Path:
        return self.run_dir / "schedd.pid"

    @property
    def schedd_lock_file(self) -> Path:
        return self.run_dir / "schedd.lock"

    @property
    def schedd_log(self) -> Path:
        return self.log_dir / "SchedLog"

    @property
    def schedd_url_file(self) -> Path:
        """Where the schedd's API URL (`https://host:port`) is written once it listens."""
        return self.run_dir / "schedd.url"

    @property
    def userlog_seq_file(self) -> Path:
        return self.spool / "userlog.seq"

    def job_spool(self, cluster: int, proc: int) -> Path:
        """The spool directory of a job whose input is spooled (its Iwd here)."""
        return self.spool / str(cluster) / str(proc)

    @property
    def sandbox_spool(self) -> Path:
        """Output kept from evicted jobs, one directory per job."""
        return self.spool / "sandboxes"

    @property
    def annex_dir(self) -> Path:
        """The annexes this pool made (`htgrid annex create`), one record each, whose
        ads the master keeps current (ANNEX_UPDATE_INTERVAL)."""
        return self.spool / "annexes"

    @property
    def annex_log(self) -> Path:
        return self.log_dir / "AnnexLog"

    # ---- the other daemons'

    @property
    def collector_address_file(self) -> Path:
        """Where the running collector's host:port is written (COLLECTOR_ADDRESS_FILE)."""
        return self.run_dir / "collector.address"

    @property
    def collector_log(self) -> Path:
        return self.log_dir / "CollectorLog"

    @property
    def startd_socket(self) -> Path:
        return self.run_dir / "startd.sock"

    @property
    def startd_lock_file(self) -> Path:
        return self.run_dir / "startd.lock"

    @property
    def startd_cert(self) -> Path:
        """The certificate a node on its own presents over TLS (made at each start)."""
        return self.run_dir / "startd.crt"

    @property
    def startd_key(self) -> Path:
        return self.run_dir / "startd.key"

    @property
    def startd_log(self) -> Path:
        return self.log_dir / "StartLog"

    @property
    def default_execute_dir(self) -> Path:
        """EXECUTE's default: where the execute node makes its jobs' sandboxes."""
        return self.home / "execute"

    @property
    def gridmanager_dir(self) -> Path:
        return self.spool / "gridmanager"

    @property
    def gridmanager_feed_file(self) -> Path:
        """Where the grid manager keeps its position in the change feed."""
        return self.gridmanager_dir / "feed.seq"

    @property
    def gridmanager_doorbell(self) -> Path:
        """The grid manager's doorbell, rung after each change to the queue."""
        return self.gridmanager_dir / "wake"

    @property
    def jobrouter_dir(self) -> Path:
        return self.spool / "jobrouter"

    @property
    def jobrouter_feed_file(self) -> Path:
        """Where the job router keeps its position in the change feed."""
        return self.jobrouter_dir / "feed.seq"

    @property
    def jobrouter_doorbell(self) -> Path:
        """The job router's doorbell, rung after each change to the queue."""
        return self.jobrouter_dir / "wake"

    @property
    def jobrouter_log(self) -> Path:
        return self.log_dir / "JobRouterLog"

    @property
    def gridmanager_log(self) -> Path:
        return self.log_dir / "GridmanagerLog"

    # ---- the security files (htgrid.net.security reads and makes them)

    @property
    def password_dir(self) -> Path:
        return self.etc / "passwords.d"

    @property
    def system_token_dir(self) -> Path:
        return self.etc / "tokens.d"

    @property
    def revocation_file(self) -> Path:
        return self.etc / "tokens.revoked"

    @property
    def mapfile(self) -> Path:
        return self.etc / "mapfile"

    @property
    def ca_dir(self) -> Path:
        return self.etc / "ca"

    @property
    def trusted_ca_dir(self) -> Path:
        return self.ca_dir / "trusted.d"

    # ---- making it

    @property
    def shared(self) -> bool:
        """Whether the pool is its host's users' (its daemons run as root)."""
        return os.geteuid() == 0

    def make_dirs(self) -> None:
        """Create the directories, and give them (and those there already) their modes:
        0700, or 0711 for those the users of a pool run by root pass through."""
        passable = 0o711 if self.shared else 0o700
        for path, mode in (
            (self.home, passable),
            # Users' GAHP servers read the pool's CA certificates (etc/ca, 0755); the keys
            # and tokens are in 0700 directories (passwords.d, tokens.d) or 0600 files.
            (self.etc, passable),
            (self.spool, passable),
            (self.log_dir, 0o700),
            (self.run_dir, passable),
        ):
            path.mkdir(parents=True, exist_ok=True, mode=mode)
            os.chmod(path, mode)  # mkdir's mode is cut by the umask; an old one is wider
        # What an older daemon, or one started with a wide umask, left readable in the
        # directories users pass through (log/ hides what it holds).
        private = [self.password_dir, self.system_token_dir, *self.ca_dir.glob("*.key")]
        private += [self.gridmanager_dir, self.jobrouter_dir, self.spool / "transfer"]
        private += [self.spool / name for name in ("queue.db", "queue.db-wal", "queue.db-shm")]
        private.append(self.userlog_seq_file)
        with contextlib.suppress(FileNotFoundError), os.scandir(self.run_dir) as entries:
            private += [Path(e.path) for e in entries if e.name != self.schedd_socket.name]
        for path in private:
            _narrow(path, 0o700 if path.is_dir() else 0o600)


def trusted_ca_files(layout: HomeLayout) -> list[Path]:
    """The pool's own CA certificate and those of other pools in ca/trusted.d (*.crt, *.pem)."""
    own = [layout.ca_dir / "ca.crt"] if (layout.ca_dir / "ca.crt").exists() else []
    try:
        others = sorted(layout.trusted_ca_dir.iterdir())
    except FileNotFoundError:
        others = []
    return own + [p for p in others if p.suffix in {".crt", ".pem"} and p.is_file()]


def _narrow(path: Path, mode: int) -> None:
    """Take from `path` (not a link) the permissions `mode` does not give, if any."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & ~mode:
        os.chmod(path, stat.S_IMODE(st.st_mode) & mode)
