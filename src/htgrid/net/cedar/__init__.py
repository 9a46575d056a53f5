"""HTCondor's CEDAR protocol, server side: what lets the official clients (the
`htcondor2` bindings, condor_status, GlideinWMS) talk to htgrid's daemons.

- `_codec`: packets, messages, AES-GCM and the values inside them, with no I/O;
- `_ads`: ClassAds as `Name = expr` lines;
- `_auth`, `_policy`: ECDH, the TOKEN and FS proofs; the policy table and sessions;
- `_methods`: the authentication methods (TOKEN, FS, SSL);
- `_auth_ssl`: SSL's TLS handshake carried in CEDAR messages;
- `_server`: the handshake and a daemon's commands on one connection (`CedarService`);
- `_pool`: a daemon's CEDAR security from its pool's (`pool_security`).

The daemons serve it on the port of their HTTPS API (`htgrid.net.server.start_shared`).
"""

from htgrid.net.cedar._ads import Literal, ad_lines, line_name, literal_lines, parse_ad, split_lines
from htgrid.net.cedar._codec import MAX_PACKET, Channel, Reader, Writer
from htgrid.net.cedar._methods import CedarRefused, CedarSecurity
from htgrid.net.cedar._policy import Level, reconcile
from htgrid.net.cedar._pool import pool_security
from htgrid.net.cedar._server import (
    DC_AUTHENTICATE,
    DC_NOP,
    DC_SEC_QUERY,
    REMOTE_VERSION,
    CedarCall,
    CedarService,
    Command,
    Phase,
)

__all__ = [
    "DC_AUTHENTICATE",
    "DC_NOP",
    "DC_SEC_QUERY",
    "MAX_PACKET",
    "REMOTE_VERSION",
    "CedarCall",
    "CedarRefused",
    "CedarSecurity",
    "CedarService",
    "Channel",
    "Command",
    "Level",
    "Literal",
    "Phase",
    "Reader",
    "Writer",
    "ad_lines",
    "line_name",
    "literal_lines",
    "parse_ad",
    "pool_security",
    "reconcile",
    "split_lines",
]
