"""A submit's spool directories are made aside; a stage-in that comes before they are made
does not wait for the whole cluster's: it makes its own jobs' and releases them."""

from __future__ import annotations

import asyncio
import io
import tarfile
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from htgrid._privsep import Account
from htgrid.classad import ClassAd
from htgrid.queue import Identity, JobId, JobQueue
from htgrid.schedd import _service
from htgrid.schedd._service import QueueService
from htgrid.schedd._worker import QueueWorker

ALICE = Identity("alice")
SPOOLING = {
    "Cmd": "/bin/true",
    "JobUniverse": 12,
    "JobStatus": 5,
    "HoldReasonCode": 16,
    "HoldReasonSubCode": 0,
    "HoldReason": "Spooling input data files",
}


def tar_of(entries: dict[str, bytes | None]) -> bytes:
    """A tar of files (name -> contents) and directories (name -> None)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def body(data: bytes) -> AsyncIterator[bytes]:
    yield data


def test_a_stage_in_does_not_wait_for_its_clusters_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _service.make_dirs
    let_go, cluster_made = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow_for_the_cluster(paths: Sequence[Path], account: Account | None) -> None:
        calls.append(len(paths))
        if len(calls) == 1:  # the submit's, for the whole cluster: a slow disk
            assert let_go.wait(10)
            real(paths, account)
            cluster_made.set()
        else:
            real(paths, account)

    monkeypatch.setattr(_service, "make_dirs", slow_for_the_cluster)
    spool = tmp_path / "spool"
    spool.mkdir()
    worker = QueueWorker(JobQueue.open(tmp_path / "queue", fsync=False))
    service = QueueService(worker, dict, spool=lambda c, p: spool / str(c) / str(p))

    async def scenario() -> None:
        cluster = await service.reserve_cluster(ALICE)
        procs = [ClassAd() for _ in range(40)]
        jobs = await service.submit(ALICE, cluster, ClassAd(SPOOLING), procs)
        full, empty, single = jobs[7], jobs[8], jobs[30]

        batch = tar_of({f"{full}/in.txt": b"data", f"{empty}/": None})
        staged = service.put_inputs(ALICE, body(batch), len(batch))
        assert await asyncio.wait_for(staged, 5) == {full: None, empty: None}
        # Past 1 MiB an upload is spooled to a file before it is unpacked: not in the
        # job's directory, which is not there yet.
        large = b"one" * 400_000
        one = tar_of({"in.txt": large})
        alone = service.put_input(ALICE, single, body(one), len(one))
        assert await asyncio.wait_for(alone, 5) == [single]

        assert not cluster_made.is_set()  # the cluster's directories are still coming
        assert (spool / str(cluster) / "7" / "in.txt").read_bytes() == b"data"
        assert (spool / str(cluster) / "30" / "in.txt").read_bytes() == large
        assert list((spool / str(cluster) / "8").iterdir()) == []
        ads = await worker.read(lambda q: q.get_many([full, empty, single, jobs[0]]))
        assert [ads[j]["JobStatus"] for j in (full, empty, single)] == [1, 1, 1]
        assert ads[jobs[0]]["JobStatus"] == 5  # not staged: still held for its input

        let_go.set()
        await asyncio.to_thread(cluster_made.wait, 10)
        made = sorted(int(p.name) for p in (spool / str(cluster)).iterdir() if p.is_dir())
        assert made == list(range(40))
        assert (spool / str(cluster) / "7" / "in.txt").read_bytes() == b"data"

    try:
        asyncio.run(scenario())
    finally:
        let_go.set()
        worker.close()
    assert calls[0] == 40


def test_an_unknown_job_id_in_a_batch_makes_no_directory(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    worker = QueueWorker(JobQueue.open(tmp_path / "queue", fsync=False))
    service = QueueService(worker, dict, spool=lambda c, p: spool / str(c) / str(p))
    batch = tar_of({"99.0/in.txt": b"x"})

    async def scenario() -> None:
        outcome = await service.put_inputs(ALICE, body(batch), len(batch))
        assert list(outcome) == [JobId(99, 0)]
        assert outcome[JobId(99, 0)] is not None

    try:
        asyncio.run(scenario())
    finally:
        worker.close()
    assert list(spool.iterdir()) == []
