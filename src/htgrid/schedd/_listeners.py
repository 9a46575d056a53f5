"""The schedd's two listeners: the API on its Unix socket (callers named by their Unix
credentials) and over TLS on SCHEDD_ADDRESS (bearer tokens, mapped certificates, and
HTCondor's CEDAR clients on the same port), each with the web view."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable

from htgrid._files import write_atomic
from htgrid._ports import held_by
from htgrid.classad import ClassAd
from htgrid.net.app import create_app
from htgrid.net.cedar import REMOTE_VERSION, pool_security
from htgrid.net.security import (
    SERVER_CERT,
    AuditLog,
    CertRotator,
    Gatekeeper,
    GatekeeperConfig,
    PoolCA,
    RotatingServer,
    SecurityConfig,
    TokenAuthMiddleware,
    ensure_pool_security,
    server_ssl_context,
    token_identity,
)
from htgrid.net.server import (
    SHARED_PORT_DIR,
    ApiServer,
    PeerCertProtocol,
    PeerCredProtocol,
    api_config,
    certificate_caller,
    peercred_identity,
    receive_connections,
    start,
    start_shared,
    tcp_listener,
    unix_listener,
)
from htgrid.pool import ConfigFile, trusted_ca_files
from htgrid.schedd._advertise import SHARED_PORT_ID
from htgrid.schedd._cedar import schedd_cedar
from htgrid.schedd._config import ScheddConfig, ScheddError, default_schedd_name
from htgrid.schedd._service import QueueService
from htgrid.web import Sources
from htgrid.web.app import EXEMPT, CookieBearer, web_routes

__all__ = ["start_socket_api", "start_tls_api"]

_log = logging.getLogger("htgrid.schedd")


async def start_socket_api(
    cfg: ScheddConfig, service: QueueService, sources: Sources
) -> tuple[ApiServer, asyncio.Task[None]]:
    """uvicorn on our socket (0600; a dead daemon's replaced: we hold the lock), in a
    task; it returns once the server is listening."""
    web = web_routes(sources, peercred_identity)
    app = create_app(service, peercred_identity, cfg.api_limits, extra=web)
    config = api_config(app, cfg.api_limits, protocol=PeerCredProtocol)
    server = ApiServer(config, signals=False)  # the daemon handles SIGTERM and SIGINT
    sock = unix_listener(cfg.socket)  # 0600: nobody else connects...
    if cfg.shared:  # ...but the host's users, in a pool run by root (peercred_identity)
        os.chmod(cfg.socket, 0o666)
    serving = await start(server, sock, "the API server", ScheddError)
    return server, serving


async def start_tls_api(
    cfg: ScheddConfig,
    service: QueueService,
    sources: Sources,
    *,
    clock: Callable[[], float],
    audit: AuditLog | None,
    reschedule: Callable[[], None],
) -> tuple[ApiServer, asyncio.Task[None], str]:
    """The API over TLS on SCHEDD_ADDRESS, callers named by their bearer tokens; its URL.

    The pool's key, CA and certificate are made here if `htgrid up` did not; the
    certificate is renewed and reloaded while the daemon runs (`CertRotator`).
    """
    security = SecurityConfig.load(cfg.home)
    material = await asyncio.to_thread(ensure_pool_security, security)
    # The pool's tokens and issuers' (SciTokens), mapped, banned and audited as
    # HTCondor-CE's schedd does (CERTIFICATE_MAPFILE, DENY_*, SCHEDD_AUDIT_LOG).
    settings = await asyncio.to_thread(GatekeeperConfig.load, cfg.home, "SCHEDD")
    gate = Gatekeeper(security, settings, clock=clock)
    web = web_routes(sources, token_identity, realm=security.trust_domain)
    api = TokenAuthMiddleware(
        create_app(service, token_identity, cfg.api_limits, extra=web),
        gate.verify,
        realm=security.trust_domain,
        exempt=EXEMPT,
        admit=gate.admit,
        audit=audit,
        connection=certificate_caller(gate),
    )
    # The web view's sign-in cookie becomes the bearer token the middleware checks.
    app = CookieBearer(api)
    # A client may present a certificate of a CA the pool trusts: its DN is mapped by
    # the map file's SSL lines when it brings no token.
    tls = server_ssl_context(material.server, client_cas=trusted_ca_files(cfg))
    config = api_config(app, cfg.api_limits, tls=tls, protocol=PeerCertProtocol)
    cedar = schedd_cedar(
        service,
        # The same audit log: one writer, one rotation, both protocols' decisions.
        await asyncio.to_thread(pool_security, cfg.home, "SCHEDD", clock=clock, audit=audit),
        domain=settings.uid_domain or security.trust_domain,
        own_ad=lambda: _own_ad(cfg, sock),
        reschedule=reschedule,
    )
    ca = PoolCA(security.ca_dir, clock=clock)
    rotator = CertRotator(ca, SERVER_CERT, tls, material.server)
    host, port = cfg.schedd_address
    sock = tcp_listener(host)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        held = await asyncio.to_thread(held_by, port)
        raise ScheddError(
            f"SCHEDD_ADDRESS {host}:{port}: cannot listen: {exc.strerror}{held}"
        ) from None
    bound = sock.getsockname()[1]
    server = RotatingServer(config, rotator, signals=False)
    sock.listen(128)
    # HTCondor's clients (CEDAR) on the same port: told apart by their first byte.
    serving = await start_shared(server, sock, "the TLS API server", ScheddError, tls, cedar)
    if (await asyncio.to_thread(ConfigFile.read, cfg.home)).flag("USE_SHARED_PORT"):
        # Behind the collector's port too: it hands over the connections for us.
        path = cfg.run_dir / SHARED_PORT_DIR / SHARED_PORT_ID
        inbox = asyncio.create_task(receive_connections(path, cedar), name="shared port")
        serving.add_done_callback(lambda _: inbox.cancel())
    url = f"https://{f'[{host}]' if sock.family == socket.AF_INET6 else host}:{bound}"
    await asyncio.to_thread(write_atomic, cfg.url_file, (url + "\n").encode())
    _log.info("serving the API at %s (trust domain %s)", url, security.trust_domain)
    return server, serving, url


def _own_ad(cfg: ScheddConfig, sock: socket.socket) -> ClassAd:
    """The schedd's ad as a client asking it directly sees it (directQuery)."""
    host, port = sock.getsockname()[:2]
    bracketed = f"[{host}]" if sock.family == socket.AF_INET6 else host
    return ClassAd(
        {
            "MyType": "Scheduler",
            "Name": cfg.schedd_name or default_schedd_name(),
            "Machine": socket.gethostname(),
            "MyAddress": f"<{bracketed}:{port}?noUDP>",
            "CondorVersion": REMOTE_VERSION,
        }
    )
