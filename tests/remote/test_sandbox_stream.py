"""A job's sandboxes stream between the schedd and a node of another host: a file far
larger than a chunk goes both ways without either daemon holding it in memory, and a
sandbox over its limit (the knob, or the job's own max_transfer_*_mb) holds the job
with HTCondor's code, leaving nothing of it behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.node import ExecuteNode

from .test_remote_jobs import _history, _script, _submit

_MIB = 1 << 20


@pytest.fixture(scope="module")
def node(pool: PersonalPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecuteNode]:
    with ExecuteNode(pool, tmp_path_factory.mktemp("node6"), "node6", "127.0.0.6") as running:
        running.joined()
        yield running


def _peak_rss(pid: int) -> int:
    """The most memory the process has held (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def _job(pool: PersonalPool, cluster: int) -> ClassAd | None:
    with pool.client() as schedd:
        ads = schedd.query(f"ClusterId == {cluster}")
    return ads[0] if ads else None


def _held(pool: PersonalPool, cluster: int) -> ClassAd:
    def held() -> ClassAd | None:
        ad = _job(pool, cluster)
        return ad if ad is not None and ad["JobStatus"] == 5 else None

    return wait_for(held, timeout=90, interval=0.2, what=f"job {cluster} held")


def test_a_sandbox_far_larger_than_a_chunk_streams_both_ways(
    pool: PersonalPool, node: ExecuteNode, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    size = 200 * _MIB
    with open(work / "big.in", "wb") as f:  # not sparse: every byte travels
        block = bytes(range(256)) * 4096
        for _ in range(size // len(block)):
            f.write(block)
    _script(work / "copy.sh", "cmp -s big.in big.in && cp big.in big.out && echo copied\n")
    with pool.client() as schedd:
        schedd_pid = int(schedd.health()["pid"])
    assert node.process is not None
    node_pid = node.process.pid
    before = {pid: _peak_rss(pid) for pid in (schedd_pid, node_pid)}
    cluster = _submit(
        pool,
        work,
        """executable = copy.sh
transfer_input_files = big.in
transfer_output_files = big.out
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
output = job.out
requirements = Machine == "node6"
request_memory = 16
queue
""",
    )
    ad = wait_for(lambda: _history(pool, cluster), timeout=240, interval=0.5, what="the job")
    assert ad["JobStatus"] == 4 and ad["ExitCode"] == 0
    assert (work / "job.out").read_text() == "copied\n"
    assert (work / "big.out").stat().st_size == size
    assert ad["BytesSent"] > size and ad["BytesRecvd"] >= size
    # Neither daemon held a whole file: each grew by far less than the file's size.
    for pid, peak in before.items():
        grown = _peak_rss(pid) - peak
        assert grown < 64 * _MIB, f"pid {pid} grew by {grown >> 20} MiB moving 200 MiB"
    assert not list((pool.config.spool / "transfer").iterdir())


def test_an_input_sandbox_over_the_limit_holds_the_job_before_it_is_sent(
    pool: PersonalPool, node: ExecuteNode, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "input.bin").write_bytes(b"x" * (3 * _MIB))
    _script(work / "never.sh", "touch ran\n")
    cluster = _submit(
        pool,
        work,
        """executable = never.sh
transfer_input_files = input.bin
should_transfer_files = YES
max_transfer_input_mb = 1
requirements = Machine == "node6"
request_memory = 16
queue
""",
    )
    ad = _held(pool, cluster)
    assert ad["HoldReasonCode"] == 32  # MaxTransferInputSizeExceeded
    reason = ad["HoldReason"]
    assert reason.startswith("Transfer input files failure: the input sandbox is ")
    assert "MaxTransferInputMB (the job's) = 1 MiB" in reason
    # Nothing was left: no transfer file here, no sandbox there, the slot free again.
    assert not list((pool.config.spool / "transfer").iterdir())
    wait_for(
        lambda: not [a for a in node.slots() if a["Name"] != "slot1@node6"],
        what="the node's slot free",
    )
    assert not list(node.config.execute_dir.iterdir())


def test_an_output_sandbox_over_the_limit_holds_the_job_and_places_nothing(
    pool: PersonalPool, node: ExecuteNode, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    _script(work / "big.sh", "head -c 3145728 /dev/zero > result.bin; echo done\n")
    cluster = _submit(
        pool,
        work,
        """executable = big.sh
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
output = job.out
max_transfer_output_mb = 1
requirements = Machine == "node6"
request_memory = 16
queue
""",
    )
    ad = _held(pool, cluster)
    assert ad["HoldReasonCode"] == 33  # MaxTransferOutputSizeExceeded
    assert ad["HoldReason"].startswith("Transfer output files failure: the output sandbox is ")
    assert "MaxTransferOutputMB (the job's) = 1 MiB" in ad["HoldReason"]
    # Nothing of it was placed, and no partial tar is left in the spool.
    assert not (work / "result.bin").exists() and not (work / "job.out").exists()
    assert not list((pool.config.spool / "transfer").iterdir())
