"""`htgrid token create|list|revoke` as a pool administrator and its users type them."""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from htgrid.cli import main
from htgrid.client import find_token
from htgrid.net.security import (
    RevokedToken,
    SecurityConfig,
    TokenVerifier,
)

from ._support import parts

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("HTGRID_HOME", str(tmp_path / "pool"))
    monkeypatch.setenv("HTGRID_TRUST_DOMAIN", "pool.test")
    monkeypatch.delenv("HTGRID_TOKEN", raising=False)
    return tmp_path / "pool"


@pytest.fixture
def htgrid(home: Path, capsys: pytest.CaptureFixture[str]) -> Run:
    def run(*argv: str) -> tuple[int, str, str]:
        rc = main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    return run


def _verifier(home: Path) -> TokenVerifier:
    return TokenVerifier(SecurityConfig(home, "pool.test"))


def test_create_prints_a_token_the_pool_accepts(htgrid: Run, home: Path) -> None:
    rc, out, err = htgrid("token", "create", "-identity", "alice@example.org")
    assert (rc, err) == (0, "")
    token = out.strip()
    assert re.fullmatch(r"eyJ[\w-]+\.eyJ[\w-]+\.[\w-]{43}", token)
    who = _verifier(home).verify(token)
    assert (who.user, who.subject, who.scopes) == ("alice", "alice@example.org", None)
    assert stat.S_IMODE((home / "etc/passwords.d/POOL").stat().st_mode) == 0o600


def test_create_with_authz_and_lifetime(htgrid: Run, home: Path) -> None:
    rc, out, _ = htgrid(
        "token", "create", "-identity", "worker@pool.test", "-authz", "ADVERTISE_STARTD",
        "-authz", "READ", "-lifetime", "600",
    )  # fmt: skip
    assert rc == 0
    _, claims, _ = parts(out.strip())
    assert claims["scope"] == "condor:/ADVERTISE_STARTD condor:/READ"
    assert claims["exp"] - claims["iat"] == 600
    who = _verifier(home).verify(out.strip())
    assert who.allows("ADVERTISE_STARTD") and not who.allows("WRITE")


def test_create_to_a_token_file(htgrid: Run, tmp_path: Path) -> None:
    rc, out, err = htgrid("token", "create", "-identity", "friend", "-token", "friend")
    assert (rc, out, err) == (0, "", "")
    path = tmp_path / "user/.htgrid/tokens.d/friend"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert find_token("pool.test") == path.read_text().strip()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-identity", "x", "-authz", "FLY"], "'FLY' is not an authorization"),
        (["-identity", "x", "-key", "nope"], "no signing key named 'nope'"),
        (["-identity", "x", "-lifetime", "-5"], "-lifetime must not be negative"),
        (["-identity", "x", "-token", ".."], "give a file name"),
        (["-identity", "two words"], "must be a non-empty word"),
    ],
)
def test_create_refuses_bad_input_with_exit_2(htgrid: Run, argv: list[str], message: str) -> None:
    rc, out, err = htgrid("token", "create", *argv)
    assert (rc, out) == (2, "")
    assert message in err and err.startswith("htgrid: ")


def test_list_shows_header_and_claims_never_the_signature(htgrid: Run, tmp_path: Path) -> None:
    htgrid("token", "create", "-identity", "bob@example.org", "-authz", "WRITE", "-token", "b")
    htgrid("token", "create", "-identity", "ann@example.org", "-token", "a")
    token_dir = tmp_path / "user/.htgrid/tokens.d"
    signatures = [p.read_text().strip().split(".")[2] for p in sorted(token_dir.iterdir())]
    rc, out, err = htgrid("token", "list")
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 2
    pattern = r'Header: \{"alg":"HS256","kid":"POOL"\} Payload: (\{.*\}) File: (.*)'
    first = re.fullmatch(pattern, lines[0])
    assert first is not None and first[2] == str(token_dir / "a")  # files in name order
    claims = json.loads(first[1])
    assert claims["sub"] == "ann@example.org" and claims["iss"] == "pool.test"
    assert '"scope":"condor:\\/WRITE"' in lines[1]  # "/" escaped, as condor_token_list does
    assert not any(sig in out for sig in signatures)


def test_list_reports_lines_that_are_not_tokens(htgrid: Run, tmp_path: Path) -> None:
    htgrid("token", "create", "-identity", "bob", "-token", "good")
    (tmp_path / "user/.htgrid/tokens.d/bad").write_text("# a comment\nnot-a-token\n")
    rc, out, err = htgrid("token", "list")
    assert rc == 2
    assert "File: " in out
    assert "tokens.d/bad:2: not a token" in err


def test_revoke_by_id_then_the_token_is_refused(htgrid: Run, home: Path) -> None:
    token = htgrid("token", "create", "-identity", "bob")[1].strip()
    jti = parts(token)[1]["jti"]
    verifier = _verifier(home)
    assert verifier.verify(token).user == "bob"
    assert htgrid("token", "revoke", "-jti", jti) == (0, f"Token {jti} revoked.\n", "")
    with pytest.raises(RevokedToken):
        verifier.verify(token)
    assert htgrid("token", "revoke", "-jti", jti)[1] == f"Token {jti} was already revoked.\n"


def test_revoke_the_tokens_of_a_file(htgrid: Run, home: Path, tmp_path: Path) -> None:
    htgrid("token", "create", "-identity", "bob", "-token", "lost")
    token = (tmp_path / "user/.htgrid/tokens.d/lost").read_text().strip()
    rc, out, _ = htgrid("token", "revoke", "-token", "lost")
    assert rc == 0 and out == f"Token {parts(token)[1]['jti']} revoked.\n"
    assert "sub=bob iss=pool.test" in (home / "etc/tokens.revoked").read_text()
    with pytest.raises(RevokedToken):
        _verifier(home).verify(token)


def test_revoke_usage(htgrid: Run, tmp_path: Path) -> None:
    rc, _, err = htgrid("token", "revoke", "-jti", "a b")
    assert rc == 2 and "is not a token id" in err
    (tmp_path / "junk").write_text("junk\n")
    rc, _, err = htgrid("token", "revoke", "-token", str(tmp_path / "junk"))
    assert rc == 2 and "junk:1: not a token" in err
    with pytest.raises(SystemExit) as usage:
        htgrid("token", "revoke")
    assert usage.value.code == 2
    assert htgrid("token")[0] == 2
