"""The MyProxy server of the tests: the one `.ci/myproxy-up.sh` starts on 127.0.0.1:7512
(Debian's myproxy-server, with the test PKI of `.ci/grid-pki.sh`), and credentials stored
in it as a user would store them, with Debian's myproxy-init run as the local user
gridtest (whose certificate is the test PKI's user certificate)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from pathlib import Path

__all__ = [
    "MYPROXY_PORT",
    "PKI",
    "destroy_credential",
    "myproxy_up",
    "new_credential",
    "require_myproxy",
    "store_credential",
]

MYPROXY_PORT = int(os.environ.get("HTGRID_MYPROXY_PORT", "7512"))
PKI = Path(os.environ.get("HTGRID_REALGRID_DIR", "/var/tmp/htgrid-realgrid")) / "pki"
_CA_DIR = "/etc/grid-security/certificates"


def myproxy_up() -> bool:
    """Whether the server answers and the test PKI and its user are there."""
    if (
        not (PKI / "user.pem").exists()
        or not Path(os.path.expanduser("~gridtest"), ".globus").exists()
    ):
        return False
    try:
        with socket.create_connection(("127.0.0.1", MYPROXY_PORT), timeout=2):
            return True
    except OSError:
        return False


def require_myproxy(*, module: bool = False) -> None:
    """Skip the test (or the whole `module`) without the server; fail in CI, which
    starts it (.ci/myproxy-up.sh)."""
    import pytest

    if myproxy_up():
        return
    if os.environ.get("CI") == "true":
        pytest.fail("the MyProxy server is not up (CI runs .ci/myproxy-up.sh)", pytrace=False)
    pytest.skip("no MyProxy server here", allow_module_level=module)


def new_credential(username: str, passphrase: str, hours: int = 2) -> str:
    """Store gridtest's credential as a new credential of `username`, retrievable with
    `passphrase` for proxies of at most `hours`; its name (MyProxyCredentialName)."""
    name = f"{username}-{secrets.token_hex(4)}"
    store_credential(username, name, passphrase, hours)
    return name


def store_credential(username: str, name: str, passphrase: str, hours: int = 2) -> None:
    """Store gridtest's credential as `username`'s credential `name` (myproxy-init -k),
    retrievable with `passphrase` for proxies of at most `hours`."""
    more = ["-S", "-c", str(hours + 1), "-t", str(hours)]
    _as_gridtest("myproxy-init", username, name, more, f"{passphrase}\n")


def destroy_credential(username: str, name: str) -> None:
    """Remove `username`'s credential `name` from the server (myproxy-destroy)."""
    _as_gridtest("myproxy-destroy", username, name, [], "")


def _as_gridtest(tool: str, username: str, name: str, more: list[str], stdin: str) -> None:
    argv = ["runuser", "-u", "gridtest", "--", "env", f"X509_CERT_DIR={_CA_DIR}", tool]
    argv += ["-s", "localhost", "-p", str(MYPROXY_PORT), "-l", username, "-k", name, *more]
    subprocess.run(argv, input=stdin.encode(), capture_output=True, check=True, cwd="/", timeout=60)
