"""A remote submitter with a SciToken, as HTCondor-CE takes one (issue 29).

Pool B is the compute entrypoint: its map file (CERTIFICATE_MAPFILE) maps a test
issuer's subject `pilot` to a local account, bans `banned-*` subjects (mapped to
`@banned.htcondor.org`, which DENY_WRITE refuses), and takes tokens for its own audience
(SCITOKENS_SERVER_AUDIENCE) only; it trusts the issuer's test CA for fetching its keys
(`htgrid trust add`). The issuer runs on 127.0.0.1 in this process.

An owner of pool A submits an HTCondor-C job (`grid_resource = condor ...`) naming its
SciToken (`scitokens_file`): A's condor GAHP server presents it to B, B maps it to the
account, the job runs there as that account and its output comes back. A banned subject
and a token for another audience are refused; all three are in B's audit log. A job
whose token names a banned subject is held on A, saying why B refused it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from htgrid.net.security import DeniedIdentity, WrongAudience, save_token
from htgrid.testing import run_cli, wait_for
from htgrid.testing.issuer import TestIssuer

from ._accounts import LocalUser
from ._two_pools import b_jobs, two_pools
from .test_htcondor_c_owner import Pools, run_on_b, submit

AUDIENCE = "ce.test:9619"


@pytest.fixture
def issuer(shared_tmp_factory: Callable[[str], Path]) -> Iterator[TestIssuer]:
    with TestIssuer(shared_tmp_factory("issuer")) as running:
        yield running


@pytest.fixture
def pools(
    shared_tmp_factory: Callable[[str], Path],
    second_user: LocalUser,
    user_runs_python: None,
    workdir: Path,
    issuer: TestIssuer,
) -> Iterator[Pools]:
    root = shared_tmp_factory("htcondor-c-scitokens")
    url = re.escape(issuer.url).replace("/", "\\/")
    mapfile = root / "condor_mapfile"
    mapfile.write_text(
        f"SCITOKENS /^{url},banned-(.*)$/ \\1@banned.htcondor.org\n"
        f"SCITOKENS /^{url},pilot$/ {second_user.name}\n"
    )
    b_config = {
        "CERTIFICATE_MAPFILE": str(mapfile),
        "SCITOKENS_SERVER_AUDIENCE": AUDIENCE,
        "UID_DOMAIN": "users.htcondor.org",
    }
    with (
        two_pools(root, b_config=b_config) as (a, b),
        a.remote(a.token(f"{second_user.name}@pool-a")) as user,
    ):
        status, _, err = run_cli(b.home, "trust", "add", "issuer.test", str(issuer.ca))
        assert status == 0, err
        yield Pools(a, b, user, second_user, workdir)


def scitoken_file(pools: Pools, token: str, name: str = "pilot.scitoken") -> Path:
    """`token` in a file of the owner's (0600), as a job's scitokens_file names it."""
    path = pools.work / name
    save_token(path, token)
    os.chown(path, pools.owner.uid, pools.owner.gid)
    return path


def audit_lines(pools: Pools, count: int) -> list[str]:
    log = pools.b.home / "log" / "AuditLog"
    return wait_for(
        lambda: len(lines := log.read_text().splitlines()) >= count and lines,
        30,
        what=f"{count} lines in B's audit log",
    )


@pytest.mark.timeout(300)
def test_a_scitoken_job_runs_on_b_as_the_mapped_account_and_others_are_refused(
    pools: Pools, issuer: TestIssuer
) -> None:
    owner = pools.owner
    token = scitoken_file(pools, issuer.mint("pilot", aud=AUDIENCE))
    done, copy = run_on_b(pools, f"scitokens_file = {token}\n")
    assert done["ExitCode"] == 7
    assert copy["Owner"] == owner.name  # B mapped the issuer's subject to the account
    assert (pools.work / "made.txt").read_text() == f"{owner.uid}\n"  # and ran it as it
    assert (pools.work / "out.txt").read_text() == "from A\n"  # its output came back

    for subject, audience, refused in (
        ("banned-eve", AUDIENCE, DeniedIdentity),
        ("pilot", "another.ce:9619", WrongAudience),
    ):
        with (
            pools.b.remote(issuer.mint(subject, aud=audience)) as remote,
            pytest.raises(refused),
        ):
            remote.reserve_cluster()

    lines = audit_lines(pools, 1)
    accepted = [line for line in lines if " accepted " in line]
    assert accepted and all(f'user="{owner.name}"' in line for line in accepted)
    assert all('subject="pilot"' in line and "method=SCITOKENS" in line for line in accepted)
    assert any(f'mapped="{owner.name}@users.htcondor.org"' in line for line in accepted)
    refusals = [line for line in lines if " refused " in line]
    assert any('subject="banned-eve"' in r and "DENY_WRITE" in r for r in refusals), refusals
    assert any("WrongAudience" in r and "another.ce:9619" in r for r in refusals), refusals
    text = (pools.b.home / "log" / "AuditLog").read_text()
    assert token.read_text().strip() not in text
    assert stat.S_IMODE((pools.b.home / "log" / "AuditLog").stat().st_mode) == 0o600


@pytest.mark.timeout(300)
def test_an_htcondor_c_job_with_a_banned_subjects_token_is_held_saying_why(
    pools: Pools, issuer: TestIssuer
) -> None:
    token = scitoken_file(pools, issuer.mint("banned-eve", aud=AUDIENCE), "eve.scitoken")
    job = submit(pools, f"scitokens_file = {token}\n")

    def held() -> str | None:
        ad = pools.user.get(job)
        return str(ad["HoldReason"]) if ad["JobStatus"] == 5 else None

    reason = wait_for(held, 120, what="the job held on A")
    assert "DENY_WRITE" in reason and "banned.htcondor.org" in reason, reason
    assert b_jobs(pools.b) == []  # nothing reached B's queue
    lines = audit_lines(pools, 1)
    assert all(" refused " in line and 'subject="banned-eve"' in line for line in lines), lines
