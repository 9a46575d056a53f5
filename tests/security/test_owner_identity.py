"""Whose jobs a pool run by root takes: an owner is a local account, never root unless
the pool allows it, and never anyone but the one the caller authenticated as."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.net import Jobs, ScheddClient
from htgrid.queue import JobAction, JobId, NotAuthorized, ProtectedAttribute
from htgrid.testing import PersonalPool, wait_for

from ._accounts import LocalUser

DOMAIN = "owners.test"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("owners")
    config = {"TRUST_DOMAIN": DOMAIN, "ALLOW_ROOT_JOBS": "false"}
    (home / "etc").mkdir()
    # The pool's map file: one subject made root, every other subject its user part.
    (home / "etc" / "mapfile").write_text(f"IDTOKENS {DOMAIN},operator@{DOMAIN} root\n")
    with PersonalPool(home, fsync=False, config=config) as p:
        yield p


def _submit(schedd: ScheddClient, **attrs: object) -> JobId:
    """One local universe job, submitted held (it stays in the queue to be looked at)."""
    cluster = schedd.reserve_cluster()
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 12, "Iwd": "/tmp", "JobStatus": 5, **attrs})
    (job,) = schedd.submit(cluster, ad, [ClassAd()])
    return job


def test_a_token_whose_user_is_no_account_here_cannot_queue_jobs(pool: PersonalPool) -> None:
    with pool.remote(pool.token(f"nosuchuser@{DOMAIN}")) as ghost:
        assert ghost.health()["you"]["user"] == "nosuchuser"
        with pytest.raises(NotAuthorized, match="owner nosuchuser is not an account on this host"):
            _submit(ghost)
    with pool.client() as schedd:
        assert schedd.query('Owner == "nosuchuser"') == []


def test_a_token_mapped_to_root_cannot_queue_jobs(pool: PersonalPool) -> None:
    for subject in ("root", "operator"):  # root by name, and by the map file
        caller = pool.remote(pool.token(f"{subject}@{DOMAIN}"))
        with caller, pytest.raises(NotAuthorized, match=r"owner root is root \(uid 0\)"):
            _submit(caller)


def test_root_on_the_socket_cannot_queue_jobs_unless_the_pool_allows_it(
    pool: PersonalPool, tmp_path: Path
) -> None:
    with pool.client() as schedd, pytest.raises(NotAuthorized, match="ALLOW_ROOT_JOBS = true"):
        _submit(schedd)
    allows = PersonalPool(tmp_path / "allows", config={"ALLOW_ROOT_JOBS": "true"})
    with allows, allows.client() as schedd:
        assert schedd.get(_submit(schedd))["Owner"] == "root"


def test_an_administrator_may_queue_for_a_local_user_only(
    pool: PersonalPool, second_user: LocalUser
) -> None:
    with pool.remote(pool.token(f"condor@{DOMAIN}")) as admin:
        job = _submit(admin, Owner=second_user.name)
        assert admin.get(job)["Owner"] == second_user.name
        for owner, why in (("root", "is root"), ("nosuchuser", "is not an account")):
            with pytest.raises(NotAuthorized, match=why):
                _submit(admin, Owner=owner)


def test_a_users_job_is_theirs_and_its_owner_cannot_be_edited(
    pool: PersonalPool, second_user: LocalUser
) -> None:
    with pool.remote(pool.token(f"{second_user.name}@{DOMAIN}")) as user:
        job = _submit(user, Owner="root")  # the ad's Owner is not believed
        assert user.get(job)["Owner"] == second_user.name
        for attr in ("Owner", "User", "OsUser"):
            with pytest.raises(ProtectedAttribute):
                user.edit(Jobs.of([job]), {attr: '"root"'})
    with pool.remote(pool.token(f"condor@{DOMAIN}")) as admin:
        for attr in ("Owner", "User", "OsUser"):  # not even an administrator
            with pytest.raises(ProtectedAttribute):
                admin.edit(Jobs.of([job]), {attr: '"root"'})
        ad = admin.get(job)
    assert ad["Owner"] == second_user.name and "OsUser" not in ad


def test_a_queued_job_whose_owner_no_longer_qualifies_is_held(tmp_path: Path) -> None:
    home = tmp_path / "pool"
    pool = PersonalPool(home, config={"ALLOW_ROOT_JOBS": "true"})
    with pool, pool.client() as schedd:
        job = _submit(schedd)  # root's, held: queued while the pool allowed it
    conf = home / "htgrid.conf"
    conf.write_text(conf.read_text().replace("ALLOW_ROOT_JOBS = true", "ALLOW_ROOT_JOBS = false"))
    with pool, pool.client() as schedd:
        schedd.act(JobAction.Release, Jobs.of([job]))

        def held_again() -> ClassAd | None:
            ad = schedd.get(job)
            return ad if ad["JobStatus"] == 5 and ad.get("HoldReasonCode") == 23 else None

        ad = wait_for(held_again, what=f"job {job} held for its owner")
    assert "root (uid 0): jobs do not run as root" in str(ad["HoldReason"])
