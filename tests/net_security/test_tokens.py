"""Tokens as a pool's users meet them: made, accepted, and refused with a reason."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from htgrid.errors import HTGridError
from htgrid.net.security import (
    AuthError,
    ExpiredToken,
    ForgedToken,
    InsufficientScope,
    MalformedToken,
    RevokedToken,
    SecurityConfig,
    SecurityError,
    SigningKeys,
    TokenIssuer,
    TokenNotYetValid,
    TokenVerifier,
    UnknownKey,
    UntrustedIssuer,
)
from htgrid.net.security._jwt import encode

from ._support import FakeClock, b64, parts, sign

# -- what a token holds -----------------------------------------------------------------


def test_a_token_carries_htcondors_header_and_claims(issuer: TokenIssuer) -> None:
    token = issuer.create("alice@example.org", authz=["READ", "write"], lifetime=600)
    header, claims, _ = parts(token)
    assert header == {"alg": "HS256", "kid": "POOL"}
    assert set(claims) == {"sub", "iss", "iat", "exp", "jti", "scope"}
    assert claims["sub"] == "alice@example.org"
    assert claims["iss"] == "pool.test"
    assert claims["exp"] - claims["iat"] == 600
    assert claims["scope"] == "condor:/READ condor:/WRITE"
    assert len(claims["jti"]) == 32 and int(claims["jti"], 16) >= 0


def test_without_lifetime_or_authz_a_token_has_neither_claim(issuer: TokenIssuer) -> None:
    _, claims, _ = parts(issuer.create("bob"))
    assert "exp" not in claims and "scope" not in claims


def test_every_token_gets_its_own_id(issuer: TokenIssuer) -> None:
    ids = {parts(issuer.create("bob"))[1]["jti"] for _ in range(20)}
    assert len(ids) == 20


def test_unknown_authorization_is_refused_before_signing(issuer: TokenIssuer) -> None:
    with pytest.raises(ValueError, match="'FLY' is not an authorization"):
        issuer.create("bob", authz=["FLY"])


# -- the signing key ----------------------------------------------------------------------


def test_pool_key_is_made_on_first_use_readable_only_by_its_owner(
    issuer: TokenIssuer, config: SecurityConfig
) -> None:
    key = config.password_dir / "POOL"
    assert not key.exists()
    issuer.create("bob")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.password_dir.stat().st_mode) == 0o700
    assert len(key.read_bytes()) == 64
    first = key.read_bytes()
    issuer.create("carol")
    assert key.read_bytes() == first  # made once, then kept


def test_other_keys_must_exist(issuer: TokenIssuer) -> None:
    with pytest.raises(UnknownKey, match="no signing key named 'site'"):
        issuer.create("bob", key="site")
    assert SigningKeys(issuer.config.password_dir).ensure("site")
    assert parts(issuer.create("bob", key="site"))[0]["kid"] == "site"


def test_key_files_interoperate_with_htcondor(
    issuer: TokenIssuer, verifier: TokenVerifier, config: SecurityConfig
) -> None:
    """HTCondor's recipe (getTokenSigningKey, generate_token), done independently: the
    file XORed with DE AD BE EF, doubled for POOL, HKDF-SHA256 with salt "htcondor" and
    info "master jwt", then HMAC-SHA256 over header.payload."""
    config.password_dir.mkdir(parents=True, mode=0o700)
    secret = os.urandom(64)
    scrambled = bytes(b ^ (0xDE, 0xAD, 0xBE, 0xEF)[i % 4] for i, b in enumerate(secret))
    (config.password_dir / "POOL").write_bytes(scrambled)
    os.chmod(config.password_dir / "POOL", 0o600)
    jwt_key = HKDF(hashes.SHA256(), 32, salt=b"htcondor", info=b"master jwt").derive(
        secret + secret
    )
    head, body, sig = issuer.create("alice@example.org").split(".")
    assert sig == b64(hmac.new(jwt_key, f"{head}.{body}".encode(), hashlib.sha256).digest())
    claims = {"sub": "frida@pool.test", "iss": "pool.test", "iat": 1_800_000_000, "jti": "c760c2af"}
    theirs = sign({"alg": "HS256", "kid": "POOL"}, claims, jwt_key)
    assert verifier.verify(theirs).user == "frida"


# Made by htgrid before its tokens were signed with PyJWT, with the key file below: the
# same key file and claims must still give this very token, and it must still verify.
EARLIER_TOKEN = (
    "eyJhbGciOiJIUzI1NiIsImtpZCI6IlBPT0wifQ."
    "eyJleHAiOjE4MDAwMDM2MDAsImlhdCI6MTgwMDAwMDAwMCwiaXNzIjoicG9vbC50ZXN0IiwianRpIjoiMDEyMzQ1"
    "Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWYiLCJzY29wZSI6ImNvbmRvcjovUkVBRCBjb25kb3I6L1dSSVRFIiwi"
    "c3ViIjoiYWxpY2VAcG9vbC50ZXN0In0.Usj00lm5RWTevJHUWno7G96bWaNMdCi83z_wswiT2Ts"
)


def test_tokens_made_before_still_verify_and_are_made_the_same(
    verifier: TokenVerifier, config: SecurityConfig
) -> None:
    config.password_dir.mkdir(parents=True, mode=0o700)
    (config.password_dir / "POOL").write_bytes(bytes(range(64)))
    os.chmod(config.password_dir / "POOL", 0o600)
    principal = verifier.verify(EARLIER_TOKEN)
    assert (principal.user, principal.scopes) == ("alice", ("READ", "WRITE"))
    claims = parts(EARLIER_TOKEN)[1]
    key = SigningKeys(config.password_dir).jwt_key("POOL")
    assert encode({"kid": "POOL"}, claims, key) == EARLIER_TOKEN


def test_a_readable_key_is_not_used(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    token = issuer.create("bob")
    os.chmod(issuer.config.password_dir / "POOL", 0o644)
    with pytest.raises(UnknownKey, match="chmod 600"):
        verifier.verify(token)


def test_deleting_the_key_invalidates_its_tokens(
    issuer: TokenIssuer, verifier: TokenVerifier
) -> None:
    token = issuer.create("bob")
    assert verifier.verify(token).user == "bob"
    (issuer.config.password_dir / "POOL").unlink()
    with pytest.raises(UnknownKey, match="no signing key named 'POOL'"):
        verifier.verify(token)


# -- accepted ---------------------------------------------------------------------------


def test_round_trip_maps_the_subject_to_its_user(
    issuer: TokenIssuer, verifier: TokenVerifier
) -> None:
    token = issuer.create("alice@example.org", lifetime=60)
    who = verifier.verify(token)
    assert (who.user, who.subject, who.issuer, who.key_id) == (
        "alice",
        "alice@example.org",
        "pool.test",
        "POOL",
    )
    assert who.scopes is None and who.allows("WRITE") and who.allows("READ")
    assert not who.is_admin
    assert who.identity().name == "alice" and not who.identity().admin


def test_scopes_limit_and_imply(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    reader = verifier.verify(issuer.create("alice", authz=["READ"]))
    assert reader.allows("READ") and not reader.allows("WRITE")
    with pytest.raises(InsufficientScope, match="does not grant WRITE") as refused:
        reader.require("WRITE")
    assert refused.value.status == 403
    daemon = verifier.verify(issuer.create("condor@pool.test", authz=["DAEMON"]))
    assert {"READ", "WRITE", "ADVERTISE_STARTD", "ADVERTISE_SCHEDD"} <= daemon.authorizations
    assert not daemon.is_admin  # a restricted token of an admin is restricted


def test_administrators(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    assert verifier.verify(issuer.create("root@pool.test")).is_admin
    assert verifier.verify(issuer.create("alice", authz=["ADMINISTRATOR"])).is_admin
    assert verifier.verify(issuer.create("alice", authz=["ADMINISTRATOR"])).identity().admin
    assert not verifier.verify(issuer.create("root", authz=["READ"])).is_admin


def test_map_file_maps_subjects(
    issuer: TokenIssuer, verifier: TokenVerifier, config: SecurityConfig
) -> None:
    config.etc.mkdir(parents=True, exist_ok=True)
    config.mapfile.write_text(
        "# unified map file\n"
        "SSL /.*/ nobody\n"
        "IDTOKENS /^pool\\.test,(.*)@partner\\.org$/ partner_\\1\n"
        "IDTOKENS pool.test,monitor@example.org nobody\n"
    )
    assert verifier.verify(issuer.create("ann@partner.org")).user == "partner_ann"
    assert verifier.verify(issuer.create("monitor@example.org")).user == "nobody"
    assert verifier.verify(issuer.create("zed@example.org")).user == "zed"  # the default
    config.mapfile.write_text("IDTOKENS /^pool\\.test,zed@/ ../etc\n")
    with pytest.raises(MalformedToken, match="names no local user"):
        verifier.verify(issuer.create("zed@example.org"))
    config.mapfile.write_text("IDTOKENS /(unclosed/ x\n")
    with pytest.raises(SecurityError, match=r"mapfile:1: bad regular expression"):
        verifier.verify(issuer.create("zed@example.org"))


def test_leeway_forgives_small_clock_skew(
    issuer: TokenIssuer, verifier: TokenVerifier, clock: FakeClock
) -> None:
    token = issuer.create("bob", lifetime=60)
    clock.advance(60 + 29)
    assert verifier.verify(token).user == "bob"
    clock.advance(2)
    with pytest.raises(ExpiredToken, match=r"expired at 2027-01-15 08:01:00 UTC \(31 s ago\)"):
        verifier.verify(token)


# -- refused ----------------------------------------------------------------------------


def test_every_refusal_is_an_auth_error_with_a_status(
    issuer: TokenIssuer, verifier: TokenVerifier
) -> None:
    for cls in (ExpiredToken, ForgedToken, UnknownKey, RevokedToken, InsufficientScope):
        assert issubclass(cls, AuthError) and issubclass(cls, HTGridError)
    with pytest.raises(MalformedToken) as refused:
        verifier.verify("not-a-token")
    assert refused.value.status == 401


def test_forged_with_another_pools_key(
    verifier: TokenVerifier, issuer: TokenIssuer, tmp_path: Path, clock: FakeClock
) -> None:
    issuer.create("bob")  # this pool's key exists
    impostor = TokenIssuer(SecurityConfig(tmp_path / "impostor", "pool.test"), clock=clock)
    with pytest.raises(ForgedToken, match="signature does not match"):
        verifier.verify(impostor.create("root"))


def test_alg_none_and_other_algorithms(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    header, claims, _ = parts(issuer.create("bob"))
    unsigned = (
        f"{b64(json.dumps({**header, 'alg': 'none'}).encode())}.{b64(json.dumps(claims).encode())}."
    )
    with pytest.raises(ForgedToken, match="algorithm is 'none'"):
        verifier.verify(unsigned)
    long_alg = sign({**header, "alg": "A" * 5000}, claims, b"x")
    with pytest.raises(ForgedToken, match=r"algorithm is 'AAAA.*\.\.\.; this pool") as refused:
        verifier.verify(long_alg)
    assert len(str(refused.value)) < 100  # what a caller sends is quoted, cut short
    for alg in ("HS512", "RS256", "ES256", None):
        forged = sign({**header, "alg": alg}, claims, b"whatever")
        with pytest.raises(ForgedToken, match="this pool signs with HS256"):
            verifier.verify(forged)


def test_tampered_claims_and_signatures(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    token = issuer.create("bob", authz=["READ"])
    head, body, sig = token.split(".")
    _, claims, _ = parts(token)
    promoted = b64(json.dumps({**claims, "sub": "root", "scope": "condor:/ADMINISTRATOR"}).encode())
    with pytest.raises(ForgedToken):
        verifier.verify(f"{head}.{promoted}.{sig}")
    flipped = sig[:-3] + ("A" if sig[-3] != "A" else "B") + sig[-2:]
    with pytest.raises(ForgedToken):
        verifier.verify(f"{head}.{body}.{flipped}")
    # The last character of a 32-byte signature holds 2 spare bits: a variant decoding to
    # the same bytes is not the token that was issued.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    spare = alphabet[alphabet.index(sig[-1]) ^ 1]
    with pytest.raises(MalformedToken, match="not canonical"):
        verifier.verify(f"{head}.{body}.{sig[:-1]}{spare}")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a.b", "three dot-separated parts"),
        ("a.b.c.d", "three dot-separated parts"),
        ("@@@.e30.", "header is not base64url"),
        (f"{b64(b'[1]')}.e30.", "header is not a JSON object"),
        (b64(b'{"alg":"HS256","alg":"none"}') + ".e30.", "duplicate member 'alg'"),
        ("x" * 9000, "longer than 8192"),
        ("é.é.é", "not ASCII"),
    ],
)
def test_malformed_tokens(verifier: TokenVerifier, text: str, reason: str) -> None:
    with pytest.raises(MalformedToken, match=reason):
        verifier.verify(text)


def test_claims_of_the_wrong_type(
    issuer: TokenIssuer, verifier: TokenVerifier, config: SecurityConfig
) -> None:
    issuer.create("bob")
    key = SigningKeys(config.password_dir).jwt_key("POOL")
    base = {"sub": "bob", "iss": "pool.test", "iat": 1_800_000_000, "jti": "abc"}
    header = {"alg": "HS256", "kid": "POOL"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"sub": 7}, "sub claim is missing or not a string"),
        ({"exp": "soon"}, "exp claim is not a number"),
        ({"exp": True}, "exp claim is not a number"),
        ({"exp": 10**400}, "exp claim is not a finite number"),
        ({"jti": None}, "has no jti"),
    ]
    for bad, reason in cases:
        with pytest.raises(MalformedToken, match=reason):
            verifier.verify(sign(header, {**base, **bad}, key))
    with pytest.raises(MalformedToken, match="does not name its signing key"):
        verifier.verify(sign({"alg": "HS256"}, base, key))
    with pytest.raises(UnknownKey, match="cannot be the name of a signing key"):
        verifier.verify(sign({"alg": "HS256", "kid": "../POOL"}, base, key))


def test_wrong_issuer(config: SecurityConfig, verifier: TokenVerifier, clock: FakeClock) -> None:
    # Two pools sharing a key file still keep apart: iss names the pool.
    other = TokenIssuer(SecurityConfig(config.home, "other.test"), clock=clock)
    with pytest.raises(UntrustedIssuer, match=r"issued by 'other\.test', not this pool"):
        verifier.verify(other.create("alice"))


def test_expired_and_not_yet_valid(
    issuer: TokenIssuer, verifier: TokenVerifier, clock: FakeClock
) -> None:
    token = issuer.create("bob", lifetime=600)
    clock.advance(3600)
    with pytest.raises(ExpiredToken, match="of bob expired at"):
        verifier.verify(token)
    clock.advance(-7200)
    with pytest.raises(TokenNotYetValid, match=r"issued at .* from now"):
        verifier.verify(token)


def test_revoked_by_id_at_once(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    token = issuer.create("bob")
    other = issuer.create("bob")
    jti = parts(token)[1]["jti"]
    assert verifier.verify(token).token_id == jti
    assert verifier.revoked.add(jti, "lost laptop")
    assert not verifier.revoked.add(jti)
    with pytest.raises(RevokedToken, match=f"token {jti} of bob has been revoked"):
        verifier.verify(token)
    assert verifier.verify(other).user == "bob"
    assert f"{jti}  # lost laptop" in issuer.config.revocation_file.read_text()


def test_revocation_expression_as_htcondors(
    config: SecurityConfig, issuer: TokenIssuer, clock: FakeClock
) -> None:
    expr = 'sub =?= "alice@example.org" && iat <= 1800000000'
    verifier = TokenVerifier(
        SecurityConfig(config.home, config.trust_domain, revocation_expr=expr), clock=clock
    )
    old = issuer.create("alice@example.org")
    with pytest.raises(RevokedToken):
        verifier.verify(old)
    clock.advance(10)
    assert verifier.verify(issuer.create("alice@example.org")).user == "alice"
    assert verifier.verify(issuer.create("bob@example.org")).user == "bob"


def test_refusals_never_contain_the_token(issuer: TokenIssuer, verifier: TokenVerifier) -> None:
    token = issuer.create("bob", authz=["READ"])
    head, body, sig = token.split(".")
    for bad in (f"{head}.{body}.{sig[:-2]}xx", f"{head}.{body}x.{sig}", f"{head}.{body}"):
        with pytest.raises(AuthError) as refused:
            verifier.verify(bad)
        assert sig[:10] not in str(refused.value) and body[:10] not in str(refused.value)
    assert sig not in repr(verifier.verify(token))
