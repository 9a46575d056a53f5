"""A pool's security settings: the trust domain and the few settings of token checking.

Where its files are (etc/passwords.d, tokens.d, tokens.revoked, mapfile, ca/, and the
users' ~/.htgrid/tokens.d) is the pool's layout, `htgrid.pool.HomeLayout`, which
`SecurityConfig` extends.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Generic, TypeVar

# Where tokens live and how messages quote a value: the client side's, shared.
from htgrid.client import pool_home, shown, user_token_dir
from htgrid.net.security._errors import SecurityError
from htgrid.pool import ConfigFile, HomeLayout

__all__ = [
    "DEFAULT_ADMINS",
    "SecurityConfig",
    "Watched",
    "ensure_private_dir",
    "pool_home",
    "shown",
    "user_token_dir",
    "write_private",
]

DEFAULT_ADMINS: Final = frozenset({"root", "condor"})  # QUEUE_SUPER_USERS' default
ENV_TRUST_DOMAIN: Final = "HTGRID_TRUST_DOMAIN"
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SecurityConfig(HomeLayout):
    """A pool's security settings, and the paths under its home.

    `trust_domain` is the `iss` of the pool's tokens (HTCondor's TRUST_DOMAIN): tokens
    naming another are refused, and clients pick the token whose issuer it is.
    """

    trust_domain: str
    admin_users: frozenset[str] = DEFAULT_ADMINS
    leeway: float = 30.0  # seconds of clock skew forgiven on exp, nbf and iat
    revocation_expr: str | None = None  # SEC_TOKEN_REVOCATION_EXPR, over the claims

    def __post_init__(self) -> None:
        if not self.trust_domain or any(c in self.trust_domain for c in ", \t\n"):
            # HTCondor's rule: the issuer is a word, so "issuer,subject" maps cleanly.
            raise SecurityError(
                f"the trust domain {self.trust_domain!r} must be non-empty, "
                "without spaces or commas"
            )

    @classmethod
    def load(cls, home: Path | None = None, env: Mapping[str, str] | None = None) -> SecurityConfig:
        """The settings of `home` ($HTGRID_HOME). The trust domain is TRUST_DOMAIN in the
        pool's htgrid.conf, else $HTGRID_TRUST_DOMAIN, else this host's name.

        The pool's file wins over the variable: the trust domain belongs to the pool (its
        daemons, its tokens), while a variable is inherited by every process of a
        session, so two pools on one host could not otherwise have their own.
        """
        environ = os.environ if env is None else env
        where = home if home is not None else pool_home(environ)
        domain = _configured_domain(where) or environ.get(ENV_TRUST_DOMAIN) or socket.gethostname()
        return cls(where, domain)


def _configured_domain(home: Path) -> str:
    """TRUST_DOMAIN of `home`'s htgrid.conf ("" when unset)."""
    # Read with the pool's own parser, so a broken file is reported as the daemons do.
    return ConfigFile.read(home).text("TRUST_DOMAIN", "")


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) if missing, readable by its owner only; an existing
    directory keeps the mode its owner gave it."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)  # mkdir's mode is subject to the umask


def write_private(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace `path` atomically with `data`, created with `mode` (never wider first)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class Watched(Generic[_T]):
    """A file's parsed contents, parsed again when the file changes (or `empty` if absent).

    The daemons read the revocation list and map file this way: a stat per request,
    a parse only after an edit, so `htgrid token revoke` takes effect at once.
    """

    def __init__(self, path: Path, parse: Callable[[Path], _T], empty: _T) -> None:
        self.path = path
        self._parse = parse
        self._empty = empty
        self._signature: tuple[int, int, int, int] | None = None
        self._value = empty

    def get(self) -> _T:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._signature, self._value = None, self._empty
            return self._empty
        signature = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if signature != self._signature:
            self._value = self._parse(self.path)
            self._signature = signature
        return self._value
