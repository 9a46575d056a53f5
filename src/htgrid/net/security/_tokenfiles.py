"""Writing token files: where `htgrid token create -token NAME` puts a token, and how.

Reading them, and the client's search for the token of a server's pool, are the client
side's (htgrid.client: `read_token_file`, `scan_tokens`, `find_token`).
"""

from __future__ import annotations

from pathlib import Path

from htgrid.client import user_token_dir
from htgrid.net.security._config import ensure_private_dir, write_private

__all__ = ["save_token", "token_path"]


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
