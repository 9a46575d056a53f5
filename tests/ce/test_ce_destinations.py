"""A CE's routes to real destinations: Slurm and Grid Engine (.ci/slurm-up.sh,
.ci/sge-up.sh; skipped where they are not running, failed under CI=true), Slurm on
another host over ssh (`batch slurm user@host`, .ci/sshd-up.sh), a cloud (`ec2`, moto's
server), and another HTCondor pool (`condor SCHEDD POOL`). Each job goes submitter -> CE (HTCondor-C) -> the
destination, with the pilot vocabulary turned into the destination's requests, and its
output and exit come back."""

from __future__ import annotations

import getpass
import subprocess
from pathlib import Path
from typing import Any

import pytest

from htgrid.grid.batch import BatchJobId
from htgrid.router import CE_DEFAULTS, ce_route
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.bosco import grid_resource as remote_resource
from htgrid.testing.bosco import install_remote_gahp, ssh_probe

from ._ce import (
    CE_NAME,
    ce_pool,
    jobs,
    need_batch_system,
    submit_grid_job,
    submitter_and_ce,
    submitter_pool,
)
from .test_ce_end_to_end import completed_on

#: Long enough to be seen in the batch system's queue.
BODY = "cat in.txt\necho ran via the CE >&2\necho made > made.txt\nsleep 20\nexit 3\n"


def native_id(ce: PersonalPool) -> str | None:
    """The batch system's id of the CE's routed job, once it has one."""
    for ad in jobs(ce, "RoutedFromJobId isnt undefined"):
        grid_id = BatchJobId.parse(ad.get("GridJobId"))
        if grid_id is not None and grid_id.blah_id is not None:
            return grid_id.blah_id.rsplit("/", 1)[-1]
    return None


def query(argv: list[str]) -> str | None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def assert_came_back(sub: PersonalPool, job: str, work: Path) -> None:
    assert completed_on(sub, job)["ExitCode"] == 3
    assert (work / "out.txt").read_text() == "input from the submitter\n"
    assert "ran via the CE" in (work / "err.txt").read_text()
    assert (work / "made.txt").read_text() == "made\n"


@pytest.mark.xdist_group("batch-systems")  # the real Slurm and Grid Engine: one at a time
@pytest.mark.timeout(400)
def test_a_ce_routes_to_slurm_with_the_pilots_requests(tmp_path: Path) -> None:
    need_batch_system("Slurm", ["scontrol", "ping"])
    with submitter_and_ce(tmp_path, CE_DEFAULTS + ce_route("slurm")) as (sub, ce):
        work = tmp_path / "work"
        job = submit_grid_job(
            sub,
            ce,
            work,
            '+xcount = 2\n+maxMemory = 100\n+maxWallTime = 10\n+queue = "debug"\n',
            body=BODY,
        )
        native = wait_for(lambda: native_id(ce), timeout=240, what="the job in Slurm")
        seen = wait_for(
            lambda: query(["squeue", "-h", "-j", native, "-o", "%P %C %m %l"]),
            timeout=60,
            what=f"Slurm job {native} in squeue",
        )
        assert seen.split() == ["debug", "2", "100M", "10:00"], seen
        assert_came_back(sub, job, work)


@pytest.mark.xdist_group("batch-systems")  # the real Slurm and Grid Engine: one at a time
@pytest.mark.timeout(400)
def test_a_ce_routes_to_grid_engine_with_the_pilots_requests(tmp_path: Path) -> None:
    need_batch_system("Grid Engine", ["qstat", "-u", "root"])
    with submitter_and_ce(tmp_path, CE_DEFAULTS + ce_route("sge")) as (sub, ce):
        work = tmp_path / "work"
        job = submit_grid_job(sub, ce, work, '+maxWallTime = 10\n+queue = "all.q"\n', body=BODY)
        native = wait_for(lambda: native_id(ce), timeout=240, what="the job in Grid Engine")
        seen = wait_for(
            lambda: query(["qstat", "-j", native]),
            timeout=60,
            what=f"Grid Engine job {native} in qstat",
        )
        assert "h_rt=600" in seen and "all.q" in seen, seen
        assert_came_back(sub, job, work)


@pytest.mark.timeout(400)
def test_a_ce_routes_to_another_htcondor_pool(tmp_path: Path) -> None:
    site = PersonalPool(
        tmp_path / "site",
        periodic_interval=1.0,
        kill_grace=2,
        daemons=("MASTER", "SCHEDD", "COLLECTOR", "NEGOTIATOR", "STARTD"),
        config={
            "TRUST_DOMAIN": "htgrid-site",
            "SCHEDD_NAME": "site@htgrid-ce.test",
            "NEGOTIATOR_INTERVAL": 2,
            "NEGOTIATOR_MIN_INTERVAL": 0.1,
            "NUM_CPUS": 4,
            "SCHEDD_INTERVAL": 1,
        },
    )
    with site:
        route = CE_DEFAULTS + ce_route(f"condor site@htgrid-ce.test {site.collector}")
        ce = ce_pool(tmp_path / "ce", route)
        ce.trust(site, user=getpass.getuser())
        sub = submitter_pool(tmp_path / "submit")
        with ce:
            sub.trust(ce, user=getpass.getuser())
            with sub:
                work = tmp_path / "work"
                job = submit_grid_job(sub, ce, work, "+xcount = 2\n+maxMemory = 64\n", body=BODY)
                assert_came_back(sub, job, work)
                (copy,) = jobs(ce, "RoutedFromJobId isnt undefined")
                assert copy["GridResource"] == f"condor site@htgrid-ce.test {site.collector}"
                assert copy["RouteName"] == "Condor_Pool"
                (ran,) = jobs(site)
                assert ran["RequestCpus"] == 2 and ran["RequestMemory"] == 64
                assert ran["ExitCode"] == 3 and ran.get("GlobalJobId") != CE_NAME


@pytest.mark.timeout(420)
def test_a_ce_routes_to_slurm_on_another_host_over_ssh(tmp_path: Path) -> None:
    need_batch_system("Slurm", ["scontrol", "ping"])
    need_batch_system("the sshd of .ci/sshd-up.sh", ssh_probe())
    resource = remote_resource(install_remote_gahp())
    route = (
        CE_DEFAULTS
        + "JOB_ROUTER_ROUTE_NAMES = Bosco_Slurm\nJOB_ROUTER_ROUTE_Bosco_Slurm @=jrt\n"
        + f'  TargetUniverse = 9\n  GridResource = "{resource}"\n@jrt\n'
    )
    with submitter_and_ce(tmp_path, route) as (sub, ce):
        work = tmp_path / "work"
        job = submit_grid_job(sub, ce, work, "+xcount = 1\n", body=BODY)
        native = wait_for(lambda: native_id(ce), timeout=240, what="the job in Slurm")
        seen = wait_for(
            lambda: query(["squeue", "-h", "-j", native, "-o", "%u"]),
            timeout=60,
            what=f"Slurm job {native} in squeue",
        )
        assert seen.split() == ["boscotest"], seen  # submitted there, as the remote user
        assert_came_back(sub, job, work)
        (copy,) = jobs(ce, "RoutedFromJobId isnt undefined")
        assert copy["GridResource"] == resource and copy["RouteName"] == "Bosco_Slurm"


@pytest.mark.timeout(300)
def test_a_ce_routes_to_a_cloud_the_routed_job_becomes_a_vm(
    tmp_path: Path, moto_url: str, aws: Any, keys: tuple[str, str], ami: str
) -> None:
    route = CE_DEFAULTS + (
        "JOB_ROUTER_ROUTE_NAMES = Cloud\nJOB_ROUTER_ROUTE_Cloud @=jrt\n"
        f'  TargetUniverse = 9\n  GridResource = "ec2 {moto_url}"\n'
        f'  SET EC2AccessKeyId "{keys[0]}"\n  SET EC2SecretAccessKey "{keys[1]}"\n'
        f'  SET EC2AmiID "{ami}"\n  SET EC2InstanceType "m5.large"\n@jrt\n'
    )
    with submitter_and_ce(tmp_path, route) as (sub, ce):
        work = tmp_path / "work"
        job = submit_grid_job(sub, ce, work, "+xcount = 1\n")

        def the_vm() -> dict[str, Any] | None:
            answer = aws.describe_instances()
            for vm in (i for res in answer["Reservations"] for i in res["Instances"]):
                if vm["State"]["Name"] == "running":
                    return dict(vm)
            return None

        vm = wait_for(the_vm, timeout=180, what="the routed job's instance in EC2")
        assert vm["ImageId"] == ami and vm["InstanceType"] == "m5.large"
        (copy,) = jobs(ce, "RoutedFromJobId isnt undefined")
        assert copy["GridResource"] == f"ec2 {moto_url}" and copy["RouteName"] == "Cloud"
        wait_for(lambda: running_on(sub, job), timeout=120, what="the submitter's job to run")
        # The VM's end is the job's end, as for any ec2 job: it comes back completed.
        aws.terminate_instances(InstanceIds=[vm["InstanceId"]])
        assert completed_on(sub, job)["ExitCode"] == 0


def running_on(pool: PersonalPool, job: str) -> bool:
    cluster, proc = job.split(".")
    found = jobs(pool, f"ClusterId == {cluster} && ProcId == {proc}")
    return bool(found) and found[0]["JobStatus"] == 2
