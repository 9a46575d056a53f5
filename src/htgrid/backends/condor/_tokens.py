"""Which token the GAHP presents to the remote pool.

Backends import only htgrid.gahp, htgrid.classad and htgrid.errors (they are separate
processes reached through the GAHP protocol), so this small reading of token files and
of a JWT's `iss` claim is written here rather than taken from htgrid.net.security. The
token is not verified: only the remote daemon can do that, and it says so with a 401.

A token file holds one JWT a line; blank lines and `#` comments are skipped. A given
token file (`--token-file`, or the grid manager's UPDATE_TOKEN) is used as is; otherwise
the first unexpired token in the `--tokens-dir` files whose issuer is the realm of the
server's 401 (`WWW-Authenticate: Bearer realm="<trust domain>"`) is presented.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["TokenSource", "claims_of", "read_token_file"]


def read_token_file(path: Path) -> list[str]:
    """The tokens in a file (OSError when it cannot be read)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


def claims_of(token: str) -> dict[str, object]:
    """A JWT's claims, unverified; {} when `token` is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


class TokenSource:
    """The fixed token file if any, else a token per issuer from the token directories."""

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
        """The token of the fixed token file, read afresh (it may be renewed in place)."""
        if self.token_file is None:
            return None
        try:
            tokens = read_token_file(self.token_file)
        except (OSError, UnicodeDecodeError):
            return None  # the server's 401 then says what is missing
        return tokens[0] if tokens else None

    def for_issuer(self, issuer: str) -> str | None:
        """The first unexpired token issued by `issuer` in the token directories."""
        now = self._clock()
        for directory in self.token_dirs:
            try:
                files = sorted(p for p in directory.iterdir() if not p.name.startswith("."))
            except OSError:
                continue
            for path in files:
                try:
                    tokens = read_token_file(path)
                except (OSError, UnicodeDecodeError):
                    continue
                for token in tokens:
                    claims = claims_of(token)
                    exp = claims.get("exp")
                    if claims.get("iss") != issuer:
                        continue
                    if isinstance(exp, int | float) and not isinstance(exp, bool) and exp <= now:
                        continue
                    return token
        return None
