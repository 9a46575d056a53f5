"""A job whose Requirements is a generated chain of thousands of terms is matched and run
like any other, and the negotiator goes on matching the other jobs.

Before, an 8,000-term Requirements raised RecursionError in the negotiator's cycle, at
every cycle, and no job of any user was matched.
"""

from __future__ import annotations

from pathlib import Path

from htgrid.net import ScheddClient
from htgrid.testing import PersonalPool, wait_for

from .conftest import HELLO_JOB as JOB
from .conftest import ran as _ran
from .conftest import script, submit

CHAIN = " && ".join(f"TARGET.Cpus >= {i % 2}" for i in range(8000))


def test_an_8000_term_requirements_matches_and_runs_and_others_still_match(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    script(tmp_path / "hello.sh", 'echo "hello from $1"\n')
    long = submit(pool.home, tmp_path, JOB.format(name="long", extra=f"requirements = {CHAIN}"))
    other = submit(pool.home, tmp_path, JOB.format(name="other", extra=""))
    wait_for(lambda: _ran(schedd, long), timeout=60, what="the 8000-term job to run")
    wait_for(lambda: _ran(schedd, other), timeout=60, what="the other job to run")
    assert (tmp_path / "long.out").read_text() == "hello from long\n"
    assert (tmp_path / "other.out").read_text() == "hello from other\n"
    (ad,) = schedd.history(f"ClusterId == {long}", ["Requirements", "ExitCode"])
    assert ad["ExitCode"] == 0
    assert CHAIN in repr(ad.lookup("Requirements"))

    # Later cycles match new jobs too (the long job's cluster is still in the history).
    later = submit(pool.home, tmp_path, JOB.format(name="later", extra=""))
    wait_for(lambda: _ran(schedd, later), timeout=60, what="a job submitted afterwards")
