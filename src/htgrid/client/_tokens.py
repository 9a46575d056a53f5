"""Tokens kept in files, and which one a client presents to a server.

A token file holds one token a line (blank lines and `#` comments skipped), as in
HTCondor's token directories. A client looks, in order, at $HTGRID_TOKEN, the user's
~/.htgrid/tokens.d and the pool's $HTGRID_HOME/etc/tokens.d (files in name order) and
presents the first unexpired token whose issuer is the server's trust domain, as
HTCondor's SEC_TOKEN_DIRECTORY search does: a token never goes to a server of another
pool, which could replay it. The claims are read, not verified: only the server can,
and it says so with a 401.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from htgrid.client._jwt import TOKEN_ALGORITHMS, NotAToken, take_apart

__all__ = [
    "ENV_TOKEN",
    "StoredToken",
    "TokenFileProblem",
    "TokenSource",
    "find_token",
    "pool_home",
    "read_token_file",
    "scan_tokens",
    "user_token_dir",
]

ENV_TOKEN: Final = "HTGRID_TOKEN"


def pool_home(env: Mapping[str, str] | None = None) -> Path:
    """$HTGRID_HOME, or ~/.htgrid; made absolute."""
    environ = os.environ if env is None else env
    home = environ.get("HTGRID_HOME") or str(Path("~/.htgrid").expanduser())
    return Path(home).expanduser().absolute()


def user_token_dir() -> Path:
    """The user's token directory, ~/.htgrid/tokens.d (HTCondor's ~/.condor/tokens.d)."""
    return Path("~/.htgrid/tokens.d").expanduser()


@dataclass(frozen=True, slots=True)
class StoredToken:
    """A token read from a file (or the environment); its claims are not verified."""

    path: Path | None  # None: from $HTGRID_TOKEN
    line: int
    token: str = field(repr=False)  # never in a repr, a log line or a traceback
    header: Mapping[str, Any]
    claims: Mapping[str, Any]

    @classmethod
    def read(cls, token: str, path: Path | None = None, line: int = 1) -> StoredToken:
        """Take `token` apart (NotAToken when it is not one): the pool's, or an issuer's
        (a SciToken, presented as a job's `scitokens_file` says)."""
        header, claims, _, _ = take_apart(token, TOKEN_ALGORITHMS)
        return cls(path, line, token, header, claims)

    @property
    def issuer(self) -> str | None:
        iss = self.claims.get("iss")
        return iss if isinstance(iss, str) else None

    @property
    def token_id(self) -> str | None:
        jti = self.claims.get("jti")
        return jti if isinstance(jti, str) else None

    @property
    def expires(self) -> float | None:
        exp = self.claims.get("exp")
        if isinstance(exp, bool) or not isinstance(exp, int | float):
            return None
        try:
            return float(exp)
        except OverflowError:
            return None  # the server will refuse it with the reason

    def usable_for(self, issuer: str, now: float) -> bool:
        """Whether to present this token to a server of `issuer` at time `now`."""
        return self.issuer == issuer and (self.expires is None or self.expires > now)


@dataclass(frozen=True, slots=True)
class TokenFileProblem:
    """A line of a token file that holds no token."""

    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def read_token_file(path: Path) -> tuple[list[StoredToken], list[TokenFileProblem]]:
    """The tokens in a file, and the lines that are not tokens."""
    tokens: list[StoredToken] = []
    problems: list[TokenFileProblem] = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return [], [TokenFileProblem(path, 0, f"cannot read: {reason}")]
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            tokens.append(StoredToken.read(line, path, number))
        except NotAToken as exc:
            problems.append(TokenFileProblem(path, number, f"not a token: {exc}"))
    return tokens, problems


def _files(directory: Path) -> list[Path]:
    try:
        entries = sorted(directory.iterdir())
    except OSError:  # missing, not a directory, not ours to read: no tokens there
        return []
    # Dot files are editors' and writers' temporaries, not tokens.
    return [p for p in entries if not p.name.startswith(".") and p.is_file()]


def scan_tokens(dirs: Iterable[Path]) -> tuple[list[StoredToken], list[TokenFileProblem]]:
    """Every token in the files of `dirs` (in name order), and the lines that are not."""
    tokens: list[StoredToken] = []
    problems: list[TokenFileProblem] = []
    for directory in dirs:
        for path in _files(directory):
            found, bad = read_token_file(path)
            tokens += found
            problems += bad
    return tokens, problems


def find_token(
    issuer: str,
    *,
    dirs: Iterable[Path] | None = None,
    env: Mapping[str, str] | None = None,
    now: float | None = None,
) -> str | None:
    """The token to present to a server whose trust domain is `issuer`, if any.

    `dirs` defaults to the user's token directory then $HTGRID_HOME/etc/tokens.d; `env`
    (os.environ by default; {} to leave $HTGRID_TOKEN out) is looked at first.
    """
    environ = os.environ if env is None else env
    at = time.time() if now is None else now
    explicit = environ.get(ENV_TOKEN, "").strip()
    if explicit:
        try:
            if StoredToken.read(explicit).usable_for(issuer, at):
                return explicit
        except NotAToken:
            pass  # a stale variable should not hide good token files
    if dirs is None:
        dirs = (user_token_dir(), pool_home(environ) / "etc" / "tokens.d")
    for directory in dirs:
        for path in _files(directory):
            for stored in read_token_file(path)[0]:
                if stored.usable_for(issuer, at):
                    return stored.token
    return None


class TokenSource:
    """A client's tokens as a GAHP server's options give them: a token file, presented
    whatever the server and read afresh each time asked (it may be renewed in place),
    or else the token directories, searched by the server's trust domain ($HTGRID_TOKEN
    is not looked at: the grid manager names what its GAHP presents)."""

    def __init__(
        self,
        token_file: Path | None = None,
        token_dirs: Sequence[Path] = (),
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.token_file = token_file
        self.token_dirs = tuple(token_dirs)
        self._clock = clock

    def fixed(self) -> str | None:
        """The first token of the token file, read now (None without one)."""
        if self.token_file is None:
            return None
        tokens, _ = read_token_file(self.token_file)
        return tokens[0].token if tokens else None  # else the server's 401 says what is amiss

    def for_issuer(self, issuer: str) -> str | None:
        """The first unexpired token issued by `issuer` in the token directories."""
        return find_token(issuer, dirs=self.token_dirs, env={}, now=self._clock())
