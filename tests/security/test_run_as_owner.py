"""Jobs run as their owner in a pool run by root: their processes have the owner's uid,
gid and groups, and what they or the daemons make for them is the owner's. (Issue 24:
every job ran as root, whatever its Owner.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from htgrid.net import ScheddClient
from htgrid.testing import WHOLE_POOL, PersonalPool, wait_for

from ._accounts import LocalUser
from ._pool import DOMAIN, completed, strict_pool, submit

ID = "#!/bin/sh\nid -u\nid -g\nid -G\numask\n"


#: A vanilla job that any slot of the pool takes, its files travelling.
VANILLA: dict[str, object] = {
    "JobUniverse": 5,
    "FileSystemDomain": "elsewhere",
    "Requirements": True,
    "RequestCpus": 1,
    "RequestMemory": 10,
    "RequestDisk": 100,
    "ShouldTransferFiles": "YES",
    "WhenToTransferOutput": "ON_EXIT",
}

# Quick cycles, so that a vanilla job is matched and run in seconds.
FAST: dict[str, object] = {
    "NEGOTIATOR_INTERVAL": 2,
    "NEGOTIATOR_MIN_INTERVAL": 0.1,
    "NUM_CPUS": 4,
    "SCHEDD_INTERVAL": 1,
    "GRIDMANAGER_JOB_PROBE_INTERVAL": 1,
}


@pytest.fixture(scope="module")
def pool(
    shared_tmp_factory: Callable[[str], Path], second_user: LocalUser
) -> Iterator[PersonalPool]:
    """A whole pool run by root: queue, collector, negotiator, execute node, grid manager."""
    home = shared_tmp_factory("run-as") / "home"
    with strict_pool(home, daemons=WHOLE_POOL, **FAST) as p:
        yield p


@pytest.fixture
def user(pool: PersonalPool, second_user: LocalUser) -> Iterator[ScheddClient]:
    with pool.remote(pool.token(f"{second_user.name}@{DOMAIN}")) as client:
        yield client


def ids_of(text: str) -> tuple[int, int, set[int], str]:
    uid, gid, groups, umask = text.split("\n")[:4]
    return int(uid), int(gid), {int(g) for g in groups.split()}, umask


def owned(path: Path, user: LocalUser) -> bool:
    st = path.stat()
    return (st.st_uid, st.st_gid) == (user.uid, user.gid)


def test_a_local_universe_job_runs_as_its_owner(
    user: ScheddClient, second_user: LocalUser, workdir: Path
) -> None:
    job = submit(
        user,
        Cmd="/bin/sh",
        Arguments=f"-c '{ID}'",
        Iwd=str(workdir),
        Out="id.out",
        Err="id.err",
        UserLog="job.log",
        LeaveJobInQueue=True,
    )
    completed(user, job)
    out = workdir / "id.out"
    assert ids_of(out.read_text()) == ids_of_user(second_user)
    # What the daemon made for the job (its standard files, its event log) is the owner's.
    for made in (out, workdir / "id.err", workdir / "job.log"):
        assert owned(made, second_user), made
    for made in (out, workdir / "job.log"):  # as the job's umask (022) would make them
        assert (made.stat().st_mode & 0o777) == 0o644, made
    log = wait_for(lambda: "005 (" in (workdir / "job.log").read_text() and workdir / "job.log")
    assert "Job terminated" in log.read_text()


def test_a_job_cannot_make_the_daemon_write_where_its_owner_may_not(
    user: ScheddClient, shared_dir: Path
) -> None:
    target = Path("/etc") / f"htgrid-owner-test-{os.getpid()}"
    job = submit(user, Iwd="/etc", Out=target.name, UserLog=f"{target.name}.log")

    def held() -> dict[str, object] | None:
        ad = user.get(job)
        return dict(ad) if ad["JobStatus"] == 5 else None

    try:
        ad = wait_for(held, 30, what=f"job {job} held")
        # Whichever the daemon opens first as the owner, Out or the user log, holds it.
        assert ad["HoldReasonCode"] in (7, 22)  # UnableToOpenOutput, UnableToInitUserLog
        assert "Permission denied" in str(ad["HoldReason"])
        assert not target.exists() and not Path(f"{target}.log").exists()
    finally:  # what a daemon that writes as root would have left in /etc
        for path in (target, Path(f"{target}.log")):
            path.unlink(missing_ok=True)


def run_reporting(
    user: ScheddClient, workdir: Path, timeout: float = 30, **attrs: object
) -> dict[str, object]:
    """A job whose files travel, that reports its ids (id.out) and makes a file, run to
    completion from `workdir`; its ad."""
    (workdir / "job.sh").write_text(ID + "id -u > made.txt\n")
    travels = {"ShouldTransferFiles": "YES", "WhenToTransferOutput": "ON_EXIT"}
    attrs = {**travels, **attrs}
    job = submit(
        user, Cmd="job.sh", Iwd=str(workdir), Out="id.out", Err="id.err", LeaveJobInQueue=True,
        **attrs,
    )  # fmt: skip
    return dict(completed(user, job, timeout))


def ids_of_user(user: LocalUser) -> tuple[int, int, set[int], str]:
    return user.uid, user.gid, {user.gid, user.extra_gid}, "0022"


def test_a_vanilla_job_runs_as_its_owner_on_the_execute_node(
    user: ScheddClient, second_user: LocalUser, workdir: Path
) -> None:
    run_reporting(user, workdir, **VANILLA)
    assert ids_of((workdir / "id.out").read_text()) == ids_of_user(second_user)
    # The output, staged back into Iwd by the schedd, is the owner's.
    for made in ("id.out", "id.err", "made.txt"):
        assert owned(workdir / made, second_user), made
    assert (workdir / "made.txt").read_text() == f"{second_user.uid}\n"


def grid_job(
    user: ScheddClient, workdir: Path, resource: str, timeout: float = 30
) -> dict[str, object]:
    """A grid job of `resource` that reports its ids, run to completion; its ad."""
    return run_reporting(
        user, workdir, timeout, JobUniverse=9, GridResource=resource, TransferOutput="made.txt"
    )


def test_a_batch_fork_job_and_its_gahp_run_as_its_owner(
    user: ScheddClient, second_user: LocalUser, workdir: Path, user_runs_python: None
) -> None:
    ad = grid_job(user, workdir, "batch fork")
    assert ids_of((workdir / "id.out").read_text()) == ids_of_user(second_user)
    for made in ("id.out", "id.err", "made.txt"):
        assert owned(workdir / made, second_user), made
    assert str(ad["GridJobId"]).startswith("batch fork ")


@pytest.fixture(scope="module")
def slurm() -> None:
    """A Slurm controller that answers (.ci/slurm-up.sh starts one on loopback)."""
    why = ""
    if shutil.which("scontrol") is None:
        why = "scontrol is not installed"
    else:
        done = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
        why = "" if done.returncode == 0 else f"scontrol ping: {done.stderr.strip()[:200]}"
    if why and os.environ.get("CI") == "true":
        pytest.fail(f"Slurm is required under CI=true: {why}")
    if why:
        pytest.skip(f"Slurm not available: {why}")


@pytest.mark.xdist_group("batch-systems")  # the real Slurm: one at a time
def test_a_slurm_job_runs_as_its_owner(
    user: ScheddClient,
    second_user: LocalUser,
    workdir: Path,
    user_runs_python: None,
    slurm: None,
) -> None:
    """sbatch is run by the owner's GAHP server: Slurm runs the job as the owner."""
    ad = grid_job(user, workdir, "batch slurm", timeout=120)
    # (Slurm gives its jobs its own umask.)
    assert ids_of((workdir / "id.out").read_text())[:3] == ids_of_user(second_user)[:3]
    assert owned(workdir / "made.txt", second_user)
    assert str(ad["GridJobId"]).startswith("batch slurm ")


def test_a_link_out_of_the_execute_sandbox_is_not_followed(
    user: ScheddClient, second_user: LocalUser, workdir: Path
) -> None:
    (workdir / "job.sh").write_text("#!/bin/sh\nln -s /etc etc\n")
    job = submit(user, Cmd="job.sh", Iwd=str(workdir), TransferOutput="etc/hostname", **VANILLA)
    ad = wait_for(lambda: (a := user.get(job))["JobStatus"] == 5 and a, 60, what="held")
    assert ad["HoldReasonCode"] == 12  # TransferOutputError
    assert "etc/hostname: a link out of the job's sandbox" in str(ad["HoldReason"])
    assert not (workdir / "hostname").exists()


def test_what_a_killed_daemon_left_of_an_owners_job_is_killed_at_its_restart(
    shared_tmp_factory: Callable[[str], Path], second_user: LocalUser, workdir: Path
) -> None:
    pidfile = workdir / "pid"
    with strict_pool(shared_tmp_factory("restart") / "home") as pool:
        with pool.remote(pool.token(f"{second_user.name}@{DOMAIN}")) as user:
            submit(user, Cmd="/bin/sh", Arguments=f"-c 'echo $$ > {pidfile}; exec sleep 300'",
                   Iwd=str(workdir))  # fmt: skip
            pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 30))
        assert Path(f"/proc/{pid}").stat().st_uid == second_user.uid
        pool.kill()
        assert Path(f"/proc/{pid}").exists()  # the daemon died, not its owner's job
        pool.start()
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, what=f"process {pid} killed")
