"""Vanilla jobs through the whole pool: matched, claimed, run on the execute node with
their files, recorded in the queue and the event log; and what happens when the execute
node dies under them."""

from __future__ import annotations

import functools
import os
import signal
import time
from pathlib import Path

from htgrid.classad import ClassAd
from htgrid.net import Jobs, ScheddClient
from htgrid.queue import HoldReasonCode, JobAction, JobStatus
from htgrid.testing import PersonalPool, run_cli, wait_for

from .conftest import events, script, submit


def _done(schedd: ScheddClient, cluster: int, procs: int) -> bool:
    return len(schedd.history(f"ClusterId == {cluster}", ["ExitCode"])) == procs


def test_a_hundred_jobs_with_input_and_output_files_run_and_return(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    script(
        work / "square.sh", 'read n < "input.$1"; echo $((n * n)) > "square.$1"; echo "job $1"\n'
    )
    for i in range(100):
        (work / f"input.{i}").write_text(f"{i}\n")
    began = time.monotonic()
    cluster = submit(
        pool.home,
        work,
        """executable = square.sh
arguments = $(Process)
transfer_input_files = input.$(Process)
should_transfer_files = YES
output = out/job.$(Process).out
error = out/job.$(Process).err
log = jobs.log
request_memory = 16
queue 100
""",
    )
    wait_for(lambda: _done(schedd, cluster, 100), timeout=90, interval=0.2, what="100 jobs")
    # How long it took is printed, not asserted: a wall-clock bound fails on a loaded machine.
    print(f"100 jobs submitted, run and returned in {time.monotonic() - began:.1f} s")
    for i in range(100):
        assert (work / f"square.{i}").read_text() == f"{i * i}\n"
        assert (work / "out" / f"job.{i}.out").read_text() == f"job {i}\n"
        assert (work / "out" / f"job.{i}.err").read_text() == ""
    logged = _logged(work / "jobs.log", 300)
    assert len(logged) == 100
    assert all(numbers == [0, 1, 5] for numbers in logged.values()), logged
    ads = schedd.history(f"ClusterId == {cluster}", ["ExitCode", "RemoteHost", "BytesRecvd"])
    assert {ad["ExitCode"] for ad in ads} == {0}
    assert all(str(ad["RemoteHost"]).startswith("slot1_") for ad in ads)
    assert len({ad["RemoteHost"] for ad in ads}) < 100  # claims ran several jobs each
    assert all(ad["BytesRecvd"] > 0 for ad in ads)


def _logged(log: Path, count: int) -> dict[str, list[int]]:
    """The log's events once it holds `count` of them: the queue daemon writes the log from
    its change feed, a moment after the queue records what happened."""

    def enough() -> dict[str, list[int]] | None:
        got = events(log) if log.exists() else {}
        return got if sum(map(len, got.values())) >= count else None

    return wait_for(enough, what=f"{count} events in {log.name}")


def _pids(path: Path, count: int) -> list[int] | None:
    try:
        pids = [int(p) for p in path.read_text().split()]
    except FileNotFoundError:
        return None
    return pids if len(pids) >= count else None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ")[1][:1] != b"Z"
    except OSError:
        return False


def test_a_job_whose_execute_node_is_killed_runs_again_and_completes(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script(
        tmp_path / "stubborn.sh",
        f'echo $$ >> {pids}\nif [ "$(wc -l < {pids})" -ge 2 ]; then echo finished > result.txt;'
        " exit 0; fi\nwhile :; do sleep 0.1; done\n",
    )
    cluster = submit(
        pool.home,
        tmp_path,
        "executable = stubborn.sh\nshould_transfer_files = YES\nlog = job.log\n"
        "output = job.out\nqueue\n",
    )
    job = f"{cluster}.0"
    (first,) = wait_for(lambda: _pids(pids, 1), what="the first run")
    startd = pool.child_pid("startd")
    assert startd is not None
    os.kill(startd, signal.SIGKILL)
    wait_for(
        lambda: events(tmp_path / "job.log").get(job, [])[:3] == [0, 1, 4],
        what="the job evicted (004)",
    )
    wait_for(lambda: _done(schedd, cluster, 1), timeout=30, what="the second run to finish")
    assert not _alive(first)  # the restarted node killed what the dead one left running
    assert _logged(tmp_path / "job.log", 5)[job] == [0, 1, 4, 1, 5]
    assert (tmp_path / "result.txt").read_text() == "finished\n"
    (ad,) = schedd.history(f"ClusterId == {cluster}", ["NumJobStarts", "ExitCode"])
    assert (ad["NumJobStarts"], ad["ExitCode"]) == (2, 0)
    new = pool.child_pid("startd")
    assert new is not None and new != startd


def test_holding_and_removing_running_jobs_stops_them_on_the_node(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script(tmp_path / "loop.sh", f"echo $$ >> {pids}\nwhile :; do sleep 0.1; done\n")
    cluster = submit(
        pool.home,
        tmp_path,
        "executable = loop.sh\nshould_transfer_files = YES\nlog = job.log\nqueue 2\n",
    )
    running = wait_for(lambda: _pids(pids, 2), what="both jobs running")
    # A process runs a moment before the schedd records its start (001); a job held or
    # removed in between never started as far as the queue and the log know.
    wait_for(lambda: _logged(tmp_path / "job.log", 4), what="both jobs' 001")
    schedd.act(JobAction.Hold, Jobs.of([f"{cluster}.0"]), "wait a bit")
    schedd.act(JobAction.Remove, Jobs.of([f"{cluster}.1"]))
    wait_for(lambda: not any(_alive(p) for p in running), what="both processes gone")
    wait_for(lambda: len(schedd.history(f"ClusterId == {cluster}")) == 1, what="1 leaves")
    assert schedd.get(f"{cluster}.0")["JobStatus"] == JobStatus.HELD
    schedd.act(JobAction.Release, Jobs.of([f"{cluster}.0"]))
    wait_for(lambda: _pids(pids, 3), what="the released job running again")
    wait_for(
        lambda: events(tmp_path / "job.log").get(f"{cluster}.0") == [0, 1, 12, 13, 1],
        what="the released job's 001",
    )
    schedd.act(JobAction.Remove, Jobs.of([f"{cluster}.0"]))
    wait_for(lambda: len(schedd.history(f"ClusterId == {cluster}")) == 2, what="0 leaves")
    logged = _logged(tmp_path / "job.log", 9)
    assert logged[f"{cluster}.0"] == [0, 1, 12, 13, 1, 9]
    assert logged[f"{cluster}.1"] == [0, 1, 9]


def test_output_files_remaps_and_the_shared_filesystem(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    script(
        tmp_path / "make.sh",
        "cat > a.txt; echo b > b.txt; mkdir d; echo c > d/c.txt\necho ignored > ignored.txt; pwd\n",
    )
    (tmp_path / "stdin.txt").write_text("a, from stdin\n")
    listed = submit(
        pool.home,
        tmp_path,
        """executable = make.sh
input = stdin.txt
should_transfer_files = YES
transfer_output_files = a.txt, b.txt, d
transfer_output_remaps = "b.txt = renamed/b.out"
output = listed.out
queue
""",
    )
    shared = submit(
        pool.home,
        tmp_path / "shared",
        f"""executable = {tmp_path}/make.sh
should_transfer_files = NO
output = shared.out
queue
""",
    )
    wait_for(lambda: _done(schedd, listed, 1) and _done(schedd, shared, 1), what="both jobs")
    assert (tmp_path / "a.txt").read_text() == "a, from stdin\n"
    assert (tmp_path / "renamed" / "b.out").read_text() == "b\n"
    assert (tmp_path / "d" / "c.txt").read_text() == "c\n"
    assert not (tmp_path / "ignored.txt").exists()
    assert "/execute/dir_" in (tmp_path / "listed.out").read_text()
    # Without transfer the job ran in its Iwd, on the filesystem it shares with us.
    assert (tmp_path / "shared" / "shared.out").read_text() == f"{tmp_path / 'shared'}\n"
    assert (tmp_path / "shared" / "ignored.txt").exists()


def test_missing_files_hold_the_job_with_htcondors_codes(
    pool: PersonalPool, schedd: ScheddClient, tmp_path: Path
) -> None:
    script(tmp_path / "true.sh", "exit 0\n")
    no_input = submit(
        pool.home,
        tmp_path,
        "executable = true.sh\nshould_transfer_files = YES\ntransfer_input_files = nope.dat\n"
        "queue\n",
    )
    no_output = submit(
        pool.home,
        tmp_path,
        "executable = true.sh\nshould_transfer_files = YES\ntransfer_output_files = result.dat\n"
        "queue\n",
    )
    for cluster, code in (
        (no_input, HoldReasonCode.TransferInputError),
        (no_output, HoldReasonCode.TransferOutputError),
    ):
        ad = wait_for(functools.partial(_held, schedd, f"{cluster}.0"))
        assert ad["HoldReasonCode"] == code, ad.get("HoldReason")
        assert ad["HoldReasonSubCode"] == 2  # ENOENT
    schedd.act(JobAction.Remove, Jobs.of([f"{no_input}.0", f"{no_output}.0"]))


def _held(schedd: ScheddClient, job: str) -> ClassAd | None:
    ad = schedd.get(job)
    return ad if ad["JobStatus"] == JobStatus.HELD else None


def test_the_pool_shows_its_slots_and_its_schedd(pool: PersonalPool, tmp_path: Path) -> None:
    rc, out, err = run_cli(pool.home, "status", "-af", "Name", "SlotType", "TotalSlotCpus")
    assert rc == 0, err
    assert out.splitlines()[0].startswith("slot1@") and "Partitionable 20" in out
    rc, out, _ = run_cli(pool.home, "status", "-schedd", "-af", "Name", "TotalIdleJobs")
    assert rc == 0 and out.startswith("htgrid@")
    rc, out, _ = run_cli(pool.home, "status", "-negotiator", "-af", "Name")
    assert rc == 0 and out.startswith("negotiator@")
