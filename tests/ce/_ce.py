"""A submitter pool and a CE pool on this machine (HTCondor-CE's layout, in small).

The CE runs the queue, its collector, the grid manager and the job router: jobs that
arrive over HTCondor-C are routed by its routes (written to its htgrid.conf) to the
site's batch system, here `batch fork`. The submitter runs the queue and the grid
manager, trusts the CE's CA and holds a user token of it.
"""

from __future__ import annotations

import getpass
import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from htgrid.router import CE_DEFAULTS, ce_route
from htgrid.testing import PersonalPool, run_cli

CE_NAME = "ce@htgrid-ce.test"
CE_DAEMONS = ("MASTER", "SCHEDD", "COLLECTOR", "GRIDMANAGER", "JOB_ROUTER")
SUBMIT_DAEMONS = ("MASTER", "SCHEDD", "GRIDMANAGER")

FORK_ROUTE = """
JOB_ROUTER_ROUTE_NAMES = Never Fork
JOB_ROUTER_ROUTE_Never @=jrt
  REQUIREMENTS queue == "never" && RequestCpus > 64
  GridResource = "batch fork"
@jrt
JOB_ROUTER_ROUTE_Fork @=jrt
  REQUIREMENTS JobUniverse == 5
  GridResource = "batch fork"
  SET RoutedBy_Route "Fork"
  EVALSET OriginalCpus RequestCpus
@jrt
"""


def ce_pool(root: Path, routes: str = FORK_ROUTE, **config: object) -> PersonalPool:
    ce = PersonalPool(
        root,
        periodic_interval=1.0,
        kill_grace=2,
        daemons=CE_DAEMONS,
        config={
            "TRUST_DOMAIN": "htgrid-ce",
            "SCHEDD_NAME": CE_NAME,
            "GRIDMANAGER_JOB_PROBE_INTERVAL": 1,
            "JOB_ROUTER_POLLING_PERIOD": 1,
            **config,
        },
    )
    with (root / "htgrid.conf").open("a") as f:
        f.write(routes)
    return ce


def submitter_pool(home: Path) -> PersonalPool:
    """The submitter: its queue and grid manager (trust the CE with `trust`)."""
    return PersonalPool(
        home,
        periodic_interval=1.0,
        daemons=SUBMIT_DAEMONS,
        config={
            "TRUST_DOMAIN": "htgrid-submit",
            "SCHEDD_NAME": "submit@htgrid-ce.test",
            "GRIDMANAGER_JOB_PROBE_INTERVAL": 1,
        },
    )


@contextmanager
def submitter_and_ce(
    root: Path, routes: str = FORK_ROUTE, **config: object
) -> Iterator[tuple[PersonalPool, PersonalPool]]:
    ce = ce_pool(root / "ce", routes, **config)
    sub = submitter_pool(root / "submit")
    with ce:
        sub.trust(ce, user=getpass.getuser())
        with sub:
            yield sub, ce


JOB_BODY = "cat in.txt\necho ran via the CE >&2\necho made > made.txt\nsleep 3\nexit 3\n"
#: HTCondor-CE's defaults and its route to `batch fork` (`htgrid ce up --batch fork`).
CE_FORK = CE_DEFAULTS + ce_route("fork")
#: ... with one route instead, which takes the jobs of queue "special" only.
SPECIAL = (
    CE_FORK
    + "JOB_ROUTER_ROUTE_NAMES = Special\n"
    + 'JOB_ROUTER_ROUTE_Special @=jrt\n  REQUIREMENTS queue == "special"\n'
    + '  GridResource = "batch fork"\n@jrt\n'
)


def submit_grid_job(
    sub: PersonalPool, ce: PersonalPool, work: Path, extra: str = "", body: str = JOB_BODY
) -> str:
    """A grid job (grid_resource = condor CE-schedd CE-pool) on the submitter; its id."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "in.txt").write_text("input from the submitter\n")
    script = work / "job.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    (work / "job.sub").write_text(
        "universe = grid\n"
        f"grid_resource = condor {CE_NAME} {ce.collector}\n"
        f"initialdir = {work}\nexecutable = {script}\ntransfer_input_files = in.txt\n"
        "transfer_output_files = made.txt\n"
        f"output = out.txt\nerror = err.txt\nlog = job.log\n{extra}queue\n"
    )
    status, out, err = run_cli(sub.home, "submit", str(work / "job.sub"))
    assert status == 0, err
    return f"{out.split('cluster')[-1].strip().rstrip('.')}.0"


def need_batch_system(name: str, probe: Sequence[str]) -> None:
    """Skip unless `probe` (a batch system's client) answers; under CI=true, fail."""
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20, check=False)
        why = "" if done.returncode == 0 else done.stderr.strip()[:200]
    except (OSError, subprocess.TimeoutExpired) as err:
        why = str(err)
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is required under CI=true: {' '.join(probe)}: {why}")
        pytest.skip(f"{name} is not here: {' '.join(probe)}: {why}")


def jobs(pool: PersonalPool, constraint: str = "true") -> list[dict[str, object]]:
    """The pool's jobs matching `constraint`, once each: its queue, then its history (a
    job that leaves the queue between the two reads is in both: its history's ad is the
    one kept)."""
    with pool.client() as schedd:
        ads = [dict(ad) for ad in schedd.query(constraint)]
        ads += [dict(ad) for ad in schedd.history(constraint)]
    return list({(ad["ClusterId"], ad["ProcId"]): ad for ad in ads}.values())
