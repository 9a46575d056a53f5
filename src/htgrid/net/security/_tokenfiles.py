"""Tokens kept in files, and which one a client presents to a server.

A token file holds one token a line (blank lines and `#` comments skipped), as in
HTCondor's token directories. A client looks, in order, at $HTGRID_TOKEN, the user's
~/.htgrid/tokens.d and the pool's $HTGRID_HOME/etc/tokens.d (files in name order) and
presents the first unexpired token whose issuer is the server's trust domain, as
HTCondor's SEC_TOKEN_DIRECTORY search does: a token never goes to a server of another
pool, which could replay it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from htgrid.net.security._config import (
    ensure_private_dir,
    pool_home,
    user_token_dir,
    write_private,
)
from htgrid.net.security._errors import AuthError
from htgrid.net.security._jwt import parse

__all__ = [
    "StoredToken",
    "TokenFileProblem",
    "find_token",
    "read_token_file",
    "save_token",
    "scan_tokens",
    "token_path",
]

ENV_TOKEN = "HTGRID_TOKEN"


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
        """Parse `token` (an AuthError when it is not one)."""
        signed = parse(token)
        return cls(path, line, token, signed.header, signed.claims)

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
        except AuthError as exc:
            problems.append(TokenFileProblem(path, number, f"not a token: {exc}"))
    return tokens, problems


def _files(directory: Path) -> list[Path]:
    try:
        entries = sorted(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
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

    `dirs` defaults to the user's token directory then $HTGRID_HOME/etc/tokens.d.
    """
    environ = os.environ if env is None else env
    at = time.time() if now is None else now
    explicit = environ.get(ENV_TOKEN, "").strip()
    if explicit:
        try:
            if StoredToken.read(explicit).usable_for(issuer, at):
                return explicit
        except AuthError:
            pass  # a stale variable should not hide good token files
    if dirs is None:
        dirs = (user_token_dir(), pool_home(environ) / "etc" / "tokens.d")
    for directory in dirs:
        for path in _files(directory):
            for stored in read_token_file(path)[0]:
                if stored.usable_for(issuer, at):
                    return stored.token
    return None


def token_path(name: str, directory: Path | None = None) -> Path:
    """Where `-token NAME` means: an absolute path as is, a bare name in the token directory."""
    path = Path(name).expanduser()
    if path.is_absolute():
        return path
    if len(path.parts) != 1 or name in {".", ".."}:
        raise ValueError(f"{name!r}: give a file name (in the token directory) or an absolute path")
    return (directory if directory is not None else user_token_dir()) / name


def save_token(path: Path, token: str) -> None:
    """Write `token` to `path`, readable by its owner only (the directory too, if made)."""
    ensure_private_dir(path.parent)
    write_private(path, (token + "\n").encode("ascii"))
