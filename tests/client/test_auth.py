"""The one auth class (htgrid.client.BearerAuth), for each way it is given its token: the
command line's (found by the realm of a 401), a daemon's (its pool's trust domain known),
a given token, and a GAHP's token file and directories."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from htgrid.client import BearerAuth, TokenSource

from ._support import jwt

NOW = 1_800_000_000.0
REALM = "pool.test"


class Server:
    """An API that takes one token, answering the others 401 with its realm."""

    def __init__(self, good: str) -> None:
        self.good = good
        self.seen: list[str | None] = []  # the token of each request
        self.bodies: list[bytes] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        sent = request.headers.get("Authorization")
        self.seen.append(sent.removeprefix("Bearer ") if sent else None)
        if sent == f"Bearer {self.good}":
            return httpx.Response(200, json={"ok": True})
        challenge = f'Bearer realm="{REALM}", error="invalid_token"'
        return httpx.Response(401, headers={"WWW-Authenticate": challenge})

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(await request.aread())
        return self(request)

    def get(self, auth: BearerAuth) -> int:
        with httpx.Client(auth=auth, transport=httpx.MockTransport(self)) as client:
            return client.get("https://cm.test/v1/health").status_code


class Finder:
    """The tokens at hand, by issuer; counts the searches."""

    def __init__(self, **tokens: str) -> None:
        self.tokens = {k.replace("_", "."): v for k, v in tokens.items()}
        self.asked: list[str] = []

    def __call__(self, issuer: str) -> str | None:
        self.asked.append(issuer)
        return self.tokens.get(issuer)


def test_the_trust_domain_is_learnt_from_the_first_401_then_its_token_goes_first() -> None:
    good = jwt(REALM, exp=NOW + 3600)
    server, find = Server(good), Finder(pool_test=good)
    auth = BearerAuth(find=find, clock=lambda: NOW)
    assert server.get(auth) == 200
    assert server.get(auth) == 200
    assert server.seen == [None, good, good]
    assert find.asked == [REALM] and auth.issuer == REALM


def test_a_given_token_is_presented_to_every_server_and_a_401_stands() -> None:
    server = Server(jwt(REALM))
    mine = jwt("other.test")
    assert server.get(BearerAuth(mine, find=Finder(pool_test=jwt(REALM)))) == 401
    assert server.seen == [mine]


def test_a_daemon_presents_its_pools_token_at_once_and_renews_it_before_it_expires() -> None:
    clock = [NOW]
    first, second = jwt(REALM, "a", exp=NOW + 100), jwt(REALM, "b", exp=NOW + 10_000)
    find = Finder(pool_test=first)
    server = Server(first)
    auth = BearerAuth(issuer=REALM, find=find, clock=lambda: clock[0])
    assert server.get(auth) == 200
    assert server.get(auth) == 200
    assert find.asked == [REALM]  # kept
    clock[0] = NOW + 80  # within 30 s of its expiry: looked for again
    find.tokens[REALM] = server.good = second
    assert server.get(auth) == 200
    assert server.seen == [first, first, second] and find.asked == [REALM, REALM]


def test_a_token_refused_is_replaced_by_another_found_for_the_realm() -> None:
    old, new = jwt(REALM, "old"), jwt(REALM, "new")
    find = Finder(pool_test=old)
    server = Server(new)
    auth = BearerAuth(issuer=REALM, find=find, clock=lambda: NOW)
    assert server.get(auth) == 401  # nothing better to offer: the 401 stands
    assert server.seen == [old] and find.asked == [REALM, REALM]  # looked for again
    find.tokens[REALM] = new  # renewed, say by `htgrid up`
    server.seen.clear()
    assert server.get(auth) == 200
    assert server.seen == [old, new]


def test_a_gahps_token_file_is_read_again_after_a_401(tmp_path: Path) -> None:
    path = tmp_path / "token"
    old, new = jwt(REALM, "old"), jwt(REALM, "new")
    path.write_text(old + "\n")
    source = TokenSource(path, [tmp_path / "never-searched"])
    auth = BearerAuth(source=source)
    server = Server(old)
    assert server.get(auth) == 200
    path.write_text(new + "\n")  # renewed in place
    server.good = new
    assert server.get(auth) == 200  # the kept token refused, the file read again
    assert server.seen == [old, old, new]
    # UPDATE_TOKEN names another file: what was read is forgotten.
    other = tmp_path / "other"
    other.write_text(jwt(REALM, "other") + "\n")
    source.token_file = other
    auth.reset()
    server.good = jwt(REALM, "other")
    server.seen.clear()
    assert server.get(auth) == 200 and server.seen == [server.good]


def test_a_gahp_without_a_token_file_searches_its_directories(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.d"
    tokens.mkdir()
    good = jwt(REALM, exp=NOW + 3600)
    (tokens / "b").write_text(good + "\n")
    (tokens / "a").write_text(jwt("other.test") + "\n")
    server = Server(good)
    auth = BearerAuth(source=TokenSource(None, [tokens], clock=lambda: NOW), clock=lambda: NOW)
    assert server.get(auth) == 200
    assert server.get(auth) == 200
    assert server.seen == [None, good, good]


def test_a_streamed_body_goes_whole_again_with_the_token() -> None:
    # The condor GAHP streams sandboxes (FileBody): the body is not read into memory
    # first, and its second iteration starts again from the beginning.
    good = jwt(REALM)
    server = Server(good)

    class Body:
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for chunk in (b"first ", b"second"):
                yield chunk

    async def put() -> int:
        transport = httpx.MockTransport(server.handle)
        auth = BearerAuth(find=Finder(pool_test=good))
        async with httpx.AsyncClient(auth=auth, transport=transport) as client:
            response = await client.put("https://s.test/v1/jobs/input", content=Body())
            return response.status_code

    assert asyncio.run(put()) == 200
    assert server.bodies == [b"first second", b"first second"]


@pytest.mark.parametrize("challenge", ["", 'Basic realm="x"', "Bearer"])
def test_a_401_without_a_bearer_realm_stands(challenge: str) -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, headers={"WWW-Authenticate": challenge} if challenge else {})

    auth = BearerAuth(find=lambda issuer: asked.append(issuer) or jwt(issuer))
    with httpx.Client(auth=auth, transport=httpx.MockTransport(handler)) as client:
        assert client.get("https://s.test/").status_code == 401
    assert asked == []
