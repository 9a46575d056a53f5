"""Two real pools on this machine for the HTCondor-C tests: A submits, B runs.

Pool B runs the queue and its collector (TLS + tokens), with `b_daemons` more if a test
needs them (the negotiator and an execute node for vanilla jobs); pool A runs the queue
and the grid manager, trusts B's CA and holds a user token of B. Both look often: the
queue's periodic pass every second, A's grid manager polls B every second
(GRIDMANAGER_JOB_PROBE_INTERVAL).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from htgrid.testing import PersonalPool, run_cli

B_NAME = "schedd-b@htcondor-c.test"
B_POOL = ("MASTER", "SCHEDD", "COLLECTOR")
A_POOL = ("MASTER", "SCHEDD", "GRIDMANAGER")


@contextmanager
def two_pools(
    root: Path,
    *,
    b_daemons: Sequence[str] = B_POOL,
    b_config: Mapping[str, object] | None = None,
) -> Iterator[tuple[PersonalPool, PersonalPool]]:
    """Pools A and B running under `root`; A's user may submit to B."""
    b = PersonalPool(
        root / "b",
        periodic_interval=1.0,
        kill_grace=2,
        daemons=b_daemons,
        config={"TRUST_DOMAIN": "pool-b", "SCHEDD_NAME": B_NAME, **(b_config or {})},
    )
    a = PersonalPool(
        root / "a",
        periodic_interval=1.0,
        daemons=A_POOL,
        config={
            "TRUST_DOMAIN": "pool-a",
            "SCHEDD_NAME": "schedd-a@htcondor-c.test",
            "GRIDMANAGER_JOB_PROBE_INTERVAL": 1,
        },
    )
    with b:
        a.trust(b, user=getpass.getuser())
        with a:
            yield a, b


def submit(
    a: PersonalPool,
    b: PersonalPool,
    work: Path,
    extra: str = "",
    body: str = "cat in.txt\necho ran on $(hostname) >&2\nexit 7\n",
    universe: str = "local",
) -> str:
    """Submit a grid job on A for B (a script reading in.txt); its local id."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "in.txt").write_text("from A\n")
    script = work / "job.sh"
    script.write_text(f"#!/bin/sh\n{body}")
    script.chmod(0o755)
    (work / "job.sub").write_text(
        "universe = grid\n"
        f"grid_resource = condor {B_NAME} {b.collector}\n"
        f"initialdir = {work}\nexecutable = {script}\ntransfer_input_files = in.txt\n"
        "output = out.txt\nerror = err.txt\nlog = job.log\n"
        f"remote_universe = {universe}\n{extra}queue\n"
    )
    status, out, err = run_cli(a.home, "submit", str(work / "job.sub"))
    assert status == 0, err
    return f"{out.split('cluster')[-1].strip().rstrip('.')}.0"


def ad_of(pool: PersonalPool, job_id: str) -> dict[str, object] | None:
    """The job's ad in the pool's queue, else in its history; None if neither has it."""
    with pool.client() as schedd:
        jobs = schedd.query(f"ClusterId == {job_id.split('.')[0]}")
        if jobs:
            return dict(jobs[0])
        old = schedd.history(f"ClusterId == {job_id.split('.')[0]}")
    return dict(old[0]) if old else None


def in_queue(pool: PersonalPool, job_id: str) -> bool:
    with pool.client() as schedd:
        return bool(schedd.query(f"ClusterId == {job_id.split('.')[0]}"))


def b_jobs(b: PersonalPool) -> list[dict[str, object]]:
    """Every job B ever had, once each: its queue, then its history (a job that leaves
    the queue between the two reads is in both: its history's ad is the one kept)."""
    with b.client() as schedd:
        ads = [dict(ad) for ad in schedd.query("true")]
        ads += [dict(ad) for ad in schedd.history("true")]
    return list({(ad["ClusterId"], ad["ProcId"]): ad for ad in ads}.values())


def remote_id(ad: Mapping[str, object]) -> str:
    """The remote job id in a local ad's GridJobId (`condor <schedd> <pool> <c.p>`)."""
    words = str(ad["GridJobId"]).split()
    assert words[:2] == ["condor", B_NAME], words
    return words[3]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
