"""The one token reader (htgrid.client): token files, the search by trust domain, the
condor GAHP's token file and directories, and the same refusals a server gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.client import (
    NotAToken,
    StoredToken,
    TokenSource,
    find_token,
    pool_url,
    read_token_file,
    scan_tokens,
)
from htgrid.errors import UsageError
from htgrid.net.security import ForgedToken, MalformedToken
from htgrid.net.security._jwt import parse

from ._support import jwt

NOW = 1_800_000_000.0


def test_a_token_file_holds_a_token_a_line_and_says_which_lines_are_not(tmp_path: Path) -> None:
    good = jwt("pool.test", exp=NOW + 60)
    path = tmp_path / "mine"
    path.write_text(f"# my token\n\n  {good}  \nnot-a-token\n{jwt('x', alg='none')}\n")
    tokens, problems = read_token_file(path)
    assert [(t.token, t.line, t.issuer, t.expires) for t in tokens] == [
        (good, 3, "pool.test", NOW + 60)
    ]
    assert [str(p) for p in problems] == [
        f"{path}:4: not a token: a token has three dot-separated parts, this one has 1",
        f"{path}:5: not a token: the token's algorithm is 'none'; this pool signs with HS256,"
        " an issuer's tokens with ES256, ES384, ES512, EdDSA, PS256, PS384, PS512, RS256,"
        " RS384, RS512",
    ]
    assert good not in repr(tokens)  # a token never shows in a repr
    missing = read_token_file(tmp_path / "gone")
    assert missing[0] == [] and "cannot read: No such file or directory" in str(missing[1][0])


@pytest.mark.parametrize(
    ("token", "server_error"),
    [
        ("a.b", MalformedToken),
        (jwt("pool.test", alg="HS512"), ForgedToken),
        (jwt("pool.test", crit=["x"]), MalformedToken),
        ("é.é.é", MalformedToken),
    ],
)
def test_what_a_client_will_not_present_a_server_refuses_in_the_same_words(
    token: str, server_error: type[Exception]
) -> None:
    with pytest.raises(NotAToken) as read:
        StoredToken.read(token)
    with pytest.raises(server_error) as refused:
        parse(token)
    # The server names what its pool signs with, the client what any token may be.
    assert str(read.value).startswith(str(refused.value))


def test_an_issuers_token_is_one_a_client_holds_and_presents(tmp_path: Path) -> None:
    """A SciToken (RS256, ES256) in a job's `scitokens_file` is read, not refused: the
    server verifies it against its issuer's keys."""
    path = tmp_path / "scitoken"
    sci = jwt("https://issuer.example", alg="ES256", kid="k1")
    path.write_text(f"{sci}\n")
    tokens, problems = read_token_file(path)
    assert [t.token for t in tokens] == [sci] and problems == []
    assert TokenSource(path).fixed() == sci


def test_the_token_of_the_servers_trust_domain_is_found_in_name_order(tmp_path: Path) -> None:
    user, pool = tmp_path / "user", tmp_path / "pool"
    user.mkdir()
    pool.mkdir()
    (user / "a_other").write_text(jwt("other.test") + "\n")
    (user / "b_expired").write_text(jwt("pool.test", exp=NOW - 1) + "\n")
    (user / ".c_temporary").write_text(jwt("pool.test", "temp") + "\n")
    ours = jwt("pool.test", "bob", exp=NOW + 10)
    (pool / "d_ours").write_text(ours + "\n")
    dirs = [user, pool]
    assert find_token("pool.test", dirs=dirs, env={}, now=NOW) == ours
    assert find_token("elsewhere.test", dirs=dirs, env={}, now=NOW) is None
    # $HTGRID_TOKEN first, when it is the trust domain's; a stale one hides nothing.
    mine = jwt("pool.test", "env")
    assert find_token("pool.test", dirs=dirs, env={"HTGRID_TOKEN": mine}, now=NOW) == mine
    for stale in ("garbage", jwt("other.test")):
        env = {"HTGRID_TOKEN": stale}
        assert find_token("pool.test", dirs=dirs, env=env, now=NOW) == ours
    assert [t.token for t in scan_tokens(dirs)[0]] == [
        jwt("other.test"),
        jwt("pool.test", exp=NOW - 1),
        ours,
    ]


def test_a_gahps_token_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTGRID_TOKEN", jwt("pool.test", "from-the-environment"))
    tokens = tmp_path / "tokens.d"
    tokens.mkdir()
    ours = jwt("pool.test", exp=NOW + 100)
    (tokens / "t").write_text(ours + "\n")
    source = TokenSource(None, [tokens], clock=lambda: NOW)
    assert source.fixed() is None
    assert source.for_issuer("pool.test") == ours  # the grid manager's, not the variable's
    assert TokenSource(None, [tokens], clock=lambda: NOW + 100).for_issuer("pool.test") is None
    path = tmp_path / "fixed"
    path.write_text(f"# renewed by a cron job\n{jwt('a')}\n{jwt('b')}\n")
    source.token_file = path
    assert source.fixed() == jwt("a")
    path.write_text(jwt("c") + "\n")
    assert source.fixed() == jwt("c")  # read afresh


@pytest.mark.parametrize(
    ("pool", "url"),
    [
        ("cm.example.org", "https://cm.example.org:9618"),
        ("cm.example.org:9620", "https://cm.example.org:9620"),
        (" 127.0.0.1:40000 ", "https://127.0.0.1:40000"),
        ("[::1]", "https://[::1]:9618"),
        ("[::1]:9700", "https://[::1]:9700"),
        ("https://cm.example.org:443/", "https://cm.example.org:443"),
    ],
)
def test_a_pool_named_as_pool_takes_it(pool: str, url: str) -> None:
    assert pool_url(pool) == url


@pytest.mark.parametrize("pool", ["http://cm.example.org", "cm:port", ":9618", ""])
def test_what_is_no_pool_address_is_refused(pool: str) -> None:
    with pytest.raises(UsageError):
        pool_url(pool)
