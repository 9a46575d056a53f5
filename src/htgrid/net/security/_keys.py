"""The pool's token signing keys: files in `$HTGRID_HOME/etc/passwords.d`, as HTCondor's.

A key's name is its file name (`POOL` unless told otherwise; that is the `kid` of the
tokens it signs). Files are written the way condor_store_cred and the collector write
them, so a key copied from an HTCondor pool signs tokens that pool accepts and back:

- 64 random bytes, XORed with DE AD BE EF repeated (HTCondor's "simple scramble", which
  keeps the secret from being read by accident, not from an attacker), mode 0600;
- the secret is the unscrambled bytes, doubled for the key named POOL (HTCondor does so
  for backward compatibility with pool passwords);
- the HMAC key is HKDF-SHA256(secret, salt "htcondor", info "master jwt"), 32 bytes.

Deleting a key's file invalidates every token it signed, at once.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from htgrid.net.security._config import ensure_private_dir, shown
from htgrid.net.security._errors import UnknownKey

__all__ = ["POOL_KEY", "SigningKeys", "derive_jwt_key", "scramble"]

POOL_KEY: Final = "POOL"
_SECRET_BYTES: Final = 64  # what the collector generates
_JWT_KEY_BYTES: Final = 32  # HMAC-SHA256's key
_SCRAMBLE: Final = bytes((0xDE, 0xAD, 0xBE, 0xEF))
_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def scramble(data: bytes) -> bytes:
    """HTCondor's simple_scramble (its own inverse)."""
    return bytes(b ^ _SCRAMBLE[i % 4] for i, b in enumerate(data))


def _hkdf_sha256(ikm: bytes, salt: bytes, info: bytes) -> bytes:
    return HKDF(hashes.SHA256(), _JWT_KEY_BYTES, salt=salt, info=info).derive(ikm)


def derive_jwt_key(file_bytes: bytes, name: str) -> bytes:
    """The HMAC key for tokens signed with the key file holding `file_bytes`."""
    secret = scramble(file_bytes)
    if name == POOL_KEY:
        secret += secret
    return _hkdf_sha256(secret, b"htcondor", b"master jwt")


@dataclass(frozen=True, slots=True)
class _Loaded:
    signature: tuple[int, int, int, int]  # inode, size, mtime, ctime: a changed file reloads
    key: bytes


class SigningKeys:
    """The signing keys in one directory; each read checks the file is still there."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cache: dict[str, _Loaded] = {}

    def path(self, name: str) -> Path:
        """The file of key `name` (UnknownKey when the name cannot be a key's)."""
        if not _NAME.fullmatch(name) or name in {".", ".."}:
            raise UnknownKey(f"{shown(name)} cannot be the name of a signing key")
        return self.directory / name

    def names(self) -> list[str]:
        """The names of the keys present, sorted."""
        try:
            entries = sorted(self.directory.iterdir())
        except FileNotFoundError:
            return []
        return [p.name for p in entries if p.is_file() and _NAME.fullmatch(p.name)]

    def ensure(self, name: str = POOL_KEY) -> bool:
        """Create key `name` with a random secret unless it exists; True if created."""
        path = self.path(name)
        ensure_private_dir(self.directory)
        if path.exists():
            return False
        # Written aside and linked into place, so no reader ever sees half a key, and
        # two processes racing to create it end up with one key between them.
        tmp = self.directory / f".{name}.{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(scramble(secrets.token_bytes(_SECRET_BYTES)))
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def jwt_key(self, name: str) -> bytes:
        """The HMAC key of key `name` (UnknownKey when it is missing or unusable)."""
        path = self.path(name)
        try:
            st = path.stat()
        except FileNotFoundError:
            self._cache.pop(name, None)
            raise UnknownKey(f"this pool has no signing key named {name!r}") from None
        except OSError as exc:
            raise UnknownKey(f"the signing key {name!r} cannot be read: {exc.strerror}") from None
        sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cached = self._cache.get(name)
        if cached is not None and cached.signature == sig:
            return cached.key
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            # As HTCondor's read_secure_file: a key others can read is no secret.
            raise UnknownKey(
                f"the signing key {name!r} is not used: {path} must be a regular file "
                f"readable only by its owner (chmod 600), not {stat.filemode(st.st_mode)}"
            )
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UnknownKey(f"the signing key {name!r} cannot be read: {exc.strerror}") from None
        if not data:
            raise UnknownKey(f"the signing key {name!r} is empty")
        key = derive_jwt_key(data, name)
        self._cache[name] = _Loaded(sig, key)
        return key
