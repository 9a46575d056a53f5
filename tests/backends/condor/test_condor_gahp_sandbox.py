"""Big sandboxes through the condor GAHP: streamed both ways, and refused past the limits.

The GAHP's memory is read from the kernel (VmHWM, the process's peak resident set), so a
sandbox held whole in memory anywhere on the way shows, whatever the code looks like.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

import htgrid.classad as classad
from htgrid.backends.condor import _sandbox as sandbox
from htgrid.backends.condor._errors import SandboxError
from htgrid.backends.condor._http import RemoteSettings
from htgrid.backends.condor.server import CondorGahp, CondorOptions
from htgrid.gahp import Call, Credentials

from ._wire import Wire
from .conftest import SCHEDD_NAME, RemotePool, remote_pool
from .test_condor_gahp import job_ad, one, submit, wait_status

MIB = 1 << 20
BIG = 50 * MIB
# The GAHP may grow by this much while it moves 50 MiB each way; holding the sandbox in
# memory even once (a tar in a buffer, or the response body) takes more than this.
GROWTH_BOUND = 20 * MIB
TOO_LARGE_IN = "Transfer input too large: "
TOO_LARGE_OUT = "Transfer output too large: "


def peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes (VmHWM of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            value, unit = line.split()[1:3]
            assert unit == "kB", line
            return int(value) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def reset_peak_rss(pid: int) -> int:
    """Start the process's peak over from its current resident set (proc(5), clear_refs 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return peak_rss(pid)


def write_file(path: Path, size: int) -> None:
    """`size` bytes that do not compress to nothing (a pattern, written a MiB at a time)."""
    block = bytes(range(256)) * (MIB // 256)
    with path.open("wb") as out:
        for _ in range(size // MIB):
            out.write(block)


def job_dir(tmp_path: Path, script: str) -> Path:
    iwd = tmp_path / "job"
    iwd.mkdir()
    (iwd / "job.sh").write_text("#!/bin/sh\n" + script)
    (iwd / "job.sh").chmod(0o755)
    return iwd


def stage_in(gahp: Wire, ad: str, job_id: str) -> list[str]:
    cluster, proc = job_id.split(".")
    stage_ad = ad[:-1] + f"; ClusterId = {cluster}; ProcId = {proc} ]"
    return gahp.call("CONDOR_JOB_STAGE_IN", SCHEDD_NAME, stage_ad, timeout=120)


def leftovers(*dirs: Path) -> list[str]:
    """Temporary files the GAHP left behind in `dirs`."""
    return sorted(p.name for d in dirs for p in d.iterdir() if p.name.startswith("."))


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """The GAHP's TMPDIR: its temporary tars go there, so the tests can see them go."""
    path = tmp_path / "gahp-tmp"
    path.mkdir()
    return path


@pytest.fixture
def gahp(remote: RemotePool, scratch: Path) -> Iterator[Wire]:
    wire = Wire(*remote.gahp_options("-s", SCHEDD_NAME), env={"TMPDIR": str(scratch)})
    yield wire
    wire.close()


@pytest.fixture(scope="module")
def limited(
    shared_tmp_factory: Callable[[str], Path], test_users: tuple[str, ...]
) -> Iterator[RemotePool]:
    """A remote pool that takes at most 1 MiB of input and hands out at most 1 MiB."""
    base = shared_tmp_factory("condor-gahp-limited")
    with remote_pool(base, MAX_TRANSFER_INPUT_MB=1, MAX_TRANSFER_OUTPUT_MB=1) as pool:
        yield pool


@pytest.fixture
def limited_gahp(limited: RemotePool, scratch: Path) -> Iterator[Wire]:
    wire = Wire(*limited.gahp_options("-s", SCHEDD_NAME), env={"TMPDIR": str(scratch)})
    yield wire
    wire.close()


def test_50_mib_each_way_keeps_the_gahps_memory_flat(
    gahp: Wire, tmp_path: Path, scratch: Path
) -> None:
    iwd = job_dir(tmp_path, "cp big.dat copy.dat\necho copied\n")
    write_file(iwd / "big.dat", BIG)
    ad = job_ad(iwd, TransferInput="big.dat")
    job_id = submit(gahp, ad)
    pid = gahp.process.pid

    before_in = reset_peak_rss(pid)
    assert stage_in(gahp, ad, job_id) == ["S", "NULL"]
    growth_in = peak_rss(pid) - before_in
    wait_status(gahp, job_id, 4, timeout=120)
    before_out = reset_peak_rss(pid)
    result = gahp.call("CONDOR_JOB_STAGE_OUT", SCHEDD_NAME, job_id, timeout=120)
    growth_out = peak_rss(pid) - before_out

    assert result == ["S", "NULL"]
    copy = iwd / "copy.dat"
    assert copy.stat().st_size == BIG
    assert copy.read_bytes() == (iwd / "big.dat").read_bytes()
    assert (iwd / "out.txt").read_text() == "copied\n"
    print(f"GAHP resident set {before_in / MIB:.1f} MiB before staging 50 MiB in")
    print(
        f"peak growth: stage-in +{growth_in / MIB:.1f} MiB, stage-out +{growth_out / MIB:.1f} MiB"
    )
    assert growth_in < GROWTH_BOUND, f"stage-in grew the GAHP by {growth_in / MIB:.1f} MiB"
    assert growth_out < GROWTH_BOUND, f"stage-out grew the GAHP by {growth_out / MIB:.1f} MiB"
    assert leftovers(iwd, scratch) == []


def test_input_over_max_transfer_input_mb_fails_as_too_large(
    limited_gahp: Wire, tmp_path: Path, scratch: Path
) -> None:
    iwd = job_dir(tmp_path, "echo never\n")
    write_file(iwd / "big.dat", 3 * MIB)
    ad = job_ad(iwd, TransferInput="big.dat")
    job_id = submit(limited_gahp, ad)

    result = stage_in(limited_gahp, ad, job_id)

    assert result[0] == "F" and len(result) == 2, result
    error = result[1]
    assert error.startswith(TOO_LARGE_IN), error
    # The remote daemon's own words: which job, and which knob refused it.
    assert f"job {job_id}" in error and "MAX_TRANSFER_INPUT_MB = 1 MiB" in error, error
    held = one(limited_gahp, job_id)
    assert held is not None and held["JobStatus"] == 5 and held["HoldReasonCode"] == 16
    assert leftovers(scratch) == []


def test_output_over_max_transfer_output_mb_fails_as_too_large(
    limited_gahp: Wire, tmp_path: Path, scratch: Path
) -> None:
    iwd = job_dir(tmp_path, "head -c 3145728 /dev/zero > big.out\n")
    ad = job_ad(iwd, TransferInput="")
    job_id = submit(limited_gahp, ad)
    assert stage_in(limited_gahp, ad, job_id) == ["S", "NULL"]
    wait_status(limited_gahp, job_id, 4)

    result = limited_gahp.call("CONDOR_JOB_STAGE_OUT", SCHEDD_NAME, job_id)

    assert result[0] == "F" and len(result) == 2, result
    error = result[1]
    assert error.startswith(TOO_LARGE_OUT), error
    assert f"job {job_id}" in error and "MAX_TRANSFER_OUTPUT_MB = 1 MiB" in error, error
    assert not (iwd / "big.out").exists()
    assert leftovers(iwd, scratch) == []


def test_a_sandbox_under_the_limits_still_goes_both_ways(
    limited_gahp: Wire, tmp_path: Path, scratch: Path
) -> None:
    iwd = job_dir(tmp_path, "head -c 1000 /dev/zero > small.out\necho fine\n")
    ad = job_ad(iwd, TransferInput="")
    job_id = submit(limited_gahp, ad)
    assert stage_in(limited_gahp, ad, job_id) == ["S", "NULL"]
    wait_status(limited_gahp, job_id, 4)
    assert limited_gahp.call("CONDOR_JOB_STAGE_OUT", SCHEDD_NAME, job_id) == ["S", "NULL"]
    assert (iwd / "small.out").stat().st_size == 1000
    assert (iwd / "out.txt").read_text() == "fine\n"
    assert leftovers(iwd, scratch) == []


def test_a_stage_in_as_the_first_request_is_sent_again_with_the_token(
    gahp: Wire, remote: RemotePool, tmp_path: Path
) -> None:
    # A fresh GAHP's first request goes without a token; the 401 names the realm and the
    # streamed body is sent again, whole, with the token.
    iwd = job_dir(tmp_path, "wc -c < big.dat\n")
    write_file(iwd / "big.dat", 3 * MIB)
    ad = job_ad(iwd, TransferInput="big.dat")
    job_id = submit(gahp, ad)
    cluster, proc = job_id.split(".")
    stage_ad = ad[:-1] + f"; ClusterId = {cluster}; ProcId = {proc} ]"
    options = CondorOptions(
        remote=RemoteSettings(ca_files=(str(remote.ca_file),)),
        token_dirs=(remote.tokens_dir,),
    )

    async def first_request() -> Sequence[str]:
        fresh = CondorGahp(options)
        try:
            call = Call("CONDOR_JOB_STAGE_IN", 1, (remote.url, stage_ad), Credentials())
            return await fresh.stage_in(call)
        finally:
            await fresh.aclose()

    assert asyncio.run(first_request()) == ("S", "NULL")
    wait_status(gahp, job_id, 4)
    assert gahp.call("CONDOR_JOB_STAGE_OUT", SCHEDD_NAME, job_id) == ["S", "NULL"]
    assert (iwd / "out.txt").read_text().strip() == str(3 * MIB)


@pytest.mark.parametrize(
    ("attrs", "names"),
    [
        ({"Cmd": "/bin/true", "TransferExecutable": False}, False),
        ({"Cmd": "run.sh"}, True),  # the executable travels unless told not to
        ({"Cmd": "/bin/true", "TransferExecutable": False, "In": "/dev/null"}, False),
        ({"Cmd": "/bin/true", "TransferExecutable": False, "In": "in.txt"}, True),
        ({"Cmd": "/bin/true", "TransferExecutable": False, "TransferInput": "a, b"}, True),
        ({"Cmd": "/bin/true", "TransferExecutable": False, "x509userproxy": "x509up"}, True),
    ],
)
def test_a_stage_in_looks_for_files_only_when_its_ad_names_some(
    attrs: dict[str, object], names: bool
) -> None:
    ad = classad.ClassAd({"Iwd": "/somewhere", **attrs})
    assert sandbox.names_inputs(ad) is names
    with pytest.raises(SandboxError, match="no absolute SUBMIT_Iwd or Iwd"):
        sandbox.names_inputs(classad.ClassAd(attrs))


@pytest.mark.parametrize("name", ["1.0", "12345.678", "x" * 99, "x" * 100, "é.0", "j" * 300])
def test_a_jobs_directory_header_is_the_one_tarfile_writes(name: str) -> None:
    header = sandbox._top_header(name)

    assert header == sandbox._tar_header(name, tarfile.DIRTYPE, 0, 0o755, 0)
    with tarfile.open(fileobj=io.BytesIO(header + tarfile.NUL * 1024)) as tar:
        (member,) = tar.getmembers()
    assert (member.name, member.isdir(), member.mode) == (name, True, 0o755)
