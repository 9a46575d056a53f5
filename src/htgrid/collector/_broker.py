"""The collector's connection broker (HTCondor's CCB): its registrations and its routes.

A registration is a streamed answer that stays open: its first line says the CCBID
taken, then one JSON line per request (`{connect_id, return_address, requester}`), and
an empty line every heartbeat so that both ends see a connection gone. The caller's
rights were checked by the app's middleware (`required_authz`); here, that a node's
token registers its own name alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from htgrid.collector._ccb import CONNECT_ID, CcbRequest, parse_return_address
from htgrid.collector._errors import CollectorUnavailable, NotRegistered, ProtocolError
from htgrid.net.security import PRINCIPAL_KEY, InsufficientScope, Principal
from htgrid.net.server import read_body

__all__ = ["Broker", "ccb_register", "ccb_request", "node_of", "under"]

_log = logging.getLogger("htgrid.collector")

_BACKLOG: Final = 256  # requests waiting for one node, at most
_HEARTBEAT: Final = (1.0, 3600.0)  # the heartbeats a node may ask for


def node_of(principal: Principal) -> str | None:
    """The one node whose startd ads a caller may send: that of an execute node's token
    (ADVERTISE_STARTD without DAEMON), the part of its subject before the `@`; None for
    the pool's daemons and administrators, who may send any."""
    if principal.allows("DAEMON") or not principal.allows("ADVERTISE_STARTD"):
        return None
    return principal.subject.partition("@")[0]


def under(host: str, node: str) -> bool:
    """Whether `host` is `node` or a host named under it (`i-0abc.NAME.annex` under
    `NAME.annex`): one token of an annex serves all its instances, as a DNS zone does."""
    own, host = node.casefold(), host.casefold()
    return host == own or host.endswith("." + own)


class _Registration:
    def __init__(self, ccbid: str) -> None:
        self.ccbid = ccbid
        self.queue: asyncio.Queue[CcbRequest | None] = asyncio.Queue(_BACKLOG)


class Broker:
    """The nodes registered, by CCBID (case as the node's name: folded)."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Registration] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def register(self, ccbid: str) -> _Registration:
        """A new registration for `ccbid`; the one it replaces is told to end."""
        old = self._nodes.get(ccbid.casefold())
        if old is not None:
            _put(old, None)
        reg = self._nodes[ccbid.casefold()] = _Registration(ccbid)
        return reg

    def unregister(self, reg: _Registration) -> None:
        if self._nodes.get(reg.ccbid.casefold()) is reg:
            del self._nodes[reg.ccbid.casefold()]

    def forward(self, ccbid: str, request: CcbRequest) -> None:
        """Hand `request` to the node registered as `ccbid`, and to it alone."""
        reg = self._nodes.get(ccbid.casefold())
        if reg is None:
            raise NotRegistered(
                f"no execute node is registered with this broker as {ccbid!r} (it is not "
                "running, or is reconnecting)"
            )
        if not _put(reg, request):
            raise CollectorUnavailable(
                f"{_BACKLOG} requests already wait for the node registered as {ccbid!r}"
            )


def _put(reg: _Registration, item: CcbRequest | None) -> bool:
    try:
        reg.queue.put_nowait(item)
    except asyncio.QueueFull:
        return False
    return True


def _principal(request: Request) -> Principal | None:
    found = request.scope.get("state", {}).get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else None


def _heartbeat(text: str | None) -> float:
    try:
        value = float(text) if text else 60.0
    except ValueError:
        raise ProtocolError(f"heartbeat must be a number of seconds, not {text!r}") from None
    return min(max(value, _HEARTBEAT[0]), _HEARTBEAT[1])


async def ccb_register(request: Request) -> Response:
    """GET /v1/ccb/registrations/{ccbid}: the node's registration, streamed."""
    broker: Broker = request.app.state.broker
    ccbid = request.path_params["ccbid"]
    principal = _principal(request)
    node = node_of(principal) if principal is not None else None
    if principal is not None and node is not None and not under(ccbid, node):
        raise InsufficientScope(
            f"token {principal.token_id} of {principal.subject} may register execute node "
            f"{node!r} (or a host named under it) with the broker, not {ccbid!r}"
        )
    heartbeat = _heartbeat(request.query_params.get("heartbeat"))
    reg = broker.register(ccbid)
    _log.info("execute node %s registered with the broker", ccbid)

    async def lines() -> AsyncIterator[str]:
        try:
            yield json.dumps({"ccbid": ccbid}) + "\n"
            while True:
                try:
                    async with asyncio.timeout(heartbeat):
                        item = await reg.queue.get()
                except TimeoutError:
                    yield "\n"
                    continue
                if item is None:
                    return  # a newer registration of the same node took over
                yield (
                    json.dumps(
                        {
                            "connect_id": item.connect_id,
                            "return_address": item.return_address,
                            "requester": item.requester,
                        }
                    )
                    + "\n"
                )
        finally:
            broker.unregister(reg)
            _log.info("execute node %s: its registration with the broker ended", ccbid)

    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def ccb_request(request: Request) -> Response:
    """POST /v1/ccb/requests: hand a schedd's request to the node it names."""
    broker: Broker = request.app.state.broker
    try:
        doc: Any = json.loads(await read_body(request, request.app.state.limits))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"the request body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ProtocolError("the request body must be a JSON object")
    ccbid, connect_id, back = doc.get("ccbid"), doc.get("connect_id"), doc.get("return_address")
    if not isinstance(ccbid, str) or not ccbid:
        raise ProtocolError('"ccbid" must name the node')
    if not isinstance(connect_id, str) or not CONNECT_ID.fullmatch(connect_id):
        raise ProtocolError('"connect_id" must be 16 to 128 letters, digits, - or _')
    if not isinstance(back, str):
        raise ProtocolError('"return_address" must be <host:port>')
    parse_return_address(back)
    principal = _principal(request)
    who = principal.subject if principal is not None else ""
    broker.forward(ccbid, CcbRequest(connect_id, back, who))
    return JSONResponse({"forwarded": True}, status_code=202)
