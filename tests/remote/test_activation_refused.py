"""A job whose activation a node refuses gets no execute event (001), as in HTCondor,
where the shadow writes it once the starter began the job: it stays idle, and its run
elsewhere later has the one 001 of its log. The refusal here: a claim kept for the
user's next job (claim reuse) by a node whose START no longer takes that job (the
admin changed it, condor_reconfig, after the match)."""

from __future__ import annotations

import signal
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.pool import CONFIG_NAME
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.node import ExecuteNode

from .test_remote_jobs import _script, _submit
from .test_restart import _events

_JOB = """while [ ! -e {go} ]; do sleep 0.1; done
echo "$1 ran on $(hostname)"
"""


def test_a_refused_activation_writes_no_001_and_the_job_runs_later_elsewhere(
    pool: PersonalPool, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    go = work / "go"
    _script(work / "wait.sh", _JOB.format(go=go))
    knobs = {"NUM_CPUS": 1, "CLAIM_WORKLIFE": 600}
    node2 = ExecuteNode(pool, tmp_path / "node2", "node2", "127.0.0.2", config=knobs)
    with node2:
        node2.joined()
        cluster = _submit(
            pool,
            work,
            "executable = wait.sh\narguments = $(Process)\nshould_transfer_files = YES\n"
            "log = job.log\noutput = job$(Process).out\nrequest_memory = 16\n"
            "request_cpus = 1\njob_max_vacate_time = 1\nqueue 2\n",
        )
        first, second = f"{cluster}.0", f"{cluster}.1"
        log = pool.home / "log" / "SchedLog"
        wait_for(
            lambda: f"job {first} started on" in log.read_text(),
            timeout=90,
            what="the first job to start on node2",
        )
        # The admin has node2 take no more of the second job; the schedd's claim, made
        # before, still sees the slot as it was matched.
        config = node2.home / CONFIG_NAME
        config.write_text(config.read_text() + "START = (TARGET.ProcId =!= 1)\n")
        assert node2.process is not None
        node2.process.send_signal(signal.SIGHUP)
        wait_for(
            lambda: "ProcId" in str(node2.slots()[0].lookup("Start")),
            timeout=30,
            what="node2's new START in its ad",
        )
        go.touch()
        wait_for(
            lambda: any(
                f"job {second}" in line and "refused" in line
                for line in log.read_text().splitlines()
            ),
            timeout=60,
            what="node2 to refuse the second job on the reused claim",
        )
    with ExecuteNode(pool, tmp_path / "node3", "node3", "127.0.0.3") as node3:
        node3.joined()
        wait_for(
            lambda: len(_ended(pool, cluster)) == 2,
            timeout=90,
            what="both jobs to complete",
        )
    assert _events(work / "job.log", first) == [0, 1, 5]
    assert _events(work / "job.log", second) == [0, 1, 5]  # no 001 of the refused try
    second_ad = next(a for a in _ended(pool, cluster) if a["ProcId"] == 1)
    assert second_ad["LastRemoteHost"].endswith("@node3") and second_ad["NumJobStarts"] == 1
    assert (work / "job1.out").read_text().startswith("1 ran on")


def _ended(pool: PersonalPool, cluster: int) -> list[ClassAd]:
    with pool.client() as schedd:
        return [ad for ad in schedd.history(f"ClusterId == {cluster}") if ad["JobStatus"] == 4]
