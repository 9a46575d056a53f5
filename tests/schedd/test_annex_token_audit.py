"""The annex tokens a schedd grants its users are in its audit log (SCHEDD_AUDIT_LOG):
who asked, for which annex, until when and the token's id; never the token."""

from __future__ import annotations

from datetime import UTC, datetime

from htgrid.net.security import SecurityConfig

from ._harness import PersonalPool


def _lines(pool: PersonalPool, word: str) -> list[str]:
    log = pool.home / "log" / "AuditLog"
    text = log.read_text() if log.exists() else ""
    return [line for line in text.splitlines() if f" {word} annex-token " in line]


def test_each_annex_token_granted_and_revoked_is_in_the_audit_log(pool: PersonalPool) -> None:
    domain = SecurityConfig.load(pool.home).trust_domain
    with pool.remote(pool.token(f"carol@{domain}")) as carol:
        first = carol.annex_token("audited", 600)
        second = carol.annex_token("audited", 1200)  # `annex extend`: a longer one
        assert carol.annex_revoke("audited") == 2
    granted = _lines(pool, "granted")
    assert len(granted) == 2, granted
    for line, grant in zip(granted, (first, second), strict=True):
        assert not [part for part in grant["token"].split(".") if part in line]
        expires = datetime.fromtimestamp(grant["expires"], UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert (
            f'granted annex-token annex="audited" user="carol" identity="audited.annex@{domain}" '
            f'authz="ADVERTISE_STARTD" jti="{grant["jti"]}" expires={expires}'
        ) in line
    (revoked,) = _lines(pool, "revoked")
    assert f'annex="audited" user="carol" jti="{first["jti"]} {second["jti"]}"' in revoked
    mode = (pool.home / "log" / "AuditLog").stat().st_mode & 0o777
    assert mode == 0o600
