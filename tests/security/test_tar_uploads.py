"""Tar uploads, on every route that unpacks one: a sparse member counts by the size it
unpacks to (its holes are written as zeros), not by the few bytes it takes on the wire;
an upload holds at most MAX_TAR_MEMBERS members; absolute names, `..`, links and device
files are refused; and a refused upload writes nothing.

The sparse archives are made by GNU tar (`tar --sparse`), in its two formats: Python's
tarfile reads sparse members but cannot write them."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from htgrid.backends.condor import _sandbox as condor_sandbox
from htgrid.backends.condor._errors import SandboxError
from htgrid.classad import ClassAd
from htgrid.net import _tarscan
from htgrid.net._errors import BadRequest, SandboxTooLarge
from htgrid.net.server import SizeLimit
from htgrid.queue import HoldReasonCode, JobId
from htgrid.schedd._spool import read_batch, unpack_input
from htgrid.startd._transfer import TransferError
from htgrid.startd._transfer import unpack_input as startd_unpack
from htgrid.testing import PersonalPool

MIB = 1 << 20
APPARENT = 64 * MIB  # what the sparse file unpacks to
LIMIT = SizeLimit("MAX_TRANSFER_INPUT_MB", 1)
SPOOLING = {"JobStatus": 5, "HoldReasonCode": 16, "HoldReasonSubCode": 0}
FORMATS = ["gnu", "pax"]  # old GNU sparse headers, and PAX 1.0 (GNU.sparse.*)


def _gnu_tar() -> str:
    found = shutil.which("tar")
    if (
        found is None
        or b"GNU tar"
        not in subprocess.run([found, "--version"], capture_output=True, check=False).stdout
    ):
        if os.environ.get("CI") == "true":
            pytest.fail("GNU tar is needed to make sparse archives")
        pytest.skip("GNU tar is needed to make sparse archives")
    return found


def sparse_tar(tmp_path: Path, fmt: str, top: str = "") -> bytes:
    """A tar of one file, `hole.dat` (under `top/` if given): one byte, then a hole up
    to APPARENT bytes."""
    source = tmp_path / f"sparse-{fmt}"
    where = source / top if top else source
    where.mkdir(parents=True)
    with open(where / "hole.dat", "wb") as out:
        out.write(b"x")
        out.truncate(APPARENT)
    name = f"{top}/hole.dat" if top else "hole.dat"
    data = subprocess.run(
        [_gnu_tar(), "--sparse", f"--format={fmt}", "-cf", "-", "-C", str(source), name],
        capture_output=True,
        check=True,
    ).stdout
    assert len(data) < MIB, "the file system made no hole: the test proves nothing"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        (member,) = [m for m in tar.getmembers() if m.isfile()]
        assert member.issparse() and member.size == APPARENT
    return data


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    config = {"MAX_TRANSFER_INPUT_MB": 1}
    with PersonalPool(tmp_path_factory.mktemp("tars"), fsync=False, config=config) as running:
        yield running


def _spooling_job(pool: PersonalPool, tmp_path: Path) -> JobId:
    with pool.client() as schedd:
        ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "Iwd": str(tmp_path), **SPOOLING})
        (job,) = schedd.submit_new(ad, [ClassAd()])
    return job


def _still_waiting(pool: PersonalPool, job: JobId) -> None:
    """The job still waits for its input, and nothing was written for it."""
    with pool.client() as schedd:
        ad = schedd.get(job)
    assert (ad["JobStatus"], ad["HoldReasonCode"]) == (5, 16)
    sandbox = Path(ad["Iwd"])
    assert not sandbox.exists() or list(sandbox.iterdir()) == []


# -- the schedd's routes -------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_sparse_member_counts_whole_on_the_single_job_route(
    pool: PersonalPool, tmp_path: Path, fmt: str
) -> None:
    job = _spooling_job(pool, tmp_path)
    with pool.client() as schedd, pytest.raises(SandboxTooLarge) as refused:
        schedd.put_input(job, sparse_tar(tmp_path, fmt))
    assert str(refused.value) == (
        f"the input sandbox of job {job} (its files unpacked) is {APPARENT} bytes, over the "
        f"limit of MAX_TRANSFER_INPUT_MB = 1 MiB ({MIB} bytes)"
    )
    _still_waiting(pool, job)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_sparse_member_counts_whole_on_the_batch_route(
    pool: PersonalPool, tmp_path: Path, fmt: str
) -> None:
    job = _spooling_job(pool, tmp_path)
    body = sparse_tar(tmp_path, fmt, top=str(job))
    transport = httpx.HTTPTransport(uds=str(pool.config.socket))
    with httpx.Client(transport=transport, base_url="http://htgrid") as http:
        answer = http.put(
            "/v1/jobs/input", content=body, headers={"content-type": "application/x-tar"}
        )
    assert answer.status_code == 200, answer.text
    problem = answer.json()["jobs"][str(job)]
    assert problem["status"] == 413
    assert f"is {APPARENT} bytes, over the limit of MAX_TRANSFER_INPUT_MB" in problem["detail"]
    _still_waiting(pool, job)


def test_a_small_sparse_member_is_taken_and_written_whole(tmp_path: Path) -> None:
    # Sparse is not refused for being sparse: it counts by what it unpacks to.
    sandbox = tmp_path / "sandbox"
    written = unpack_input(sandbox, sparse_tar(tmp_path, "gnu"), SizeLimit("X", 128), sync=False)
    assert written == ["hole.dat"]
    data = (sandbox / "hole.dat").read_bytes()
    assert len(data) == APPARENT and data[:1] == b"x" and data[1:] == bytes(APPARENT - 1)


def _tar_of(members: list[tarfile.TarInfo]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:", format=tarfile.GNU_FORMAT) as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return buffer.getvalue()


def _member(
    name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 0
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size
    return info


def test_an_upload_of_too_many_members_is_refused_before_it_is_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tarscan, "MAX_TAR_MEMBERS", 10)
    many = _tar_of([_member(f"f{i}") for i in range(11)])
    with pytest.raises(SandboxTooLarge, match="more than 10 members"):
        unpack_input(tmp_path / "one", many, sync=False)
    jobs = _tar_of([_member(f"{i}.0/in.txt") for i in range(11)])
    with pytest.raises(SandboxTooLarge, match="more than 10 members"):
        read_batch(io.BytesIO(jobs), LIMIT)
    assert not (tmp_path / "one").exists()


HOSTILE = {
    "an absolute name": [_member("/etc/evil")],
    "a name with ..": [_member("a/../../evil")],
    "a symbolic link out": [_member("link", tarfile.SYMTYPE, "/etc/passwd")],
    "a hard link": [_member("hard", tarfile.LNKTYPE, "/etc/passwd")],
    "a character device": [_member("dev", tarfile.CHRTYPE)],
    "a fifo": [_member("fifo", tarfile.FIFOTYPE)],
}


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_hostile_members_are_refused_and_nothing_is_written(tmp_path: Path, what: str) -> None:
    body = _tar_of([_member("fine.txt", size=3), *HOSTILE[what]])
    sandbox = tmp_path / "sandbox"
    with pytest.raises(BadRequest):
        unpack_input(sandbox, body, LIMIT, sync=False)
    assert not sandbox.exists() or list(sandbox.iterdir()) == []
    box = tmp_path / "box"
    if what == "an absolute name":  # tarfile's data filter puts it inside instead
        startd_unpack(_file(tmp_path, body), box)
        assert (box / "etc" / "evil").is_file() and not Path("/etc/evil").exists()
        return
    with pytest.raises(TransferError):  # the execute node's input transfer too
        startd_unpack(_file(tmp_path, body), box)
    assert not box.exists() or list(box.iterdir()) == []


def _file(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "upload.tar"
    path.write_bytes(data)
    return path


# -- the execute node's input transfer, and the condor GAHP's outputs ----------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_sparse_member_counts_whole_at_the_execute_node(tmp_path: Path, fmt: str) -> None:
    box = tmp_path / "sandbox"
    box.mkdir()
    with pytest.raises(TransferError) as refused:
        startd_unpack(_file(tmp_path, sparse_tar(tmp_path, fmt)), box, LIMIT)
    assert refused.value.code == HoldReasonCode.MaxTransferInputSizeExceeded
    assert f"is {APPARENT} bytes, over the limit of MAX_TRANSFER_INPUT_MB" in refused.value.reason
    assert list(box.iterdir()) == []


def test_the_execute_node_takes_the_pools_max_transfer_input_mb(tmp_path: Path) -> None:
    from htgrid.startd._config import StartdConfig

    (tmp_path / "htgrid.conf").write_text("MAX_TRANSFER_INPUT_MB = 3\n")
    assert StartdConfig.load(tmp_path).max_transfer_input_mb == 3


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_condor_gahp_refuses_a_sparse_output_member(tmp_path: Path, fmt: str) -> None:
    # A remote daemon sends outputs the GAHP writes into the job's Iwd: no htgrid daemon
    # sends a sparse file, and a few bytes must not become gigabytes on this disk.
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    ad = ClassAd({"Iwd": str(iwd), "Out": "job.out"})
    with pytest.raises(SandboxError, match="a sparse file of 67108864 bytes"):
        condor_sandbox.unpack_output(io.BytesIO(sparse_tar(tmp_path, fmt)), ad)
    assert list(iwd.iterdir()) == []
