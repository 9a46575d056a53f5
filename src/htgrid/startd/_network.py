"""A node on its own (`htgrid startd`, perhaps on another host): its API over TLS, and its
registration with a broker when schedds cannot connect to it.

The API is served over TLS on NETWORK_INTERFACE with a certificate the node makes itself
at each start, for callers with a certificate of the pool's CA; the address and the
certificate are advertised (`_api` says why the schedd may pin it).

A node schedds cannot connect to (CCB_ADDRESS, or PRIVATE_NETWORK_NAME: behind NAT)
also keeps a registration with its broker (HTCondor's CCB, in the pool's collector)
under its name, and advertises its address with that CCBID in it: for each schedd's
request the broker hands over, it connects to the schedd and serves the same TLS API,
with the same checks, on that connection (`htgrid.collector._ccb` says why that is as
safe as a direct one).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from htgrid.client import pool_url
from htgrid.collector import (
    CcbContact,
    CcbRequest,
    CollectorClient,
    CollectorRefused,
    connect_back,
    with_ccb,
)
from htgrid.errors import HTGridError
from htgrid.net.security import self_signed_cert, server_ssl_context
from htgrid.net.server import ApiServer, serve_connection
from htgrid.startd._api import create_app, pool_daemon_caller, start_tls_server
from htgrid.startd._errors import StartdError

if TYPE_CHECKING:
    from htgrid.startd._daemon import Startd

__all__ = ["NodeNetwork"]

_log = logging.getLogger("htgrid.startd")

_WILDCARDS: Final = frozenset({"0.0.0.0", "::", "[::]"})
_CCB_RETRY: Final = (1.0, 60.0)  # a lost registration is tried again after 1, 2, 4... s
_CONNECT_BACK: Final = 20.0  # how long connecting back to a schedd may take
# Connections back being made at once, at most: a broker request names any host:port,
# so whoever may send requests could otherwise have the node open connections at will.
_CONNECTING_BACK: Final = 32


class NodeNetwork:
    """The TLS API of one node, and its connections back to schedds through a broker."""

    def __init__(self, startd: Startd, clock: Callable[[], float]) -> None:
        self._startd = startd
        self._clock = clock
        self.tls: tuple[ApiServer, Any] | None = None  # the TLS API: server, context
        self._reversed: set[asyncio.Task[None]] = set()
        self._connecting_back = 0

    async def serve_tls(self, cas: list[Path]) -> tuple[Any, asyncio.Task[None], str]:
        """The API over TLS on NETWORK_INTERFACE, with a certificate made now, for
        callers with a certificate of `cas`; the address advertised (`<ip:port>`)."""
        startd = self._startd
        cfg, ctx = startd.config, startd.ctx
        host = cfg.network_interface
        if host is None:
            host = await asyncio.to_thread(_route_to, startd.pool)
        elif host in _WILDCARDS or "*" in host:
            # The address listened on is the one advertised: schedds must reach it.
            raise StartdError(
                f"NETWORK_INTERFACE = {host}: name the one address schedds reach this node "
                "at (leave it unset for the one that reaches the collector)"
            )
        hosts = [host, ctx.machine.hostname]
        cert = await asyncio.to_thread(
            self_signed_cert,
            cfg.startd_cert,
            cfg.startd_key,
            ctx.machine.hostname,
            hosts,
            clock=self._clock,
        )
        tls = await asyncio.to_thread(server_ssl_context, cert, client_cas=cas)
        app = create_app(startd, cfg.api_limits, caller=pool_daemon_caller)
        server, serving, port = await start_tls_server(app, host, tls, cfg.api_limits)
        shown = f"[{host}]" if ":" in host else host
        ctx.address = f"<{shown}:{port}>"
        broker = cfg.broker(startd.pool)
        if broker is not None:  # schedds may not reach that address: they ask the broker
            contact = CcbContact(broker, ctx.machine.hostname)
            ctx.address = with_ccb(ctx.address, contact, cfg.private_network_name)
        ctx.certificate = cert.cert.read_text(encoding="ascii")
        self.tls = (server, tls)
        return server, serving, f"https://{shown}:{port}"

    async def ccb_loop(self, broker: str) -> None:
        """Keep the registration with the broker, and connect back to each schedd whose
        request it hands over."""
        startd = self._startd
        ccbid = startd.ctx.machine.hostname  # the node, as its token names it
        delay = _CCB_RETRY[0]
        async with CollectorClient(
            broker, timeout=10.0, home=startd.config.home, daemon=True
        ) as client:
            while True:
                try:
                    registered = False
                    heartbeat = startd.config.ccb_heartbeat
                    async for request in client.ccb_requests(ccbid, heartbeat):
                        if not registered:  # the first line: the registration is taken
                            registered, delay = True, _CCB_RETRY[0]
                            _log.info("registered with the broker at %s as %s", broker, ccbid)
                            continue
                        self._connect_back(request)
                except CollectorRefused as exc:
                    _log.error("the broker at %s refuses this node: %s", broker, exc)
                except HTGridError as exc:
                    _log.warning("the broker at %s: %s", broker, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _CCB_RETRY[1])

    async def close(self) -> None:
        """End the connections back being served."""
        for task in list(self._reversed):
            task.cancel()
        await asyncio.gather(*self._reversed, return_exceptions=True)

    def _connect_back(self, request: CcbRequest) -> None:
        if self._connecting_back >= _CONNECTING_BACK:
            _log.warning(
                "not connecting back to %s at %s: %d connections back are being made already",
                request.requester or "a schedd",
                request.return_address,
                self._connecting_back,
            )
            return
        # Counted here, not when the task first runs: requests that come in one read
        # would all pass the check before any of their tasks had started.
        self._connecting_back += 1
        task = asyncio.create_task(self._serve_reversed(request), name="reversed connection")
        self._reversed.add(task)
        task.add_done_callback(self._reversed.discard)

    async def _serve_reversed(self, request: CcbRequest) -> None:
        assert self.tls is not None
        server, tls = self.tls
        try:
            try:
                sock = await connect_back(request, _CONNECT_BACK)
            finally:
                self._connecting_back -= 1
            await serve_connection(server, sock, tls)
        except (OSError, TimeoutError, HTGridError) as exc:
            _log.warning(
                "cannot connect back to %s at %s: %s",
                request.requester or "a schedd",
                request.return_address,
                exc or repr(exc),
            )


def _route_to(pool: str) -> str:
    """The address of this host the collector's host is reached by (no packet is sent)."""
    host, _, port = pool_url(pool).removeprefix("https://").rpartition(":")
    host = host.strip("[]")
    try:
        family, kind, proto, _, target = socket.getaddrinfo(
            host, int(port), type=socket.SOCK_DGRAM
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.connect(target)
            return str(probe.getsockname()[0])
    except OSError as exc:
        raise StartdError(
            f"cannot tell which address reaches the collector at {pool} ({exc}): "
            "set NETWORK_INTERFACE"
        ) from None
