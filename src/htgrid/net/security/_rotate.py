"""Long-running servers keep presenting a current certificate, without a restart.

    cert = ca.ensure_server_cert(SERVER_CERT)
    context = server_ssl_context(cert)
    rotator = CertRotator(ca, SERVER_CERT, context, cert)
    server = RotatingServer(api_config(app, limits, tls=context), rotator)   # every `interval` s

Each check calls `PoolCA.ensure_server_cert` (which renews a certificate close to
expiry) and, when the certificate or key files differ from the ones the context loaded
(renewed by this check, by `htgrid up`, or by the other daemon sharing them), loads them
into the live `SSLContext`: new handshakes present the new certificate, connections
already open keep theirs. A renewal that cannot be loaded leaves the old certificate in
place (it is tried on a scratch context first) and is logged, as is a check that fails:
the server goes on serving either way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Final

import uvicorn

from htgrid.net._listen import ApiServer
from htgrid.net.security._ca import CertFiles, PoolCA
from htgrid.net.security._errors import SecurityError

__all__ = ["CHECK_INTERVAL", "CertRotator", "RotatingServer"]

_log = logging.getLogger("htgrid.net.security")

CHECK_INTERVAL: Final = 3600.0  # seconds; a certificate is renewed 30 days before expiry
_Signature = tuple[tuple[int, int, int, int], ...]


def _signature(cert: CertFiles) -> _Signature:
    """What tells a file replaced or rewritten: device, inode, size, mtime."""
    stats = (os.stat(cert.cert), os.stat(cert.key))
    return tuple((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)


class CertRotator:
    """Keeps `context` presenting daemon `name`'s current certificate of `ca`."""

    def __init__(
        self,
        ca: PoolCA,
        name: str,
        context: ssl.SSLContext,
        current: CertFiles,
        *,
        interval: float = CHECK_INTERVAL,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        """`context` presents `current` (it was built from those files); `sleep` is
        injected by tests."""
        self.ca, self.name, self.context = ca, name, context
        self.interval = interval
        self._sleep = sleep
        self._loaded = _signature(current)

    def check(self) -> CertFiles | None:
        """Renew the certificate if due and load it if its files changed: the
        certificate now presented, or None when nothing changed. Blocking."""
        return self._present(self._changed())

    def _changed(self) -> tuple[CertFiles, _Signature] | None:
        """The certificate (renewed if due) and its files' signature, when they changed
        and load together; None otherwise. Blocking; the live context is not touched."""
        cert = self.ca.ensure_server_cert(self.name)
        signature = _signature(cert)
        if signature == self._loaded:
            return None
        try:
            # On a scratch context first: a failed load_cert_chain can leave a context
            # holding a certificate without its key.
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert.cert, cert.key)
        except (OSError, ssl.SSLError) as exc:
            _not_loaded(cert, exc)
            return None
        return cert, signature

    def _present(self, found: tuple[CertFiles, _Signature] | None) -> CertFiles | None:
        """Load the certificate `_changed` found into the live context. Run where the
        handshakes run (the event loop): loading sets the certificate, then the key, and
        a handshake between the two would offer a certificate its key does not match."""
        if found is None:
            return None
        cert, signature = found
        if _signature(cert) != signature:
            return None  # rewritten since it was checked: the next check takes it
        try:
            cert.load_into(self.context)
        except (OSError, ssl.SSLError) as exc:
            _not_loaded(cert, exc)
            return None
        self._loaded = signature
        _log.info("TLS certificate %s %s: presenting it until %s", cert.cert,
                  "renewed" if cert.renewed else "changed", cert.not_after.isoformat())  # fmt: skip
        return cert

    async def run(self) -> None:
        """`check` every `interval` seconds (the file work off the event loop) until
        cancelled."""
        while True:
            await self._sleep(self.interval)
            try:
                self._present(await asyncio.to_thread(self._changed))
            except (OSError, SecurityError) as exc:
                _log.warning("TLS certificate %s: cannot check it: %s", self.name, exc)


def _not_loaded(cert: CertFiles, exc: Exception) -> None:
    _log.error("TLS certificate %s: cannot load the new one, keeping the old: %s", cert.cert, exc)


class RotatingServer(ApiServer):
    """An API's server (`htgrid.net._listen`), its `rotator` running while it serves."""

    def __init__(
        self, config: uvicorn.Config, rotator: CertRotator, *, signals: bool = True
    ) -> None:
        super().__init__(config, signals=signals)
        self.rotator = rotator
        self._rotating: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit:  # it listens
            self._rotating = asyncio.create_task(self.rotator.run(), name="TLS rotation")

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._rotating is not None:
            self._rotating.cancel()
            await asyncio.gather(self._rotating, return_exceptions=True)
        await super().shutdown(sockets)
