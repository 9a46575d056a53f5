"""Moving a job's files: what goes in, what comes back, and where it lands."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.net.server import SizeLimit
from htgrid.queue import HoldReasonCode
from htgrid.startd._transfer import (
    STDERR,
    STDOUT,
    TransferError,
    input_entries,
    output_entries,
    pack,
    should_transfer,
    snapshot,
    unpack_input,
    unpack_output,
    unpack_to,
)


def _job(iwd: Path, **attrs: object) -> ClassAd:
    return ClassAd({"Iwd": str(iwd), "Cmd": "run.sh", **attrs})


def test_should_transfer_follows_the_job_and_the_filesystem_domain() -> None:
    assert should_transfer(ClassAd({"ShouldTransferFiles": "YES"}), "localhost")
    assert not should_transfer(ClassAd({"ShouldTransferFiles": "NO"}), "elsewhere")
    same = ClassAd({"ShouldTransferFiles": "IF_NEEDED", "FileSystemDomain": "localhost"})
    assert not should_transfer(same, "localhost")
    assert should_transfer(same, "cluster.example")
    assert should_transfer(ClassAd(), "localhost")  # IF_NEEDED, no domain: it travels


def test_input_is_the_executable_stdin_and_the_listed_files(tmp_path: Path) -> None:
    for name in ("run.sh", "stdin.txt", "a.dat", "data/x", "data/y", "more/z"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    job = _job(tmp_path, In="stdin.txt", TransferInput="a.dat, data, more/")
    names = [name for name, _ in input_entries(job)]
    assert names == ["run.sh", "stdin.txt", "a.dat", "data", "z"]
    job = _job(tmp_path, In="/dev/null", TransferExecutable=False, TransferIn=False)
    assert input_entries(job) == []
    with pytest.raises(TransferError) as missing:
        input_entries(_job(tmp_path, TransferInput="nope.dat"))
    assert missing.value.code == HoldReasonCode.TransferInputError
    assert missing.value.subcode == 2 and "nope.dat" in missing.value.reason
    with pytest.raises(TransferError, match="URL transfers are not supported"):
        input_entries(_job(tmp_path, TransferInput="https://example.org/x"))
    spooled = tmp_path / "spooled"
    spooled.mkdir()
    (spooled / STDOUT).write_text("first run\n")
    assert [n for n, _ in input_entries(_job(tmp_path), spooled)] == ["run.sh", STDOUT]


def test_the_jobs_proxy_goes_with_its_input(tmp_path: Path) -> None:
    """HTCondor's file transfer adds x509userproxy to the input."""
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "x509up").write_text("proxy")
    entries = input_entries(_job(tmp_path, x509userproxy="creds/x509up"))
    assert entries[-1] == ("x509up", tmp_path / "creds" / "x509up")
    with pytest.raises(TransferError, match="x509gone"):
        input_entries(_job(tmp_path, x509userproxy="x509gone"))


def test_input_lands_flat_in_the_sandbox(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x").write_text("x")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    tar = tmp_path / "in.tar"
    pack(input_entries(_job(tmp_path, TransferInput="data")), tar, dereference=True)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    unpack_input(tar, sandbox)
    assert sorted(os.listdir(sandbox)) == ["data", "run.sh"]
    assert (sandbox / "data" / "x").read_text() == "x"


@pytest.mark.parametrize("compression", ["", "gz"])
def test_an_input_tar_is_unpacked_plain_or_compressed(tmp_path: Path, compression: str) -> None:
    """A plain tar (as htgrid packs one) is read first; a compressed one still is too."""
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode=f"w:{compression}") as tar:
        tar.add(tmp_path / "run.sh", arcname="run.sh")
    on_disk = tmp_path / "in.tar"
    on_disk.write_bytes(data.getvalue())
    for source in (io.BytesIO(data.getvalue()), on_disk):
        sandbox = tmp_path / f"sandbox-{type(source).__name__}"
        sandbox.mkdir()
        unpack_input(source, sandbox)
        assert (sandbox / "run.sh").read_text() == "#!/bin/sh\n"
    with pytest.raises(TransferError, match="cannot unpack"):
        unpack_input(io.BytesIO(b"not a tar" * 100), tmp_path)


def test_a_tar_ends_after_its_end_blocks_not_padded_to_a_record(tmp_path: Path) -> None:
    """Two empty files: two headers and the two zero blocks of the end (tarfile would pad
    the archive to 10 KB); every reader takes it, and a file's contents stay whole."""
    for name in ("_condor_stdout", "_condor_stderr"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "data").write_bytes(b"x" * 700)
    entries = [(n, tmp_path / n) for n in ("_condor_stdout", "_condor_stderr")]
    held = io.BytesIO()
    assert pack(entries, held, dereference=False) == 4 * 512 == len(held.getvalue())
    on_disk = tmp_path / "out.tar"
    size = pack([*entries, ("data", tmp_path / "data")], on_disk, dereference=False)
    assert size == on_disk.stat().st_size == 4 * 512 + 512 + 1024
    with tarfile.open(fileobj=io.BytesIO(held.getvalue())) as tar:
        assert tar.getnames() == ["_condor_stdout", "_condor_stderr"]
    with tarfile.open(on_disk) as tar:
        data = tar.extractfile("data")
        assert data is not None and data.read() == b"x" * 700


@pytest.mark.parametrize("to_file", [False, True])
def test_a_packed_sandbox_has_no_record_padding_and_unpacks_whole(
    tmp_path: Path, to_file: bool
) -> None:
    # A job's stdout alone, in every message that carries a sandbox: not padded to a
    # 10 KiB record of zeros.
    (tmp_path / "out").write_text("hello\n")
    entries = [(STDOUT, tmp_path / "out")]
    if to_file:
        dest = tmp_path / "out.tar"
        size = pack(entries, dest, dereference=False)
        data = dest.read_bytes()
    else:
        buffer = io.BytesIO()
        size = pack(entries, buffer, dereference=False)
        data = buffer.getvalue()
    # One header (no pax header for the fraction of its time), one block, two zero ones.
    assert size == len(data) == 4 * tarfile.BLOCKSIZE
    assert data.endswith(tarfile.NUL * 2 * tarfile.BLOCKSIZE)
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    assert unpack_output(io.BytesIO(data), _job(iwd, Out="job.out")) == 6
    assert (iwd / "job.out").read_text() == "hello\n"


def test_output_is_what_the_job_made_or_changed_unless_listed(tmp_path: Path) -> None:
    (tmp_path / "input.txt").write_text("in")
    (tmp_path / ".job.ad").write_text("")
    before = snapshot(tmp_path)
    (tmp_path / STDOUT).write_text("out")
    (tmp_path / "result.txt").write_text("r")
    (tmp_path / "subdir").mkdir()
    job = ClassAd({"Iwd": "/x"})
    assert [n for n, _ in output_entries(job, tmp_path, before, strict=True)] == [
        STDOUT,
        "result.txt",
    ]
    listed = ClassAd({"TransferOutput": "subdir, input.txt"})
    assert [n for n, _ in output_entries(listed, tmp_path, before, strict=True)] == [
        STDOUT,
        "subdir",
        "input.txt",
    ]
    assert [
        n for n, _ in output_entries(ClassAd({"TransferOutput": ""}), tmp_path, before, strict=True)
    ] == [STDOUT]
    missing = ClassAd({"TransferOutput": "result.txt, gone.txt"})
    with pytest.raises(TransferError) as caught:
        output_entries(missing, tmp_path, before, strict=True)
    assert caught.value.code == HoldReasonCode.TransferOutputError
    names = [n for n, _ in output_entries(missing, tmp_path, before, strict=False)]
    assert names == [STDOUT, "result.txt"]  # an eviction keeps what there is


def test_output_lands_in_iwd_out_err_and_remaps(tmp_path: Path) -> None:
    sandbox, iwd = tmp_path / "sandbox", tmp_path / "iwd"
    sandbox.mkdir()
    iwd.mkdir()
    (sandbox / STDOUT).write_text("hello\n")
    (sandbox / STDERR).write_text("oops\n")
    (sandbox / "a.txt").write_text("a")
    (sandbox / "b.txt").write_text("b")
    (sandbox / "d").mkdir()
    (sandbox / "d" / "inner").write_text("i")
    tar = tmp_path / "out.tar"
    entries = [(n, sandbox / n) for n in (STDOUT, STDERR, "a.txt", "b.txt", "d")]
    pack(entries, tar, dereference=False)
    job = ClassAd(
        {
            "Iwd": str(iwd),
            "Out": "logs/job.out",
            "Err": "/dev/null",
            "TransferOutputRemaps": "b.txt = results/b.renamed ; d = kept",
        }
    )
    written = unpack_output(tar, job)
    assert written == len("hello\n") + 1 + 1 + 1  # stderr went nowhere
    assert (iwd / "logs" / "job.out").read_text() == "hello\n"
    assert (iwd / "a.txt").read_text() == "a"
    assert (iwd / "results" / "b.renamed").read_text() == "b"
    assert (iwd / "kept" / "inner").read_text() == "i"
    assert not (iwd / STDERR).exists()
    spool = tmp_path / "spool"
    assert unpack_to(tar, spool) > 0
    assert sorted(os.listdir(spool)) == sorted([STDOUT, STDERR, "a.txt", "b.txt", "d"])


def test_a_hostile_output_tar_writes_nothing_outside(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    tar_path = tmp_path / "evil.tar"
    with tarfile.open(tar_path, "w") as tar:
        for name in ("../escape.txt", "/abs.txt", "ok.txt"):
            data = b"x"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("link")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    unpack_output(tar_path, ClassAd({"Iwd": str(iwd)}))
    assert os.listdir(iwd) == ["ok.txt"]
    assert not (tmp_path / "escape.txt").exists()
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    with pytest.raises(TransferError):
        unpack_input(tar_path, sandbox)  # the data filter refuses the whole input


def test_an_output_tar_over_the_limit_places_nothing(tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    tar_path = tmp_path / "big.tar"
    with tarfile.open(tar_path, "w") as tar:
        for name, size in (("small.txt", 10), ("big.bin", 2 << 20)):
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    with pytest.raises(TransferError) as caught:
        unpack_output(tar_path, ClassAd({"Iwd": str(iwd)}), SizeLimit("MAX_TRANSFER_OUTPUT_MB", 1))
    assert caught.value.code == HoldReasonCode.MaxTransferOutputSizeExceeded
    assert "over the limit of MAX_TRANSFER_OUTPUT_MB = 1 MiB" in caught.value.reason
    assert os.listdir(iwd) == []  # not even the small file that came first
