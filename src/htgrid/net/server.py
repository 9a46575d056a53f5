"""What each daemon's HTTP API is built from: the schedd's here (`htgrid.net.app`), the
collector's and the execute node's in their own packages.

- listening and serving (`_listen`): `tcp_listener`, `unix_listener`, `api_config`,
  `ApiServer`, `start`, on uvicorn's protocol with two clocks (`_guard`);
- what a request may hold (`_limits`, `_tarscan`): `read_body` (MAX_API_REQUEST_MB),
  `SizeLimit` (MAX_TRANSFER_INPUT_MB and _OUTPUT_MB) and the reading of an uploaded tar;
- one port for HTTPS and HTCondor's CEDAR (`_shared`): `start_shared`; a shared port's
  routing to the daemons behind it (`_shared_port`): `SharedPort`, `receive_connections`;
- who calls on a Unix socket (`_peer`): `PeerCredProtocol`, the kernel's word for it;
  over TLS with a client certificate, `PeerCertProtocol` and `certificate_caller`;
- requests' JSON (`_wire`): `loads_request` (and `htgrid.net.ad_from_json`), refused with
  `BadRequest`;
- `ProblemResponse`: an error as an RFC 9457 problem document.

Only daemons import this module (it loads uvicorn and starlette); a client needs
`htgrid.net` alone.
"""

from __future__ import annotations

from htgrid.net._guard import ProblemResponse
from htgrid.net._limits import MIN_BODY_RATE, RequestTooLarge, read_body
from htgrid.net._listen import (
    ApiServer,
    api_config,
    serve_connection,
    start,
    tcp_listener,
    unix_listener,
)
from htgrid.net._peer import (
    PEER_CERT_KEY,
    PEER_KEY,
    PeerCertificate,
    PeerCertProtocol,
    PeerCredentials,
    PeerCredProtocol,
    certificate_caller,
    peer_credentials,
    peercred_identity,
)
from htgrid.net._sandbox_routes import MAX_PROXY_BYTES
from htgrid.net._shared import start_shared
from htgrid.net._shared_port import SHARED_PORT_DIR, SharedPort, receive_connections
from htgrid.net._tarscan import (
    MAX_TAR_MEMBERS,
    NO_LIMIT,
    SizeLimit,
    empty_job_dirs,
    listed_members,
    unpacked_size,
)
from htgrid.net._wire import loads_request

__all__ = [
    "MAX_PROXY_BYTES",
    "MAX_TAR_MEMBERS",
    "MIN_BODY_RATE",
    "NO_LIMIT",
    "PEER_CERT_KEY",
    "PEER_KEY",
    "SHARED_PORT_DIR",
    "ApiServer",
    "PeerCertProtocol",
    "PeerCertificate",
    "PeerCredProtocol",
    "PeerCredentials",
    "ProblemResponse",
    "RequestTooLarge",
    "SharedPort",
    "SizeLimit",
    "api_config",
    "certificate_caller",
    "empty_job_dirs",
    "listed_members",
    "loads_request",
    "peer_credentials",
    "peercred_identity",
    "read_body",
    "receive_connections",
    "serve_connection",
    "start",
    "start_shared",
    "tcp_listener",
    "unix_listener",
    "unpacked_size",
]
