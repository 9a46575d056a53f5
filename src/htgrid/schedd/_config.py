"""Where the personal pool keeps its state, and the few knobs of its daemon.

    $HTGRID_HOME (default ~/.htgrid)
    ├── htgrid.conf          optional, HTCondor style: NAME = value, # comments
    ├── spool/queue.db       the job queue (SQLite)
    ├── spool/userlog.seq    the last change written to user event logs
    ├── log/SchedLog         the daemon's log
    └── run/                 mode 0700: schedd.sock (0600), schedd.pid, schedd.lock

Knobs (htgrid.conf), named as HTCondor names the closest setting:

    PERIODIC_EXPR_INTERVAL = 60     seconds between evaluations of periodic policies
    JOB_MAX_VACATE_TIME = 10        seconds between a job's KillSig and SIGKILL
    START_LOCAL_UNIVERSE_LIMIT = 200  local universe jobs running at once
    QUEUE_FSYNC = true              sync each queue commit to disk
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid.errors import HTGridError

__all__ = ["ScheddConfig", "ScheddError", "htgrid_home"]

CONFIG_NAME: Final = "htgrid.conf"


class ScheddError(HTGridError):
    """The daemon could not start, stop or be configured."""


def htgrid_home(env: Mapping[str, str] | None = None) -> Path:
    """$HTGRID_HOME, or ~/.htgrid; made absolute."""
    environ = os.environ if env is None else env
    home = environ.get("HTGRID_HOME") or str(Path("~/.htgrid").expanduser())
    return Path(home).expanduser().absolute()


@dataclass(frozen=True, slots=True)
class ScheddConfig:
    """The daemon's settings and the paths under its home."""

    home: Path
    periodic_interval: float = 60.0
    kill_grace: float = 10.0
    max_local_jobs: int = 200
    fsync: bool = True

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
        path = home / CONFIG_NAME
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(home)
        except OSError as exc:
            raise ScheddError(f"{path}: cannot read: {exc.strerror}") from exc
        values = _parse(text, path)
        return cls(
            home,
            periodic_interval=_number(values, "PERIODIC_EXPR_INTERVAL", 60.0, path),
            kill_grace=_number(values, "JOB_MAX_VACATE_TIME", 10.0, path),
            max_local_jobs=int(_number(values, "START_LOCAL_UNIVERSE_LIMIT", 200, path)),
            fsync=_flag(values, "QUEUE_FSYNC", True, path),
        )


_KNOWN: Final = {
    "PERIODIC_EXPR_INTERVAL",
    "JOB_MAX_VACATE_TIME",
    "START_LOCAL_UNIVERSE_LIMIT",
    "QUEUE_FSYNC",
}


def _parse(text: str, path: Path) -> dict[str, tuple[str, int]]:
    values: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        key = name.strip().upper()
        if not eq or key not in _KNOWN:
            known = ", ".join(sorted(_KNOWN))
            raise ScheddError(f"{path}:{number}: expected NAME = value with NAME one of {known}")
        values[key] = (value.strip(), number)
    return values


def _number(values: dict[str, tuple[str, int]], key: str, default: float, path: Path) -> float:
    if key not in values:
        return default
    text, line = values[key]
    try:
        number = float(text)
    except ValueError:
        raise ScheddError(f"{path}:{line}: {key} must be a number, not {text!r}") from None
    if number <= 0:
        raise ScheddError(f"{path}:{line}: {key} must be positive")
    return number


def _flag(values: dict[str, tuple[str, int]], key: str, default: bool, path: Path) -> bool:
    if key not in values:
        return default
    text, line = values[key]
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ScheddError(f"{path}:{line}: {key} must be true or false, not {text!r}")
