"""The client side of htgrid's HTTPS APIs, without any daemon: what reaches an API.

The command line (`htgrid q -name`, `htgrid status`), the daemons' own clients (of the
collector, of another schedd) and the condor GAHP server (a separate process, which may
import only htgrid.classad, htgrid.gahp and small helpers like this package) all talk to
the same APIs the same way, so they share this package:

- `pool_url`: a pool's collector as `-pool` names it (`host[:port]`, 9618 by default);
- `tls_transport`: httpx's transport, closing the connection of a cancelled TLS handshake;
- `Http11`: a lean HTTP/1.1 client of one server on asyncio's streams (the schedd's of
  its execute nodes, a request for each job it starts; the daemons' of their collector),
  and `InProcess`, its requests on an httpx transport (an app in a test's process);
- tokens (`StoredToken`, `read_token_file`, `scan_tokens`, `find_token`, `TokenSource`):
  token files and the search for the token of a server's trust domain;
- `BearerAuth`: httpx presenting that token, learning the trust domain from a 401;
- `take_apart`: a JWT read, not verified, as the client and the server both read it.

The ads these APIs carry are read and written by htgrid.classad.adjson. Names load when
first asked for: a process that needs one of them does not pay for the others' imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from htgrid._lazy import on_demand

if TYPE_CHECKING:
    from htgrid.client._auth import BearerAuth, Finder, realm_of
    from htgrid.client._http11 import Answer, Http11, Streamed, said
    from htgrid.client._inprocess import InProcess
    from htgrid.client._jwt import (
        ALGORITHM,
        ISSUER_ALGORITHMS,
        TOKEN_ALGORITHMS,
        NotAToken,
        OtherAlgorithm,
        b64url,
        shown,
        take_apart,
    )
    from htgrid.client._pool import DEFAULT_PORT, pool_url
    from htgrid.client._tokens import (
        StoredToken,
        TokenFileProblem,
        TokenSource,
        find_token,
        pool_home,
        read_token_file,
        scan_tokens,
        user_token_dir,
    )
    from htgrid.client._transport import Connect, tls_transport

_LAZY: Final = {
    "BearerAuth": "_auth",
    "Finder": "_auth",
    "realm_of": "_auth",
    "ALGORITHM": "_jwt",
    "ISSUER_ALGORITHMS": "_jwt",
    "TOKEN_ALGORITHMS": "_jwt",
    "NotAToken": "_jwt",
    "OtherAlgorithm": "_jwt",
    "b64url": "_jwt",
    "shown": "_jwt",
    "take_apart": "_jwt",
    "Answer": "_http11",
    "Http11": "_http11",
    "Streamed": "_http11",
    "said": "_http11",
    "InProcess": "_inprocess",
    "DEFAULT_PORT": "_pool",
    "pool_url": "_pool",
    "StoredToken": "_tokens",
    "TokenFileProblem": "_tokens",
    "TokenSource": "_tokens",
    "find_token": "_tokens",
    "pool_home": "_tokens",
    "read_token_file": "_tokens",
    "scan_tokens": "_tokens",
    "user_token_dir": "_tokens",
    "Connect": "_transport",
    "tls_transport": "_transport",
}

__getattr__ = on_demand(__name__, _LAZY)

__all__ = [
    "ALGORITHM",
    "DEFAULT_PORT",
    "ISSUER_ALGORITHMS",
    "TOKEN_ALGORITHMS",
    "Answer",
    "BearerAuth",
    "Connect",
    "Finder",
    "Http11",
    "InProcess",
    "NotAToken",
    "OtherAlgorithm",
    "StoredToken",
    "Streamed",
    "TokenFileProblem",
    "TokenSource",
    "b64url",
    "find_token",
    "pool_home",
    "pool_url",
    "read_token_file",
    "realm_of",
    "said",
    "scan_tokens",
    "shown",
    "take_apart",
    "tls_transport",
    "user_token_dir",
]
