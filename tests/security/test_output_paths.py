"""The output download (GET /v1/jobs/ID/output, POST /v1/jobs/output) hands out what the
job's owner may read, and nothing through a link out of the job's sandbox: the attacks
of issue 24, each of which got root's files out of a pool run by root."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from htgrid.net import Jobs, ScheddClient
from htgrid.queue import JobId
from htgrid.testing import PersonalPool

from ._accounts import LocalUser
from ._pool import (
    DOMAIN,
    LOCAL,
    SPOOLING,
    completed,
    outputs_of,
    strict_pool,
    submit,
    tar_of,
    untar,
)

SECRET = b"a host key only root may read\n"


@pytest.fixture(scope="module")
def pool(
    shared_tmp_factory: Callable[[str], Path], second_user: LocalUser
) -> Iterator[PersonalPool]:
    with strict_pool(shared_tmp_factory("outputs") / "home") as p:
        yield p


@pytest.fixture
def token(pool: PersonalPool, second_user: LocalUser) -> str:
    return pool.token(f"{second_user.name}@{DOMAIN}")


@pytest.fixture
def user(pool: PersonalPool, token: str) -> Iterator[ScheddClient]:
    with pool.remote(token) as client:
        yield client


@pytest.fixture(scope="module")
def host_keys(shared_tmp_factory: Callable[[str], Path]) -> Path:
    """A directory only root may enter, holding a file only root may read (as /etc/ssh
    with its host keys)."""
    keys = shared_tmp_factory("keys") / "ssh"
    keys.mkdir(mode=0o700)
    key = keys / "ssh_host_ed25519_key"
    key.write_bytes(SECRET)
    key.chmod(0o600)
    return keys


def both_ways(
    pool: PersonalPool, token: str, user: ScheddClient, job: JobId
) -> list[dict[str, bytes]]:
    """The job's output, fetched alone and in a batch (its `12.0/` taken off)."""
    alone = untar(user.get_output(job))
    batch = outputs_of(pool, token, [job])
    prefix = f"{job}/"
    return [alone, {k[len(prefix) :]: v for k, v in batch.items() if k.startswith(prefix)}]


def test_an_iwd_of_etc_does_not_hand_out_its_shadow_file(
    pool: PersonalPool, token: str, user: ScheddClient
) -> None:
    held = {"JobStatus": 5}  # never runs: only its output is asked for
    job = submit(user, Iwd="/etc", Out="shadow", Err="hostname", **held)
    for files in both_ways(pool, token, user, job):
        assert "shadow" not in files
        assert files["hostname"] == Path("/etc/hostname").read_bytes()  # the user's to read


def test_transfer_output_naming_roots_directory_hands_out_nothing_of_it(
    pool: PersonalPool, token: str, user: ScheddClient, host_keys: Path
) -> None:
    job = submit(user, Iwd="/tmp", TransferOutput=f"{host_keys}/, /etc/ssh/", JobStatus=5)
    for files in both_ways(pool, token, user, job):
        assert SECRET not in files.values()
        assert "ssh_host_ed25519_key" not in files


def test_a_link_in_the_sandbox_is_not_followed_out_of_it(
    pool: PersonalPool,
    token: str,
    user: ScheddClient,
    second_user: LocalUser,
    shared_dir: Path,
) -> None:
    # Even to a file its owner may read: nothing leaves the sandbox through a link.
    mine = shared_dir / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own, outside the sandbox\n")
    for path in (mine, mine / "notes.txt"):
        os.chown(path, second_user.uid, second_user.gid)
    script = f"#!/bin/sh\nln -s /etc etc\nln -s {mine} mine\necho made > made.txt\n"
    job = submit(
        user,
        Cmd="job.sh",
        Out="job.out",
        LeaveJobInQueue=True,
        TransferOutput="etc/shadow, etc/hostname, mine/notes.txt, made.txt",
        **SPOOLING,
    )
    user.put_input(job, tar_of({"job.sh": script.encode()}, mode=0o755))
    completed(user, job)
    for files in both_ways(pool, token, user, job):
        assert files == {"job.out": b"", "made.txt": b"made\n"}


def test_qedit_of_out_and_err_to_the_pools_key_and_token_hands_out_neither(
    pool: PersonalPool, token: str, user: ScheddClient
) -> None:
    key = pool.home / "etc" / "passwords.d" / "POOL"
    daemon = pool.home / "etc" / "tokens.d" / "daemon"
    assert key.is_file() and daemon.is_file()
    job = submit(user, Out="job.out", JobStatus=5)
    user.edit(Jobs.of([job]), {"Out": f'"{key}"', "Err": f'"{daemon}"'})
    for files in both_ways(pool, token, user, job):
        assert files == {}
    # Nor through a spooled job's own sandbox, by `..`.
    spooled = submit(user, Out="job.out", LeaveJobInQueue=True, JobUniverse=LOCAL, **SPOOLING)
    user.edit(Jobs.of([spooled]), {"Out": '"../../../etc/passwords.d/POOL"'})
    assert untar(user.get_output(spooled)) == {}
