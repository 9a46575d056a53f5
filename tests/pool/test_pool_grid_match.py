"""Grid matchmaking through to the end, with the pool's real daemons: a job matched to a
site runs there at once; a job the site fails is held, released by its periodic_release,
matched again to another site (the manual's `Rank = TARGET.Name != LastMatchName0`) and
completes there. No daemon is restarted on the way."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.queue import JobStatus
from htgrid.testing import PersonalPool, run_cli, wait_for

from .conftest import FAST, events, submit

DAEMONS = ("MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR", "GRIDMANAGER")
SITE = """MyType = "Machine"
TargetType = "Job"
Name = "{name}"
resource_name = "{resource}"
Scratch = "{scratch}"
Group = "{group}"
Requirements = (CurMatches < 10) && (TARGET.JobUniverse == 9)
WantAdRevaluate = True
CurMatches = 0
ClassAdLifetime = 3600
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("gridpool")
    config = {**FAST, "GRIDMANAGER_JOB_PROBE_INTERVAL": 1}
    with PersonalPool(
        home, periodic_interval=0.5, kill_grace=2, fsync=False, daemons=DAEMONS, config=config
    ) as running:
        yield running


@pytest.fixture
def schedd(pool: PersonalPool) -> Iterator[ScheddClient]:
    with pool.client() as client:
        yield client


def advertise(pool: PersonalPool, directory: Path, *sites: tuple[str, str, str]) -> None:
    """Site ads (name, resource_name, scratch) of one group: the directory's name."""
    path = directory / "sites.ad"
    group = directory.name
    text = "\n".join(SITE.format(name=n, resource=r, scratch=s, group=group) for n, r, s in sites)
    path.write_text(text)
    rc, _, err = run_cli(pool.home, "advertise", "-multiple", "UPDATE_STARTD_AD", str(path))
    assert rc == 0, err


def logged(log: Path, job: str) -> list[int]:
    """The job's events, once its 005 is in (the daemon writes its events shortly after
    the grid manager's commits)."""
    return wait_for(
        lambda: (numbers := events(log).get(job, []))[-1:] == [5] and numbers,
        what=f"the 005 event of {job}",
    )


def finished(schedd: ScheddClient, cluster: int) -> ClassAd | None:
    found = schedd.history(f"ClusterId == {cluster}")
    return found[0] if found else None


def test_a_matched_grid_job_is_picked_up_and_runs_at_its_site(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    advertise(pool, tmp_path, ("site-one", "batch fork", str(tmp_path)))
    cluster = submit(
        pool.home,
        tmp_path,
        "universe = grid\ngrid_resource = $$(resource_name)\nexecutable = /bin/sh\n"
        "arguments = \"-c 'echo ran at $$(Name) in $$(Scratch)'\"\noutput = one.out\n"
        'log = one.log\nrequirements = TARGET.Name == "site-one"\nqueue\n',
    )
    ad = wait_for(lambda: finished(schedd, cluster), timeout=60, what="the job to complete")
    assert ad["JobStatus"] == JobStatus.COMPLETED
    assert ad["ExitCode"] == 0
    assert (ad["GridResource"], ad["NumJobMatches"]) == ("batch fork", 1)
    assert (tmp_path / "one.out").read_text() == f"ran at site-one in {tmp_path}\n"
    assert logged(tmp_path / "one.log", f"{cluster}.0") == [0, 27, 1, 5]


def failover(pool: PersonalPool, schedd: ScheddClient, work: Path, second: str) -> ClassAd:
    """A job that fails at site-a (its scratch does not exist) and runs at site-b."""
    a, b = f"{work.name}-a", f"{work.name}-b"
    advertise(pool, work, (a, "batch fork", "/nonexistent/scratch"), (b, second, str(work)))
    cluster = submit(
        pool.home,
        work,
        f"""universe = grid
grid_resource = $$(resource_name)
executable = /bin/sh
arguments = "-c 'cd $$(Scratch) && echo ran at $$(Name)'"
output = job.out
log = job.log
match_list_length = 1
rank = TARGET.Name == "{a}"
requirements = TARGET.Group == "{work.name}" && TARGET.Name =!= LastMatchName0
on_exit_hold = ExitCode != 0
periodic_release = NumJobMatches < 2
queue
""",
    )
    ad = wait_for(lambda: finished(schedd, cluster), timeout=120, what="the job to complete")
    assert ad["JobStatus"] == JobStatus.COMPLETED
    assert ad["ExitCode"] == 0
    assert (ad["NumJobMatches"], ad["LastMatchName0"]) == (2, b)
    assert ad["GridResource"] == second
    assert ad["LastHoldReasonCode"] == 3  # held by its on_exit_hold at site-a
    assert (work / "job.out").read_text() == f"ran at {b}\n"
    # Submitted, run and held at site-a; released; submitted, run and done at site-b.
    assert logged(work / "job.log", f"{cluster}.0") == [0, 27, 1, 12, 13, 27, 1, 5]
    return ad


def test_a_job_its_site_fails_is_matched_again_and_completes_at_another(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    failover(pool, schedd, tmp_path, "batch fork")


def _slurm_up() -> bool:
    if shutil.which("sbatch") is None:
        return False
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and b"up" in done.stdout


@pytest.mark.xdist_group("batch-systems")  # the real Slurm: one at a time
def test_the_second_site_may_be_another_batch_system(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    if not _slurm_up():
        if os.environ.get("CI") == "true":
            pytest.fail("Slurm is not up (CI runs .ci/slurm-up.sh first)", pytrace=False)
        pytest.skip("no Slurm on this host")
    # The grid manager lets go of the fork resource and takes the job to Slurm's.
    failover(pool, schedd, tmp_path, "batch slurm")
