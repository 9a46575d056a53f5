"""HTCondor-C's remote side: a spooling submit, stage in, stage out, leases, and the
remote copy leaving once the submitter is done with it, and its spool files with it (or,
after a crash, when the daemon starts)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from htgrid.net import BadRequest, Jobs, ScheddClient
from htgrid.queue import JobAction, JobId
from htgrid.schedd._spool_sweep import SweepFailures, remove_spools, spooled_jobs
from htgrid.testing import PersonalPool, wait_for

from ._support import LOCAL, SPOOLING, submit, tar_of, untar
from .conftest import DOMAIN


@pytest.fixture
def alice(pool: PersonalPool) -> ScheddClient:
    return pool.remote(pool.token(f"alice@{DOMAIN}"))


def _spool(pool: PersonalPool, job: JobId) -> Path:
    return pool.home / "spool" / str(job.cluster) / str(job.proc)


def test_a_spooling_job_waits_in_its_spool_dir_until_its_input_arrives(
    pool: PersonalPool, alice: ScheddClient
) -> None:
    with alice:
        job = submit(alice, Cmd="run.sh", GlobalJobId="submit#1.0#1", **SPOOLING)
        ad = alice.get(job)
        assert (ad["JobStatus"], ad["HoldReasonCode"]) == (5, 16)
        assert ad["Iwd"] == str(_spool(pool, job)) and _spool(pool, job).is_dir()
        assert (ad["SUBMIT_Iwd"], ad["GlobalJobId"]) == ("/submit/dir", "submit#1.0#1")
        files = {"run.sh": b"#!/bin/sh\n", "data/in.txt": b"input\n"}
        assert alice.put_input(job, tar_of(files)) == [job]
        assert (_spool(pool, job) / "data" / "in.txt").read_bytes() == b"input\n"
        assert (_spool(pool, job) / "run.sh").read_bytes() == b"#!/bin/sh\n"
        ad = alice.get(job)
        assert ad["JobStatus"] == 1 and ad["ReleaseReason"] == "Data files spooled"
        assert ad["StageInFinish"] >= ad["StageInStart"] > 0
        assert ad["LastHoldReasonCode"] == 16


@pytest.mark.parametrize(
    ("member", "why"),
    [("../escape.txt", "leaves the sandbox"), ("/etc/escape.txt", "has an absolute name")],
)
def test_a_tar_leaving_the_sandbox_is_refused_and_nothing_written(
    pool: PersonalPool, alice: ScheddClient, member: str, why: str
) -> None:
    with alice:
        job = submit(alice, **SPOOLING)
        archive = tar_of({"good.txt": b"fine", member: b"evil"})
        with pytest.raises(BadRequest, match=f"the tar member '{member}' {why}"):
            alice.put_input(job, archive)
        assert list(_spool(pool, job).iterdir()) == []
        assert not (_spool(pool, job).parent / "escape.txt").exists()
        assert alice.get(job)["JobStatus"] == 5  # still waiting for its input


def test_a_tar_with_a_link_is_refused(pool: PersonalPool, alice: ScheddClient) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        link = tarfile.TarInfo("passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    with alice:
        job = submit(alice, **SPOOLING)
        with pytest.raises(BadRequest, match="'passwd' is a link"):
            alice.put_input(job, buffer.getvalue())
        with pytest.raises(BadRequest, match="not a whole tar archive"):
            alice.put_input(job, b"this is not a tar archive at all" * 40)
        assert list(_spool(pool, job).iterdir()) == []


_SCRIPT = b"""#!/bin/sh
echo "hello from $(basename "$PWD")"
echo oops >&2
echo result > result.txt
ln -s /etc/passwd stolen.txt
cat in.txt > copy.txt
"""


def _run_local(alice: ScheddClient, **attrs: object) -> JobId:
    job = submit(
        alice,
        Cmd="job.sh",
        JobUniverse=LOCAL,
        Out="job.out",
        Err="job.err",
        LeaveJobInQueue=True,
        **SPOOLING,
        **attrs,
    )
    files = {"job.sh": _SCRIPT, "in.txt": b"input\n", "unused.txt": b"not output\n"}
    alice.put_input(job, tar_of(files, mode=0o755))
    wait_for(lambda: alice.get(job)["JobStatus"] == 4, what=f"job {job} to complete")
    return job


def test_the_output_of_a_completed_job(pool: PersonalPool, alice: ScheddClient) -> None:
    with alice:
        job = _run_local(alice)
        out = untar(alice.get_output(job))
        assert out == {
            "job.out": f"hello from {job.proc}\n".encode(),
            "job.err": b"oops\n",
            "result.txt": b"result\n",
            "copy.txt": b"input\n",
        }  # not the input, nor the link the job made to a file it must not hand out
        ad = alice.get(job)
        assert ad["StageOutFinish"] >= ad["StageOutStart"] > 0
        assert ad["JobStatus"] == 4  # LeaveJobInQueue keeps it for the submitter


def test_transfer_output_names_what_comes_back(alice: ScheddClient) -> None:
    with alice:
        job = _run_local(alice, TransferOutput="result.txt, stolen.txt, missing.txt")
        assert untar(alice.get_output(job)) == {
            "job.out": f"hello from {job.proc}\n".encode(),
            "job.err": b"oops\n",
            "result.txt": b"result\n",
        }


def test_leave_job_in_queue_false_lets_the_job_go(pool: PersonalPool, alice: ScheddClient) -> None:
    with alice:
        job = _run_local(alice)
        assert alice.edit(Jobs.of([job]), {"LeaveJobInQueue": "false"}) == [job]
        assert alice.query(f"ClusterId == {job.cluster}") == []
        (gone,) = alice.history(f"ClusterId == {job.cluster}")
        assert gone["JobStatus"] == 4


def test_an_expired_lease_removes_the_job(alice: ScheddClient) -> None:
    with alice:
        renewed, lapsing = submit(alice, **SPOOLING), submit(alice)
        later = int(time.time()) + 3600
        assert alice.update_leases({renewed: later, lapsing: later, "9999.0": later}) == [
            renewed,
            lapsing,
        ]
        assert alice.update_leases({lapsing: int(time.time()) - 1}) == [lapsing]

        def removed() -> bool:
            return not alice.query(f"ClusterId == {lapsing.cluster}")

        wait_for(removed, what="the periodic pass to remove the job")
        (ad,) = alice.history(f"ClusterId == {lapsing.cluster}")
        assert ad["JobStatus"] == 3
        assert ad["RemoveReason"] == (
            "The job's lease expired: its submitter did not renew it (JobLeaseDuration)"
        )
        assert alice.get(renewed)["JobLeaseExpiration"] == later


def _peak_rss(pid: int) -> int:
    """The daemon's peak resident memory (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def test_a_large_upload_streams_to_disk(pool: PersonalPool, alice: ScheddClient) -> None:
    size = 50 << 20
    block = bytes(range(256)) * 4096  # 1 MiB, not all zeros
    archive = tar_of({"big.dat": block * (size // len(block)), "small.txt": b"small\n"})
    assert pool.pid is not None
    with alice:
        job = submit(alice, **SPOOLING)
        before = _peak_rss(pool.pid)
        assert alice.put_input(job, archive) == [job]
        after = _peak_rss(pool.pid)
    print(f"daemon peak RSS {before >> 20} MiB -> {after >> 20} MiB for a {size >> 20} MiB upload")
    # Held whole, the body alone would raise the peak by its 50 MiB.
    assert after - before < size // 2
    big = _spool(pool, job) / "big.dat"
    assert big.stat().st_size == size
    with big.open("rb") as data:
        data.seek(size - len(block))
        assert data.read() == block


def test_a_job_that_left_the_queue_leaves_no_spool_files(
    pool: PersonalPool, alice: ScheddClient
) -> None:
    with alice:
        ran = submit(alice, Cmd="/bin/true", JobUniverse=LOCAL, **SPOOLING)
        removed = submit(alice, **SPOOLING)
        waiting = submit(alice, **SPOOLING)
        for job in (ran, removed, waiting):
            alice.put_input(job, tar_of({"in.txt": b"input\n"}))
        alice.act(JobAction.Remove, Jobs.of([removed]))
        wait_for(
            lambda: (
                len(
                    alice.history(
                        f"ClusterId == {ran.cluster} || ClusterId == {removed.cluster}",
                        ["JobStatus"],
                    )
                )
                == 2
            ),
            what="two jobs in the history",
        )
        wait_for(
            lambda: (
                not _spool(pool, ran).parent.exists() and not _spool(pool, removed).parent.exists()
            ),
            what="their spool directories gone",
        )
        assert (_spool(pool, waiting) / "in.txt").read_bytes() == b"input\n"  # still queued
        assert _spool(pool, waiting).with_name("0.input.json").exists()


def test_what_a_crash_left_behind_goes_when_the_daemon_starts(tmp_path: Path) -> None:
    with PersonalPool(tmp_path / "pool", fsync=False, config={"TRUST_DOMAIN": DOMAIN}) as pool:
        stale = pool.home / "spool" / "999" / "0"
        stale.mkdir(parents=True)
        (stale / "out.txt").write_text("from a job long gone\n")
        (stale.parent / ".1.incoming-0a1b2c").mkdir()
        pool.stop()
        pool.start()
        wait_for(lambda: not stale.parent.exists(), what="the stale spool directory gone")
        assert (pool.home / "spool" / "queue.db").exists()


def test_the_sweep_reads_only_job_spools(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    for path in ("12/0", "12/1", "12/.2.incoming-ab12", "13/4", "sandboxes/5.0", "gridmanager"):
        (spool / path).mkdir(parents=True)
    for path in ("12/0.input.json", "13/7.input.json", "queue.db", "12/notes.txt"):
        (spool / path).write_text("x")
    (spool / "14").write_text("a file, not a cluster")

    found = spooled_jobs(spool)
    assert found == {JobId(12, p) for p in (0, 1, 2)} | {JobId(13, 4), JobId(13, 7)}

    assert remove_spools(spool, [JobId(12, 0), JobId(12, 2), JobId(13, 4), JobId(13, 7)]) == (4, {})
    assert sorted(p.name for p in (spool / "12").iterdir()) == ["1", "notes.txt"]
    assert not (spool / "13").exists()  # emptied, so gone
    assert (spool / "sandboxes" / "5.0").is_dir() and (spool / "queue.db").exists()
    assert spooled_jobs(tmp_path / "nowhere") == set()


def test_spool_files_that_cannot_be_removed_yet_are_said_once_and_go_at_a_later_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "spool"
    (spool / "12" / "0").mkdir(parents=True)
    (spool / "12" / "0" / "out.txt").write_text("x")
    job = JobId(12, 0)

    def refusing(path: str, onerror: Callable[..., None]) -> None:
        error = PermissionError(1, "Operation not permitted")
        onerror(os.unlink, f"{path}/out.txt", (PermissionError, error, None))

    failures = SweepFailures()
    caplog.set_level("INFO", "htgrid.schedd")
    with monkeypatch.context() as patched:
        patched.setattr(shutil, "rmtree", refusing)
        for _ in range(2):
            removed, failed = remove_spools(spool, [job])
            assert failed == {job: f"{spool}/12/0/out.txt: Operation not permitted"}
            failures.note(removed, failed, [job])
    assert (spool / "12" / "0" / "out.txt").exists()
    failures.note(*remove_spools(spool, [job]), [job])
    assert not (spool / "12").exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"job 12.0: its spool files cannot be removed ({spool}/12/0/out.txt: Operation not "
        "permitted): tried again at each periodic pass",
        "removed the spool files of 1 job(s) no longer in the queue",
        "job 12.0: its spool files are removed, after 2 failed passes",
    ]
