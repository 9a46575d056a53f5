"""`htgrid web`: the web view for the pool host's own users, with no token.

The proxy listens on 127.0.0.1 and passes each /web request to the schedd's Unix socket,
which names the caller by the kernel's word on the connecting process: this one, run by
the user. So that no other user of the host borrows that identity through the port, the
proxy takes only requests carrying its key: the URL it prints holds it once, the
browser keeps it in a cookie (HttpOnly, SameSite=Strict) and the address bar loses it;
and it answers only requests addressed to 127.0.0.1 or localhost (no DNS rebinding).
The key lives as long as the proxy, in its memory alone.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from htgrid.errors import HTGridError
from htgrid.net.server import ApiServer, api_config, start, tcp_listener
from htgrid.pool import DEFAULT_LIMITS
from htgrid.web.app import SECURITY_HEADERS

__all__ = ["KEY_COOKIE", "LocalProxy", "run_proxy"]

KEY_COOKIE: Final = "htgrid_web_key"
_PASSED: Final = (
    "content-type",
    "location",
    "cache-control",
    *(h.lower() for h in SECURITY_HEADERS),
)


class LocalProxy:
    """The proxy's app: /web requests with the key go to the schedd's socket."""

    def __init__(self, socket: Path, port: int, *, key: str | None = None) -> None:
        self.socket = socket
        self.port = port
        self.key = key or secrets.token_urlsafe(24)
        self.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})
        self.app = Starlette(routes=[Route("/{path:path}", self._serve, methods=["GET"])])

    @property
    def url(self) -> str:
        """Where the user's browser goes first (with the key, once)."""
        return f"http://127.0.0.1:{self.port}/web/?key={self.key}"

    def _refuse(self, why: str) -> Response:
        return Response(why + "\n", 403, media_type="text/plain", headers=dict(SECURITY_HEADERS))

    async def _serve(self, request: Request) -> Response:
        if request.headers.get("host") not in self.hosts:
            return self._refuse("this proxy answers requests to 127.0.0.1 and localhost only")
        given = request.query_params.get("key")
        if given is not None:
            if not hmac.compare_digest(given.encode(), self.key.encode()):
                return self._refuse("that is not this proxy's key: use the URL htgrid web printed")
            rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "key"])
            target = request.url.path + (f"?{rest}" if rest else "")
            answer = RedirectResponse(target, status_code=303)
            answer.set_cookie(KEY_COOKIE, self.key, httponly=True, samesite="strict")
            return answer
        cookie = request.cookies.get(KEY_COOKIE, "")
        if not hmac.compare_digest(cookie.encode(), self.key.encode()):
            return self._refuse("open the URL htgrid web printed (it holds this proxy's key)")
        path = request.url.path
        if path == "/":
            return RedirectResponse("/web/", status_code=303)
        if not path.startswith("/web/"):
            return Response("not found\n", 404, media_type="text/plain")
        transport = httpx.AsyncHTTPTransport(uds=str(self.socket))
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost", timeout=60
            ) as client:
                upstream = await client.get(path, params=request.query_params)
        except httpx.HTTPError as exc:
            return Response(
                f"the pool's daemon does not answer on {self.socket}: {exc}\n",
                502,
                media_type="text/plain",
            )
        headers = {k: v for k, v in upstream.headers.items() if k.lower() in _PASSED}
        return Response(upstream.content, upstream.status_code, headers=headers)


async def run_proxy(
    socket: Path, port: int = 0, *, ready: Callable[[str], None], key: str | None = None
) -> None:
    """Serve the proxy on 127.0.0.1:`port` (any free one for 0) until SIGINT or SIGTERM;
    `ready` is given its URL once it listens."""
    sock = tcp_listener("127.0.0.1")
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise HTGridError(
            f"htgrid web: cannot listen on 127.0.0.1:{port}: {exc.strerror}"
        ) from None
    proxy = LocalProxy(socket, sock.getsockname()[1], key=key)
    server = ApiServer(api_config(proxy.app, DEFAULT_LIMITS))
    serving = await start(server, sock, "the web proxy", HTGridError)
    ready(proxy.url)
    await serving
