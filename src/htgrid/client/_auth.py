"""`BearerAuth`: httpx sending the right token to an htgrid API, the one way every client does.

    httpx.AsyncClient(base_url=url, auth=BearerAuth(), ...)           # found by realm
    BearerAuth(token)                                                 # this one, always
    BearerAuth(issuer=trust_domain, find=daemon_token)                # a pool's daemon
    BearerAuth(source=TokenSource(token_file, token_dirs))            # a GAHP's options

The token sent first is the one given (or the token file's), else the one found for the
server's trust domain: `issuer` when known, else learnt from the first 401 (`WWW-
Authenticate: Bearer realm="<trust domain>"`, the way an HTCondor client learns the
server's issuer before choosing a token), the request then sent once more with it. A
token found is kept until it is about to expire; after a 401 the token is looked for
again (a token file renewed in place is read again) and, when another is found, the
request is sent once more with it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Generator, Mapping
from typing import Final

import httpx

from htgrid.client._jwt import NotAToken
from htgrid.client._tokens import StoredToken, TokenSource, find_token

__all__ = ["BearerAuth", "Finder", "realm_of"]

_REALM: Final = re.compile(r'\bBearer\b[^,]*?\brealm="([^"]*)"', re.IGNORECASE)
_MARGIN: Final = 30.0  # do not present a token this close to its expiry

Finder = Callable[[str], str | None]
"""The token to present to a server of a trust domain (None: none is at hand)."""


def realm_of(headers: Mapping[str, str]) -> str | None:
    """The trust domain a 401's `headers` name (`WWW-Authenticate: Bearer realm="..."`),
    if any (httpx's headers, or `Http11`'s, their names in lower case)."""
    match = _REALM.search(headers.get("www-authenticate", ""))
    return match[1] if match else None


class BearerAuth(httpx.Auth):
    """Adds `Authorization: Bearer <token>`: a given token, or the one for the server's pool."""

    # A refused request is sent again, body and all. The bodies htgrid sends are bytes, or
    # iterate from their start each time (the condor GAHP's FileBody): httpx need not hold
    # a sandbox in memory to send it twice.
    requires_request_body = False

    def __init__(
        self,
        token: str | None = None,
        *,
        issuer: str | None = None,
        find: Finder = find_token,
        source: TokenSource | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`token` is presented to every server; `source` names a token file to present
        instead, or the directories to `find` tokens in; `issuer` is the trust domain
        whose token goes with the first request (None: learnt from a 401)."""
        self._given = token
        self._source = source
        self.issuer = issuer
        self._find = source.for_issuer if source is not None else find
        self._clock = clock
        self._read: str | None = None  # the token file's token...
        self._read_done = False  # ...once read
        self._found: dict[str, tuple[str, float | None]] = {}  # issuer -> token, exp

    def reset(self) -> None:
        """Forget the tokens read and found (the token file changed)."""
        self._read, self._read_done = None, False
        self._found.clear()

    def _fixed(self) -> bool:
        """Whether one token goes to every server: the given one or the token file's."""
        return self._given is not None or (
            self._source is not None and self._source.token_file is not None
        )

    def _fixed_token(self, again: bool) -> str | None:
        if self._given is not None or self._source is None:
            return self._given
        if again or not self._read_done:
            self._read, self._read_done = self._source.fixed(), True
        return self._read

    def _look_up(self, issuer: str) -> str | None:
        found = self._find(issuer)
        if found is None:
            self._found.pop(issuer, None)
            return None
        try:
            expires = StoredToken.read(found).expires
        except NotAToken:
            expires = None  # the server will say what is wrong with it
        self._found[issuer] = (found, expires)
        return found

    def first(self) -> str | None:
        """The token to present with a request (None: none until a 401 names the realm)."""
        if self._fixed():
            return self._fixed_token(again=False)
        if self.issuer is None:
            return None
        known = self._found.get(self.issuer)
        if known is not None and (known[1] is None or known[1] - _MARGIN > self._clock()):
            return known[0]
        return self._look_up(self.issuer)

    def after_refusal(self, sent: str | None, headers: Mapping[str, str]) -> str | None:
        """The token to send the request again with, after a 401 (its `headers`) to
        one sent with `sent`; None: nothing better to offer, the 401 stands."""
        if self._fixed():
            fresh = self._fixed_token(again=True)
        elif (realm := realm_of(headers)) is None:
            return None
        elif (fresh := self._look_up(realm)) is not None:
            self.issuer = realm
        return None if fresh == sent else fresh

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self.first()
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401:
            return
        fresh = self.after_refusal(token, response.headers)
        if fresh is None:
            return  # nothing better to offer: the 401 stands, with the server's reason
        request.headers["Authorization"] = f"Bearer {fresh}"
        yield request
