"""Small file helpers the daemons share."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: Path, data: bytes, *, sync: bool = False, mode: int = 0o666) -> None:
    """`data` written whole beside `path` (`mode`, less the umask), then renamed over it:
    a reader sees the old file or the new, never part of one, and a link at `path` is
    replaced, not followed. `sync`: on disk before the rename. The temporary file
    (`.<name>.<random>`) is removed if the write fails."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
            out.write(data)
            out.flush()
            if sync:
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
