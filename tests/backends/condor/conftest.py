"""A real remote pool for the condor GAHP: queue daemon and collector over TLS with tokens.

The pool is the one `htgrid up` starts (PersonalPool), with its own trust domain; the
GAHP reaches it only as the grid manager's GAHP would: the collector's host:port, the
pool's CA file and a token the pool issued, in a token directory.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from htgrid.net.security import SecurityConfig, TokenIssuer
from htgrid.testing import PersonalPool, wait_for

TRUST_DOMAIN = "pool-b"
SCHEDD_NAME = "schedd-b"


@dataclass(frozen=True)
class RemotePool:
    pool: PersonalPool
    collector: str  # host:port
    url: str  # the schedd's HTGridURL
    ca_file: Path
    tokens_dir: Path  # holds a user token of the pool
    token: str

    def gahp_options(self, *extra: str) -> list[str]:
        """How the grid manager would start the GAHP for this pool."""
        return [
            "--pool",
            self.collector,
            "--ca-file",
            str(self.ca_file),
            "--tokens-dir",
            str(self.tokens_dir),
            *extra,
        ]


def _advertised_url(collector: str, ca_file: Path, token: str) -> str | None:
    context = ssl.create_default_context(cafile=str(ca_file))
    request = urllib.request.Request(
        f"https://{collector}/v1/ads?type=Scheduler&projection=Name,HTGridURL",
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as answer:
            ads = json.load(answer)
    except OSError:
        return None
    for ad in ads:
        if ad.get("Name") == SCHEDD_NAME and ad.get("HTGridURL"):
            return str(ad["HTGridURL"])
    return None


@contextlib.contextmanager
def remote_pool(base: Path, **knobs: object) -> Iterator[RemotePool]:
    """A running pool-b under `base`, with `knobs` in its htgrid.conf."""
    home = base / "pool-b"
    config = {"TRUST_DOMAIN": TRUST_DOMAIN, "SCHEDD_NAME": SCHEDD_NAME, **knobs}
    pool = PersonalPool(
        home,
        periodic_interval=0.5,
        daemons=("MASTER", "SCHEDD", "COLLECTOR"),
        config=config,
    )
    with pool:
        ca_file = home / "etc" / "ca" / "ca.crt"
        token = TokenIssuer(SecurityConfig.load(home)).create(f"alice@{TRUST_DOMAIN}")
        tokens_dir = base / "tokens.d"
        tokens_dir.mkdir()
        (tokens_dir / "pool-b").write_text(f"# alice at pool-b\n{token}\n")
        collector = pool.collector
        url = wait_for(
            lambda: _advertised_url(collector, ca_file, token),
            timeout=30,
            what="the schedd's ad with HTGridURL in the collector",
        )
        yield RemotePool(pool, collector, url, ca_file, tokens_dir, token)


@pytest.fixture(scope="module")
def remote(
    shared_tmp_factory: Callable[[str], Path], test_users: tuple[str, ...]
) -> Iterator[RemotePool]:
    """pool-b, whose jobs (alice's) run as alice: its home is one she passes through."""
    with remote_pool(shared_tmp_factory("condor-gahp")) as pool:
        yield pool
