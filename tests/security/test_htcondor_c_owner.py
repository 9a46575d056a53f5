"""HTCondor-C jobs of a user who is not root, in a pool run by root (issue 24).

Pool A is run by root; its second user submits, with its token of A, a job for pool B
(`grid_resource = condor <schedd> <pool>`). A's condor GAHP server for the job runs as
the owner, so what it presents to B is a token its owner may read: one of B in the
owner's ~/.htgrid/tokens.d, or the file the job names (`scitokens_file`, HTCondor's
ScitokensFile). A keeps root's own token of B in its etc/tokens.d (`two_pools`): an
owner's job must never reach B with it. B runs the job as the owner, and its output
comes back into the owner's directory on A, the owner's.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.net.security import save_token
from htgrid.queue import JobId
from htgrid.submit import SubmitDescription
from htgrid.testing import PersonalPool, wait_for

from ._accounts import LocalUser
from ._pool import completed
from ._two_pools import B_NAME, b_jobs, two_pools

# The job tells who it ran as, then waits (at most 60 s) for the test to let it finish:
# its GAHP server on A is up all that while.
BODY = """cat in.txt
id -u > made.txt
n=0
while [ ! -e {go} ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
exit 7
"""


@dataclass(frozen=True, slots=True)
class Pools:
    """Pools A and B, both run by root, and the owner submitting to A from `work`."""

    a: PersonalPool
    b: PersonalPool
    user: ScheddClient  # the owner at A, with its token of A
    owner: LocalUser
    work: Path


@pytest.fixture
def pools(
    shared_tmp_factory: Callable[[str], Path],
    second_user: LocalUser,
    user_runs_python: None,
    workdir: Path,
) -> Iterator[Pools]:
    with (
        two_pools(shared_tmp_factory("htcondor-c")) as (a, b),
        a.remote(a.token(f"{second_user.name}@pool-a")) as user,
    ):
        yield Pools(a, b, user, second_user, workdir)


def give(user: LocalUser, path: Path, text: str, mode: int = 0o644) -> Path:
    """`path` written with `text`, the user's, with `mode`."""
    path.write_text(text)
    os.chown(path, user.uid, user.gid)
    path.chmod(mode)
    return path


def token_of_b(pools: Pools, path: Path) -> Path:
    """A token of B for the owner in `path` (0600, the owner's)."""
    save_token(path, pools.b.token(f"{pools.owner.name}@pool-b"))
    os.chown(path, pools.owner.uid, pools.owner.gid)
    return path


@pytest.fixture
def home_token(pools: Pools) -> Iterator[Path]:
    """A token of B in the owner's ~/.htgrid/tokens.d (HTCondor's ~/.condor/tokens.d),
    taken away after."""
    tokens = pools.owner.home / ".htgrid" / "tokens.d"
    tokens.mkdir(parents=True, mode=0o700)
    for directory in (tokens.parent, tokens):
        os.chown(directory, pools.owner.uid, pools.owner.gid)
    try:
        yield token_of_b(pools, tokens / "pool-b")
    finally:
        shutil.rmtree(tokens.parent)


def submit(pools: Pools, extra: str = "") -> JobId:
    """The owner's HTCondor-C job for B, from its submit description."""
    owner, work = pools.owner, pools.work
    give(owner, work / "in.txt", "from A\n")
    give(owner, work / "job.sh", "#!/bin/sh\n" + BODY.format(go=work / "go"), 0o755)
    text = (
        f"universe = grid\ngrid_resource = condor {B_NAME} {pools.b.collector}\n"
        "executable = job.sh\ntransfer_input_files = in.txt\ntransfer_output_files = made.txt\n"
        "output = out.txt\nerror = err.txt\nlog = job.log\nremote_universe = local\n"
        f"leave_in_queue = true\n{extra}queue\n"
    )
    description = SubmitDescription.from_text(text, cwd=str(work))
    cluster = pools.user.reserve_cluster()
    (job,) = description.jobs(cluster, owner=owner.name, qdate=int(time.time()))
    (job_id,) = pools.user.submit(cluster, job.ad, [ClassAd()])
    return job_id


def gahp_servers(b: PersonalPool) -> list[Path]:
    """/proc of the condor GAHP servers that talk to B (A's grid manager starts them)."""
    wanted = f"\0--pool\0{b.collector}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
        except OSError:  # gone meanwhile
            continue
        if b"\0gahp\0condor\0" in argv and wanted in argv:
            found.append(entry)
    return found


def ids_of(proc: Path) -> dict[str, list[int]]:
    """A process's Uid, Gid (real, effective, saved, file system) and Groups."""
    fields = {}
    for line in (proc / "status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("Uid", "Gid", "Groups"):
            fields[name] = [int(word) for word in value.split()]
    return fields


def environ_of(proc: Path) -> dict[str, str]:
    items = (proc / "environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in items if item)


def run_on_b(pools: Pools, extra: str = "") -> tuple[dict[str, object], dict[str, object]]:
    """The owner's job run on B to completion, its GAHP server on A looked at while it
    runs (it is the owner's); the job's ad on A and its copy's on B."""
    owner, user = pools.owner, pools.user
    job = submit(pools, extra)
    (gahp,) = wait_for(lambda: gahp_servers(pools.b), 60, what="the condor GAHP server on A")
    ids = ids_of(gahp)
    assert ids["Uid"] == [owner.uid] * 4, ids
    assert ids["Gid"] == [owner.gid] * 4, ids
    assert set(ids["Groups"]) == {owner.gid, owner.extra_gid}, ids
    environ = environ_of(gahp)
    assert (environ["HOME"], environ["USER"]) == (str(owner.home), owner.name)
    # Its records are in a directory of the owner's: spool/gahp/<owner>.
    temp = Path(environ["GAHP_TEMP"])
    assert temp == pools.a.home / "spool" / "gahp" / owner.name
    st = temp.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (owner.uid, owner.gid, 0o700)
    wait_for(lambda: user.get(job)["JobStatus"] == 2, 60, what="the job running on B")
    give(owner, pools.work / "go", "")
    done = dict(completed(user, job, 120))
    (copy,) = b_jobs(pools.b)
    return done, copy


@pytest.mark.timeout(300)
def test_an_owners_job_goes_to_b_with_its_token_runs_as_it_and_comes_back_its(
    pools: Pools, home_token: Path
) -> None:
    owner, work = pools.owner, pools.work
    done, copy = run_on_b(pools)
    assert done["ExitCode"] == 7
    assert str(done["GridJobId"]).startswith(f"condor {B_NAME} ")
    # B knows the job as the owner's: A presented the owner's token, not root's.
    assert copy["Owner"] == owner.name
    # It ran there as the owner, and what came back to A is the owner's.
    assert (work / "made.txt").read_text() == f"{owner.uid}\n"
    assert (work / "out.txt").read_text() == "from A\n"
    for name in ("out.txt", "err.txt", "made.txt", "job.log"):
        st = (work / name).stat()
        assert (st.st_uid, st.st_gid) == (owner.uid, owner.gid), name
    log = wait_for(lambda: "005 (" in (t := (work / "job.log").read_text()) and t, what="005")
    assert "027 (" in log and "Job terminated" in log


@pytest.mark.timeout(300)
def test_the_token_file_the_job_names_is_the_one_presented(pools: Pools) -> None:
    """`scitokens_file` (ScitokensFile): the owner has no token in its home, the job
    names one of its own, which its GAHP server presents."""
    token = token_of_b(pools, pools.work / "b.token")
    done, copy = run_on_b(pools, f"scitokens_file = {token}\n")
    assert done["ScitokensFile"] == str(token)
    assert done["ExitCode"] == 7
    assert copy["Owner"] == pools.owner.name
    assert (pools.work / "made.txt").read_text() == f"{pools.owner.uid}\n"


def never_reaches_b(pools: Pools, extra: str = "") -> None:
    """The owner's job waits (its grid manager finds B refusing it, the resource down),
    and B never queues it."""
    job = submit(pools, extra)

    def down() -> dict[str, object] | None:
        ad = dict(pools.user.get(job))
        assert ad["JobStatus"] == 1, ad.get("HoldReason")
        return ad if ad.get("GridResourceUnavailableTime") else None

    ad = wait_for(down, 60, what=f"job {job} waiting for B")
    assert "GridJobId" not in ad
    assert b_jobs(pools.b) == []


#: Root's own token of B, in A's etc/tokens.d (`two_pools`).
ROOTS = ("etc", "tokens.d", "user-pool-b")


@pytest.mark.timeout(300)
def test_an_owner_without_a_token_of_b_cannot_use_the_pools(pools: Pools) -> None:
    """Root's token of B is in A's etc/tokens.d: the owner's GAHP server cannot read it."""
    assert pools.a.home.joinpath(*ROOTS).is_file()
    never_reaches_b(pools)


@pytest.mark.timeout(300)
def test_a_job_cannot_name_a_token_file_its_owner_may_not_read(pools: Pools) -> None:
    """The job names root's token of B: the owner cannot read it, so the job is held
    saying so (as HTCondor holds a job whose proxy it cannot acquire), never sent."""
    roots = pools.a.home.joinpath(*ROOTS)
    job = submit(pools, f"scitokens_file = {roots}\n")
    ad = wait_for(lambda: (a := dict(pools.user.get(job)))["JobStatus"] == 5 and a, 60, what="held")
    assert ad["HoldReason"] == f"cannot read the credential {roots}: Permission denied"
    assert ad["HoldReasonCode"] == 4  # CorruptedCredential
    assert "GridJobId" not in ad
    assert b_jobs(pools.b) == []
