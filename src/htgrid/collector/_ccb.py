"""HTCondor's CCB (connection broker): reaching execute nodes that nobody can connect to.

A node behind NAT (CCB_ADDRESS, or PRIVATE_NETWORK_NAME) keeps a registration open
with the broker in its pool's collector (`CollectorClient.ccb_requests`) and advertises
its address with the broker's contact in it, as HTCondor's sinful strings carry it
(`with_ccb`, `ccb_contact`):

    <10.0.0.5:40123?CCBID=cm.example.org:9618#node7&PrivNet=cloud>

A schedd that must talk to such a node (and is not on the same PrivNet) listens for
the connection itself (`ReverseConnector`): it sends the broker a request naming the
node's CCBID, a fresh connect id and its own return address; the broker hands the
request to that node's registration alone; the node connects out to the return address
and says the connect id (`connect_back`); the schedd takes that connection as if it had
opened it. Then, over it, everything is as over a direct connection: TLS with the schedd
as the client (pinning the certificate of the node's ad, presenting its own of the
pool's CA) and the node as the server (checking that certificate), the node's API with
the claim id as the capability. The broker relays three strings, never a byte of the
connection, and the connect id only pairs the connection with its request: it proves
nothing, the handshake does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote

from htgrid.collector._errors import ProtocolError

__all__ = [
    "CONNECT_ID",
    "CcbContact",
    "CcbRequest",
    "ccb_contact",
    "parse_return_address",
    "private_network",
    "with_ccb",
]

CONNECT_ID: Final = re.compile(r"[A-Za-z0-9_-]{16,128}")


@dataclass(frozen=True, slots=True)
class CcbContact:
    """Where a node is registered: the broker's `host:port` and its id there."""

    broker: str
    ccbid: str

    def __str__(self) -> str:
        return f"{self.broker}#{self.ccbid}"


@dataclass(frozen=True, slots=True)
class CcbRequest:
    """A schedd's request, as the broker hands it to the node: connect to
    `return_address` (`<host:port>`) and say `connect_id`."""

    connect_id: str
    return_address: str
    requester: str = ""


def _params(address: str) -> dict[str, str]:
    inner = address.strip().removeprefix("<").removesuffix(">")
    _, _, query = inner.partition("?")
    out = {}
    for part in query.split("&"):
        key, eq, value = part.partition("=")
        if eq:
            out[key] = unquote(value)
    return out


def ccb_contact(address: str) -> CcbContact | None:
    """The broker contact of a sinful string (its CCBID), if it has one."""
    value = _params(address).get("CCBID", "").split(" ")[0]  # HTCondor lists several
    broker, sep, ccbid = value.rpartition("#")
    if not sep or not broker or not ccbid:
        return None
    return CcbContact(broker, ccbid)


def private_network(address: str) -> str | None:
    """The PrivNet of a sinful string: peers of the same name reach it directly."""
    return _params(address).get("PrivNet") or None


def with_ccb(address: str, contact: CcbContact, privnet: str | None) -> str:
    """`address` (`<host:port>`) with the broker contact, and PrivNet when given."""
    inner = address.strip().removeprefix("<").removesuffix(">").partition("?")[0]
    params = f"CCBID={quote(str(contact), safe=':[]#')}"
    if privnet:
        params += f"&PrivNet={quote(privnet, safe='')}"
    return f"<{inner}?{params}>"


def parse_return_address(text: str) -> tuple[str, int]:
    """The host and port of a return address (`<host:port>`); ProtocolError otherwise."""
    inner = text.strip().removeprefix("<").removesuffix(">")
    host, sep, port = inner.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ProtocolError(f"{text!r} is not a return address (<host:port>)")
    return host, int(port)
