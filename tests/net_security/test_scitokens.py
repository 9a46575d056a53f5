"""Tokens of external issuers (SciTokens, WLCG tokens) at the gatekeeper, as HTCondor-CE
takes them: verified against the keys the issuer serves over HTTPS (a real issuer on
127.0.0.1 with its own test CA), mapped by the map file, or refused with the reason."""

from __future__ import annotations

import asyncio
import re
import stat
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from htgrid.net.security import (
    AuditEvent,
    AuditLog,
    DeniedIdentity,
    DenyList,
    ExpiredToken,
    ForgedToken,
    Gatekeeper,
    GatekeeperConfig,
    InsufficientScope,
    IssuerKeys,
    IssuerSettings,
    IssuerUnavailable,
    MalformedToken,
    Principal,
    SecurityConfig,
    TokenAuthMiddleware,
    TokenIssuer,
    TokenNotYetValid,
    UnknownKey,
    UnmappedIdentity,
    WrongAudience,
    principal_of,
)
from htgrid.net.security._audit import Rotation, parse_rotation
from htgrid.pool import KNOBS, PoolError
from htgrid.testing.issuer import TestIssuer, issuers, new_key

from ._support import NOW, FakeClock

AUD = "ce.test:9619"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestIssuer]:
    yield from issuers(tmp_path_factory.mktemp("issuer"))


@pytest.fixture(autouse=True)
def _fresh_issuer(issuer: TestIssuer) -> None:
    issuer.mode = "ok"
    issuer.requests.clear()


def _deny_defaults() -> DenyList:
    return DenyList(
        {
            level: tuple(n.strip() for n in (KNOBS[f"DENY_{level}"] or "").split(",") if n.strip())
            for level in ("READ", "WRITE", "NEGOTIATOR", "ADMINISTRATOR", "DAEMON")
        }
    )


class Gate:
    """A gatekeeper of pool.test whose map file takes the test issuer's tokens."""

    def __init__(self, home: Path, issuer: TestIssuer, clock: FakeClock, **settings: object):
        self.mapfile = home / "etc" / "mapfile"
        self.mapfile.parent.mkdir(parents=True)
        url = re.escape(issuer.url).replace("/", "\\/")
        self.mapfile.write_text(
            f"SCITOKENS /^{url},banned-(.*)$/ \\1@banned.htcondor.org\n"
            f"SCITOKENS /^{url},pilot-(\\w+)$/ \\1\n"
            f"SCITOKENS {issuer.url},frida frida@pool.test\n"
        )
        self.config = SecurityConfig(home, "pool.test")
        self.settings = GatekeeperConfig(
            mapfile=self.mapfile,
            audiences=(AUD,),
            uid_domain="users.htcondor.org",
            deny=_deny_defaults(),
            issuers=IssuerSettings(ca_files=(issuer.ca,), timeout=2.0),
            audit_log=None,
        )
        self.settings = replace(self.settings, **settings)  # type: ignore[arg-type]
        self.keys = IssuerKeys(self.settings.issuers, clock=clock)
        self.gate = Gatekeeper(self.config, self.settings, clock=clock, keys=self.keys)

    def verify(self, token: str) -> Principal:
        return asyncio.run(self.gate.verify(token))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gate(tmp_path: Path, issuer: TestIssuer, clock: FakeClock) -> Gate:
    return Gate(tmp_path / "pool", issuer, clock)


def test_a_mapped_wlcg_token_is_its_local_user_with_write(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    principal = gate.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now))
    assert (principal.user, principal.canonical) == ("alice", "alice@users.htcondor.org")
    assert (principal.method, principal.issuer, principal.subject) == (
        "SCITOKENS",
        issuer.url,
        "pilot-alice",
    )
    assert principal.require("WRITE").allows("READ") and not principal.is_admin
    # The issuer was asked once: discovery, then its keys; later tokens use them.
    assert issuer.requests == ["/.well-known/openid-configuration", "/jwks"]
    assert gate.verify(issuer.mint("frida", aud=[AUD, "other"], now=clock.now)).user == "frida"
    assert len(issuer.requests) == 2


def test_scopes_grant_what_htcondor_reads_in_them(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    reader = gate.verify(issuer.mint("pilot-bob", aud=AUD, scope="compute.read", now=clock.now))
    assert reader.allows("READ")
    with pytest.raises(InsufficientScope, match="does not grant WRITE"):
        reader.require("WRITE")
    condor = gate.verify(issuer.mint("pilot-bob", aud=AUD, scope="condor:/WRITE", now=clock.now))
    assert condor.allows("WRITE")
    nothing = gate.verify(issuer.mint("pilot-bob", aud=AUD, scope="storage.read:/", now=clock.now))
    assert not nothing.allows("READ")


def test_a_forged_signature_is_refused(gate: Gate, issuer: TestIssuer, clock: FakeClock) -> None:
    # Signed with another key under the issuer's kid: what a thief without the key can do.
    forged = issuer.mint("pilot-alice", aud=AUD, now=clock.now, key=new_key(issuer.alg))
    with pytest.raises(ForgedToken, match="signature is not that of issuer"):
        gate.verify(forged)
    head, _, sig = issuer.mint("pilot-alice", aud=AUD, now=clock.now).split(".")
    other = issuer.mint("pilot-root", aud=AUD, now=clock.now).split(".")[1]
    with pytest.raises(ForgedToken):
        gate.verify(f"{head}.{other}.{sig}")


def test_algorithm_confusion_and_none_are_refused(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    claims = jwt.decode(
        issuer.mint("pilot-alice", aud=AUD, now=clock.now), options={"verify_signature": False}
    )
    # HS256 keyed with the issuer's public key: taken as the pool's, whose key it is not.
    public = issuer.jwks()["keys"][0]["n"].encode()
    hs = jwt.encode(claims, public * 2, algorithm="HS256", headers={"kid": issuer.kid})
    with pytest.raises(UnknownKey, match="this pool has no signing key named 'key-"):
        gate.verify(hs)
    none = jwt.encode(claims, None, algorithm="none")  # type: ignore[arg-type]
    with pytest.raises(ForgedToken, match="algorithm is 'none'"):
        gate.verify(none)


def test_a_token_for_another_audience_is_refused(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    with pytest.raises(WrongAudience, match=r"meant for 'other\.ce:9619', not this service"):
        gate.verify(issuer.mint("pilot-alice", aud="other.ce:9619", now=clock.now))
    with pytest.raises(MalformedToken, match="aud claim is missing"):
        gate.verify(issuer.mint("pilot-alice", aud=[], now=clock.now))
    for anyone in ("https://wlcg.cern.ch/jwt/v1/any", "ANY"):
        assert gate.verify(issuer.mint("pilot-alice", aud=anyone, now=clock.now)).user == "alice"


def test_times_with_a_little_skew_forgiven(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    expired = issuer.mint("pilot-alice", aud=AUD, now=clock.now - 700)
    with pytest.raises(ExpiredToken, match=r"of 'pilot-alice' from .* expired at .*\(100 s ago\)"):
        gate.verify(expired)
    skewed = issuer.mint("pilot-alice", aud=AUD, now=clock.now + 20)  # a clock 20 s ahead
    assert gate.verify(skewed).user == "alice"
    with pytest.raises(TokenNotYetValid, match=r"valid from .* 120 s from now"):
        gate.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now + 120))
    with pytest.raises(MalformedToken, match="must have exp and iat"):
        gate.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now, exp=None))


def test_an_issuer_no_line_names_is_refused_without_asking_it(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    stranger = issuer.mint("pilot-x", aud=AUD, now=clock.now, iss="https://127.0.0.1:1/evil")
    with pytest.raises(UnmappedIdentity, match=r"no SCITOKENS line of the map file .* maps"):
        gate.verify(stranger)
    assert issuer.requests == []  # no key was fetched for a token nobody may use


def test_an_unmapped_subject_of_a_named_issuer_may_read_but_not_submit(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    """HTCondor's scitokens@unmapped: verified, READ only, and DENY_WRITE's *@unmapped."""
    token = issuer.mint("nobody", aud=AUD, now=clock.now, scope="condor:/READ condor:/WRITE")
    principal = gate.verify(token)
    assert (principal.canonical, principal.user, principal.subject) == (
        "scitokens@unmapped",
        "scitokens",
        "nobody",
    )
    assert principal.allows("READ") and not principal.allows("WRITE")
    assert not principal.is_admin
    gate.gate.admit(principal, "READ", "127.0.0.1")
    with pytest.raises(DeniedIdentity, match=r"refused WRITE: DENY_WRITE lists \*@unmapped"):
        gate.gate.admit(principal, "WRITE", "127.0.0.1")
    assert issuer.requests == ["/.well-known/openid-configuration", "/jwks"]
    # Verified all the same: another key's signature is refused.
    forged = issuer.mint("nobody", aud=AUD, now=clock.now, key=new_key(issuer.alg))
    with pytest.raises(ForgedToken):
        gate.verify(forged)


def test_sec_scitokens_allowed_issuers_bounds_whose_keys_are_fetched(
    tmp_path: Path, issuer: TestIssuer, clock: FakeClock
) -> None:
    other = Gate(tmp_path / "other", issuer, clock, allowed_issuers=("https://other.example",))
    # Mapped by a line, but not an issuer the knob lists: refused, nothing fetched.
    with pytest.raises(UnmappedIdentity, match=r"SEC_SCITOKENS_ALLOWED_ISSUERS .* does not"):
        other.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now))
    # A line that maps any issuer's tokens names none: unset, the knob names none either.
    catch_all = "SCITOKENS /^https:\\/\\/.*,(\\w+)$/ \\1\n"
    anyone_mapped = Gate(tmp_path / "catch-all", issuer, clock)
    anyone_mapped.mapfile.write_text(catch_all)
    with pytest.raises(UnmappedIdentity, match=r"names no one issuer, and SEC_SCITOKENS_ALLOWED"):
        anyone_mapped.verify(issuer.mint("alice", aud=AUD, now=clock.now))
    assert issuer.requests == []
    listing = Gate(tmp_path / "catch-all-listed", issuer, clock, allowed_issuers=(issuer.url,))
    listing.mapfile.write_text(catch_all)
    assert listing.verify(issuer.mint("alice", aud=AUD, now=clock.now)).user == "alice"
    listed = Gate(tmp_path / "listed", issuer, clock, allowed_issuers=(issuer.url,))
    assert listed.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now)).user == "alice"
    assert listed.verify(issuer.mint("nobody", aud=AUD, now=clock.now)).canonical == (
        "scitokens@unmapped"
    )
    # `*`: any issuer's keys are fetched, as HTCondor does (this one answers nothing).
    anyone = Gate(tmp_path / "any", issuer, clock, allowed_issuers=("*",))
    with pytest.raises(IssuerUnavailable):
        anyone.verify(issuer.mint("x", aud=AUD, now=clock.now, iss="https://127.0.0.1:1/else"))


def test_a_banned_subject_is_refused_write(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    principal = gate.verify(issuer.mint("banned-eve", aud=AUD, now=clock.now))
    assert principal.canonical == "eve@banned.htcondor.org"
    gate.gate.admit(principal, "READ", "127.0.0.1")  # HTCondor-CE bans WRITE, not READ
    with pytest.raises(DeniedIdentity, match=r"refused WRITE: DENY_WRITE lists \*@banned"):
        gate.gate.admit(principal, "WRITE", "127.0.0.1")
    assert DeniedIdentity.status == 403


def test_deny_and_allow_are_read_again_when_the_pool_config_changes(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    principal = gate.verify(issuer.mint("pilot-dan", aud=AUD, now=clock.now))
    conf = gate.config.home / "htgrid.conf"
    gate.gate.admit(principal, "WRITE", "127.0.0.1")
    # An admin bans dan in the running pool's htgrid.conf: no restart.
    conf.write_text("DENY_WRITE = dan@*\n")
    with pytest.raises(DeniedIdentity, match=r"refused WRITE: DENY_WRITE lists dan@\*"):
        gate.gate.admit(principal, "WRITE", "127.0.0.1")
    gate.gate.admit(principal, "READ", "127.0.0.1")
    # ALLOW_ lets in only those it lists (DENY_ still wins).
    conf.write_text("ALLOW_WRITE = frida@*, */127.0.0.9\nALLOW_READ = *\n")
    with pytest.raises(DeniedIdentity, match=r"ALLOW_WRITE \(frida@\*, \*/127.0.0.9\) does not"):
        gate.gate.admit(principal, "WRITE", "127.0.0.1")
    gate.gate.admit(principal, "WRITE", "127.0.0.9")
    gate.gate.admit(principal, "READ", "127.0.0.1")
    # A file that cannot be read as a config keeps the lists last read.
    conf.write_text("ALLOW_WRITE\n")
    with pytest.raises(DeniedIdentity, match="ALLOW_WRITE"):
        gate.gate.admit(principal, "WRITE", "127.0.0.1")
    conf.write_text("# nothing set: HTCondor-CE's defaults\n")
    gate.gate.admit(principal, "WRITE", "127.0.0.1")


def test_deny_lists_as_htcondor_writes_them() -> None:
    deny = DenyList({"WRITE": ("bob@site.org/10.0.*", "*.bad.org", "carol@*")})
    assert deny.denied("bob@site.org", "WRITE", "10.0.0.7") == "bob@site.org/10.0.*"
    assert deny.denied("bob@site.org", "WRITE", "127.0.0.1") is None
    assert deny.denied("anyone@x", "WRITE", "h.bad.org") == "*.bad.org"  # a host entry
    assert deny.denied("carol@elsewhere", "WRITE", "127.0.0.1") == "carol@*"
    assert deny.denied("carol@elsewhere", "READ", "127.0.0.1") is None


def test_a_rotated_key_is_fetched_and_the_old_one_goes(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    old = issuer.mint("pilot-alice", aud=AUD, now=clock.now)
    assert gate.verify(old).user == "alice"
    issuer.rotate()
    new = issuer.mint("pilot-alice", aud=AUD, now=clock.now)
    # Just fetched: an unknown kid does not make the issuer be asked again at once...
    with pytest.raises(UnknownKey, match="has no key 'key-"):
        gate.verify(new)
    assert len(issuer.requests) == 2
    clock.advance(31)  # ...but after IssuerSettings.rotation (30 s) it does
    assert gate.verify(new).user == "alice"
    assert len(issuer.requests) == 4
    with pytest.raises(UnknownKey):
        gate.verify(old)  # the key the issuer no longer publishes is gone here too


def test_an_issuer_that_is_down_refuses_with_the_reason_and_is_not_hammered(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    issuer.mode = "down"
    token = issuer.mint("pilot-alice", aud=AUD, now=clock.now)
    with pytest.raises(IssuerUnavailable, match=r"keys of issuer .* cannot be had: .*openid"):
        gate.verify(token)
    asked = len(issuer.requests)
    with pytest.raises(IssuerUnavailable, match=r"0 s ago; asked again after 60 s"):
        gate.verify(token)
    assert len(issuer.requests) == asked  # not asked again meanwhile
    issuer.mode = "ok"
    clock.advance(61)
    token = issuer.mint("pilot-alice", aud=AUD, now=clock.now)
    assert gate.verify(token).user == "alice"


def test_keys_held_serve_while_the_issuer_is_down(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    assert gate.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now)).user == "alice"
    issuer.mode = "down"
    clock.advance(3600)  # past the refresh: fetched again, which fails
    assert gate.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now)).user == "alice"
    assert len(issuer.requests) == 3
    clock.advance(5 * 86400)  # past their lifetime: no longer believed
    with pytest.raises(IssuerUnavailable):
        gate.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now))


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("bad-keys", "holds no usable signing key"),
        ("wrong-issuer", "its discovery document names the issuer 'https://elsewhere.test'"),
        ("hang", "no answer within 2 s"),
    ],
)
def test_an_issuer_serving_nonsense_or_nothing_is_refused(
    gate: Gate, issuer: TestIssuer, clock: FakeClock, mode: str, reason: str
) -> None:
    issuer.mode = mode
    with pytest.raises(IssuerUnavailable, match=reason):
        gate.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now))


def test_an_issuer_is_trusted_once_its_ca_is_among_the_pools(
    tmp_path: Path, issuer: TestIssuer, clock: FakeClock
) -> None:
    trusted = tmp_path / "pool" / "etc" / "ca" / "trusted.d"
    settings = IssuerSettings(ca_dir=trusted, timeout=2.0, retry=0)
    gate = Gate(tmp_path / "pool", issuer, clock, issuers=settings)
    with pytest.raises(IssuerUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        gate.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now))
    trusted.mkdir(parents=True)
    (trusted / "issuer.crt").write_bytes(issuer.ca.read_bytes())  # `htgrid trust add`
    assert gate.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now)).user == "alice"


def test_many_requests_at_once_share_one_fetch(
    gate: Gate, issuer: TestIssuer, clock: FakeClock
) -> None:
    tokens = [issuer.mint(f"pilot-u{i}", aud=AUD, now=clock.now) for i in range(20)]

    async def all_at_once() -> list[str]:
        return [p.user for p in await asyncio.gather(*(gate.gate.verify(t) for t in tokens))]

    assert asyncio.run(all_at_once()) == [f"u{i}" for i in range(20)]
    assert issuer.requests == ["/.well-known/openid-configuration", "/jwks"]


def test_the_pools_own_tokens_still_go_their_way(gate: Gate, clock: FakeClock) -> None:
    token = TokenIssuer(gate.config, clock=clock).create("alice@pool.test", authz=["WRITE"])
    principal = gate.verify(token)
    assert (principal.user, principal.method, principal.canonical) == (
        "alice",
        "IDTOKENS",
        "alice@pool.test",
    )


def test_es256_issuers_too(tmp_path: Path, clock: FakeClock) -> None:
    with TestIssuer(tmp_path / "ec", alg="ES256") as ec_issuer:
        gate = Gate(tmp_path / "pool", ec_issuer, clock)
        assert gate.verify(ec_issuer.mint("pilot-dan", aud=AUD, now=clock.now)).user == "dan"


def test_the_knobs_as_htcondor_ce_names_them(tmp_path: Path) -> None:
    home = tmp_path / "ce"
    home.mkdir()
    (home / "htgrid.conf").write_text(
        "COLLECTOR_HOST = ce.test:9619\nCERTIFICATE_MAPFILE = /etc/htgrid-ce/condor_mapfile\n"
        "DENY_WRITE = *@banned.htcondor.org, mallory@*\n"
        "UID_DOMAIN = users.htcondor.org\n"
    )
    settings = GatekeeperConfig.load(home, "SCHEDD")
    assert settings.audiences == ("ce.test:9619",)  # SCITOKENS_SERVER_AUDIENCE's default
    assert settings.mapfile == Path("/etc/htgrid-ce/condor_mapfile")
    assert settings.issuers.ca_dir == home / "etc" / "ca" / "trusted.d"  # AUTH_SSL_CLIENT_CADIR
    assert settings.issuers.system_cas
    assert settings.deny.entries["WRITE"] == ("*@banned.htcondor.org", "mallory@*")
    assert settings.deny.entries["READ"] == ()
    assert settings.audit_log == home / "log" / "AuditLog"
    assert GatekeeperConfig.load(home, "COLLECTOR").audit_log is None
    assert settings.issuers.cache_dir == home / "run" / "cache"  # SEC_SCITOKENS_CACHE
    (home / "htgrid.conf").write_text("SCITOKENS_SERVER_AUDIENCE = https://ce.test, ce.test:9619\n")
    assert GatekeeperConfig.load(home).audiences == ("https://ce.test", "ce.test:9619")
    assert GatekeeperConfig.load(home).mapfile == home / "etc" / "mapfile"
    assert GatekeeperConfig.load(home).allowed_issuers is None  # the map file's issuers
    (home / "htgrid.conf").write_text(
        "SEC_SCITOKENS_ALLOWED_ISSUERS = https://a.example, https://b.example/x\n"
    )
    assert GatekeeperConfig.load(home).allowed_issuers == (
        "https://a.example",
        "https://b.example/x",
    )


# -- over HTTP, audited ------------------------------------------------------------------


class Http:
    """Requests to an ASGI app from 127.0.0.1:40112, each in its own event loop."""

    def __init__(self, app: Any) -> None:
        self.transport = httpx.ASGITransport(app, client=("127.0.0.1", 40112))

    def request(self, method: str, path: str, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}

        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=self.transport, base_url="http://ce") as c:
                return await c.request(method, path, headers=headers)

        return asyncio.run(go())


def _app(gate: Gate, log: Path) -> Http:
    async def jobs(request: Request) -> Response:
        return JSONResponse({"owner": principal_of(request).user}, 201)

    async def read(request: Request) -> Response:
        return JSONResponse({"you": principal_of(request).user})

    routes = [Route("/v1/jobs", jobs, methods=["POST"]), Route("/v1/jobs", read, methods=["GET"])]
    app = TokenAuthMiddleware(
        Starlette(routes=routes),
        gate.gate.verify,
        realm="pool.test",
        admit=gate.gate.admit,
        audit=AuditLog(log, clock=lambda: NOW),
    )
    return Http(app)


def test_every_submit_accepted_or_refused_is_in_the_audit_log(
    gate: Gate, issuer: TestIssuer, clock: FakeClock, tmp_path: Path
) -> None:
    log = tmp_path / "log" / "AuditLog"
    good = issuer.mint("pilot-alice", aud=AUD, now=clock.now)
    banned = issuer.mint("banned-eve", aud=AUD, now=clock.now)
    elsewhere = issuer.mint("pilot-alice", aud="other.ce:9619", now=clock.now)
    http = _app(gate, log)
    accepted = http.request("POST", "/v1/jobs", good)
    assert (accepted.status_code, accepted.json()) == (201, {"owner": "alice"})
    refused = http.request("POST", "/v1/jobs", banned)
    assert refused.status_code == 403
    assert "DENY_WRITE lists *@banned.htcondor.org" in refused.json()["detail"]
    wrong = http.request("POST", "/v1/jobs", elsewhere)
    assert wrong.status_code == 401 and wrong.json()["error"] == "WrongAudience"
    assert http.request("POST", "/v1/jobs").status_code == 401
    assert http.request("GET", "/v1/jobs", banned).json() == {"you": "eve"}
    lines = log.read_text().splitlines()
    assert len(lines) == 4  # the READ is not a change: not audited
    when = "2027-01-15T08:00:00Z"
    assert lines[0].startswith(f"{when} accepted POST /v1/jobs from 127.0.0.1:40112 status=201")
    assert f'method=SCITOKENS issuer="{issuer.url}" subject="pilot-alice"' in lines[0]
    assert 'mapped="alice@users.htcondor.org" user="alice"' in lines[0]
    assert lines[1].startswith(f"{when} refused POST /v1/jobs from 127.0.0.1:40112 status=403")
    assert 'subject="banned-eve"' in lines[1] and 'reason="DeniedIdentity: ' in lines[1]
    assert 'reason="WrongAudience: ' in lines[2] and "other.ce:9619" in lines[2]
    assert "method=- (no token)" in lines[3] and 'reason="MissingToken: ' in lines[3]
    text = log.read_text()
    for token in (good, banned, elsewhere):  # secrets never in it
        assert token not in text and token.split(".")[2] not in text
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_an_audit_log_others_could_read_is_closed_and_a_forged_line_cannot_be_made(
    gate: Gate, issuer: TestIssuer, clock: FakeClock, tmp_path: Path
) -> None:
    log = tmp_path / "AuditLog"
    log.write_text("")
    log.chmod(0o644)
    sneaky = issuer.mint('pilot-x"\nforged accepted', aud=AUD, now=clock.now)
    # No line maps it: scitokens@unmapped, who may not submit.
    assert _app(gate, log).request("POST", "/v1/jobs", sneaky).status_code == 403
    (line,) = log.read_text().splitlines()
    assert 'subject="pilot-x\\"forged accepted"' in line
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_the_audit_log_is_rotated_as_htcondor_ce_keeps_it(tmp_path: Path) -> None:
    now = [NOW]
    log = AuditLog(tmp_path / "AuditLog", rotation=Rotation(86400, None, 2), clock=lambda: now[0])
    event = AuditEvent(False, "POST /v1/jobs", "127.0.0.1:1", 401, reason="MissingToken: none")
    for day in range(4):
        now[0] = NOW + day * 86400
        log.record(event)
        log.record(event)
    rotated = sorted(p.name for p in tmp_path.iterdir() if p.name != "AuditLog")
    assert rotated == ["AuditLog.20270117T080000", "AuditLog.20270118T080000"]  # 2 kept
    assert (tmp_path / "AuditLog").read_text().count("\n") == 2  # today's two
    assert (tmp_path / "AuditLog.20270118T080000").read_text().startswith("2027-01-17T08")
    by_size = AuditLog(tmp_path / "s" / "AuditLog", rotation=parse_rotation("300", 5))
    for _ in range(4):
        by_size.record(event)
    assert all(p.stat().st_size <= 300 for p in (tmp_path / "s").iterdir())
    assert len(list((tmp_path / "s").iterdir())) > 1


def test_audit_log_rotation_knobs(tmp_path: Path) -> None:
    assert parse_rotation("12h", 7) == Rotation(43200, None, 7)
    assert parse_rotation("0", 7) == Rotation(None, None, 7)
    (tmp_path / "htgrid.conf").write_text(
        "MAX_SCHEDD_AUDIT_LOG = 30m\nMAX_NUM_SCHEDD_AUDIT_LOG = 3\n"
    )
    assert GatekeeperConfig.load(tmp_path).audit_rotation == Rotation(1800, None, 3)
    assert GatekeeperConfig.load(tmp_path, "COLLECTOR").audit_rotation == Rotation(86400, None, 90)
    (tmp_path / "htgrid.conf").write_text("\nMAX_SCHEDD_AUDIT_LOG = often\n")
    with pytest.raises(PoolError, match=r"htgrid\.conf:2: MAX_SCHEDD_AUDIT_LOG 'often' is neither"):
        GatekeeperConfig.load(tmp_path)


def test_kept_keys_let_a_restarted_daemon_take_tokens_while_the_issuer_is_down(
    tmp_path: Path, issuer: TestIssuer, clock: FakeClock
) -> None:
    cache = tmp_path / "run" / "cache"
    settings = IssuerSettings(ca_files=(issuer.ca,), timeout=2.0, cache_dir=cache)
    first = Gate(tmp_path / "one", issuer, clock, issuers=settings)
    assert first.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now)).user == "alice"
    (kept,) = cache.iterdir()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    issuer.mode = "down"
    clock.advance(3600)
    restarted = Gate(tmp_path / "two", issuer, clock, issuers=settings)  # nothing in memory
    assert restarted.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now)).user == "alice"
    kept.write_text('{"issuer": "elsewhere"}')  # not this issuer's: not used
    again = Gate(tmp_path / "three", issuer, clock, issuers=settings)
    with pytest.raises(IssuerUnavailable):
        again.verify(issuer.mint("pilot-alice", aud=AUD, now=clock.now))
