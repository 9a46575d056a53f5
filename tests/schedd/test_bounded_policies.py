"""A job whose periodic policy would take for ever to evaluate (attributes that double
their work 60 times, a regexp that backtracks without end) does not stop the schedd's
periodic pass: the policy gives up with ERROR, which fires nothing (as in HTCondor, where
UserPolicy acts only on a policy that evaluates to a non-zero number), and the pass goes
on holding the jobs whose policies say so.

Before, the pass evaluated the first such job for ever, and no job after it was looked at.
"""

from __future__ import annotations

from pathlib import Path

from htgrid.queue import JobStatus

from ._harness import FAST, PersonalPool, ad_of, submit, wait_for

DOUBLING = "\n".join(f"+A{i} = A{i + 1} + A{i + 1}" for i in range(60)) + "\n+A60 = 1"

JOB = """universe = local
executable = /bin/sh
arguments = "-c 'exec sleep 300'"
{policy}
log = job.log
queue
"""

ATTRS = ["JobStatus", "HoldReason", "NumJobStarts"]


def _ad(pool: PersonalPool, job: str) -> dict[str, object]:
    with pool.client() as schedd:
        ad = ad_of(schedd, job, ATTRS)
    return {} if ad is None else {name: ad.get(name) for name in ATTRS}


def test_a_policy_that_would_never_end_fires_nothing_and_the_others_are_held(
    tmp_path: Path,
) -> None:
    with PersonalPool(tmp_path / "pool", **FAST) as pool:
        # Submitted first: the pass (in queue order) meets them before the others.
        doubling = submit(
            pool,
            tmp_path / "doubling",
            JOB.format(policy=f"periodic_hold = A0 > 0\n{DOUBLING}"),
        )
        backtracking = submit(
            pool,
            tmp_path / "regexp",
            JOB.format(policy=f'periodic_hold = regexp("(a|aa)+$", Run)\n+Run = "{"a" * 60}b"'),
        )
        held = submit(
            pool,
            tmp_path / "held",
            JOB.format(
                policy="periodic_hold = JobStatus == 2 && NumJobStarts >= 1\n"
                'periodic_hold_reason = "held by its policy"'
            ),
        )
        wait_for(
            lambda: _ad(pool, f"{held}.0").get("JobStatus") == JobStatus.HELD,
            timeout=60,
            what="the periodic pass to hold the job whose policy says so",
        )
        assert _ad(pool, f"{held}.0")["HoldReason"] == "held by its policy"
        for cluster in (doubling, backtracking):
            ad = _ad(pool, f"{cluster}.0")
            # Running since the first pass, and never held by a policy that gave ERROR.
            assert ad["JobStatus"] == JobStatus.RUNNING, ad
            assert ad["HoldReason"] is None, ad
