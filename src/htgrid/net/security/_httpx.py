"""The client side: httpx sending the right token over TLS that trusts the pool CA.

    client = httpx.Client(
        base_url="https://submit.example.org:9618",
        auth=BearerAuth(issuer="submit.example.org"),   # or BearerAuth(token) or BearerAuth()
        verify=client_ssl_context(trusted_ca_files(config)),
    )

Without a token or an issuer, the first request goes without a token; the server's 401
names its trust domain (`WWW-Authenticate: Bearer realm=...`) and the request is sent
again with the token found for it ($HTGRID_TOKEN, ~/.htgrid/tokens.d, then
$HTGRID_HOME/etc/tokens.d): the way an HTCondor client learns the server's issuer
before choosing a token. A token found is kept until it is about to expire.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Generator
from typing import Final

import httpx

from htgrid.net.security._errors import AuthError
from htgrid.net.security._tokenfiles import StoredToken, find_token

__all__ = ["BearerAuth"]

_REALM: Final = re.compile(r'\bBearer\b[^,]*?\brealm="([^"]*)"', re.IGNORECASE)
_MARGIN: Final = 30.0  # do not present a token this close to its expiry

Finder = Callable[[str], str | None]


class BearerAuth(httpx.Auth):
    """Adds `Authorization: Bearer <token>`: a given token, or the one for the server's pool."""

    requires_request_body = True  # so a request refused for want of a token can be re-sent

    def __init__(
        self,
        token: str | None = None,
        *,
        issuer: str | None = None,
        find: Finder = find_token,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fixed = token
        self.issuer = issuer
        self._find = find
        self._clock = clock
        self._cached: tuple[str, str, float | None] | None = None  # issuer, token, exp

    def _token_for(self, issuer: str) -> str | None:
        now = self._clock()
        if self._cached is not None:
            cached_issuer, token, expires = self._cached
            if cached_issuer == issuer and (expires is None or expires - _MARGIN > now):
                return token
        found = self._find(issuer)
        if found is None:
            self._cached = None
            return None
        try:
            expires = StoredToken.read(found).expires
        except AuthError:
            expires = None  # the server will say what is wrong with it
        self._cached = (issuer, found, expires)
        return found

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self._fixed or (self._token_for(self.issuer) if self.issuer else None)
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token}"
            yield request
            return
        response = yield request
        if response.status_code != 401:
            return
        match = _REALM.search(response.headers.get("WWW-Authenticate", ""))
        if match is None:
            return
        token = self._token_for(match[1])
        if token is None:
            return
        self.issuer = match[1]
        request.headers["Authorization"] = f"Bearer {token}"
        yield request
