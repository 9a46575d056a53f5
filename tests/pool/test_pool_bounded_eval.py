"""Jobs whose Requirements would take for ever to evaluate (attributes that double their
work 60 times, a regexp that backtracks without end) never match, with the cycle's reason,
and the negotiator goes on matching the other jobs, which run.

Before, the negotiator's cycle evaluated the first of them for ever: no job of any user
was matched again.
"""

from __future__ import annotations

from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.testing import PersonalPool, wait_for

from .conftest import HELLO_JOB as JOB
from .conftest import ran, script, submit

DOUBLING = "\n".join(f"+A{i} = A{i + 1} + A{i + 1}" for i in range(60)) + "\n+A60 = 1"


def _rejected(schedd: ScheddClient, cluster: int) -> ClassAd | None:
    """The job's ad once a negotiation cycle has looked at it and not matched it."""
    ads = schedd.query(f"ClusterId == {cluster}", ["JobStatus", "LastRejMatchReason"])
    return ads[0] if ads and "LastRejMatchReason" in ads[0] else None


def test_requirements_that_would_never_end_do_not_match_and_others_still_run(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    script(tmp_path / "hello.sh", 'echo "hello from $1"\n')
    doubling = submit(
        pool.home,
        tmp_path,
        JOB.format(name="doubling", extra=f"requirements = A0 > 0\n{DOUBLING}"),
    )
    backtracking = submit(
        pool.home,
        tmp_path,
        JOB.format(
            name="regexp",
            extra=f'requirements = regexp("(a|aa)+$", Run)\n+Run = "{"a" * 60}b"',
        ),
    )
    # A cycle has gone through both and said why they did not match...
    for cluster in (doubling, backtracking):
        ad = wait_for(lambda c=cluster: _rejected(schedd, c), timeout=60, what="a cycle")
        assert ad["JobStatus"] == 1
        assert ad["LastRejMatchReason"]
    # ... and the cycles after it match the others.
    other = submit(pool.home, tmp_path, JOB.format(name="other", extra=""))
    wait_for(lambda: ran(schedd, other), timeout=60, what="the other job to run")
    assert (tmp_path / "other.out").read_text() == "hello from other\n"
    for cluster in (doubling, backtracking):
        (ad,) = schedd.query(f"ClusterId == {cluster}", ["JobStatus"])
        assert ad["JobStatus"] == 1  # still idle: never matched
