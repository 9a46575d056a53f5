"""The spool's tar and directory handling on its own: what a job left behind cannot
redirect a write or leak a file; a submit's many directories are made together."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from htgrid.backends.condor._sandbox import _top_header
from htgrid.classad import ClassAd
from htgrid.net import BadRequest
from htgrid.net.server import NO_LIMIT, empty_job_dirs
from htgrid.schedd import _spool, _spool_output
from htgrid.schedd._spool import make_dirs, read_batch, receive_input, unpack_input
from htgrid.schedd._spool_output import pack_output

from ._support import tar_of, untar


def test_an_upload_does_not_follow_a_link_the_job_left(tmp_path: Path) -> None:
    sandbox, elsewhere = tmp_path / "spool" / "1" / "0", tmp_path / "elsewhere"
    sandbox.mkdir(parents=True)
    elsewhere.mkdir()
    (sandbox / "out").symlink_to(elsewhere)
    (sandbox / "file.txt").symlink_to(elsewhere / "target.txt")
    with pytest.raises(BadRequest, match="out in the sandbox is not a directory"):
        unpack_input(sandbox, tar_of({"out/x": b"redirected?"}))
    assert list(elsewhere.iterdir()) == []
    unpack_input(sandbox, tar_of({"file.txt": b"replaced"}))
    assert not (sandbox / "file.txt").is_symlink()
    assert (sandbox / "file.txt").read_bytes() == b"replaced"
    assert list(elsewhere.iterdir()) == []


def test_a_stale_upload_a_crash_left_is_cleared(tmp_path: Path) -> None:
    sandbox = tmp_path / "1" / "0"
    stale = tmp_path / "1" / ".0.incoming-0123456789ab"
    stale.mkdir(parents=True)
    (stale / "half.dat").write_bytes(b"x" * 10)
    assert unpack_input(sandbox, tar_of({"a.txt": b"a"})) == ["a.txt"]
    assert not stale.exists()
    assert [p.name for p in sandbox.iterdir()] == ["a.txt"]


def test_output_outside_iwd_names_and_links(tmp_path: Path) -> None:
    sandbox = tmp_path / "1" / "0"
    unpack_input(sandbox, tar_of({"in.txt": b"in"}))
    (sandbox / "made.txt").write_text("made")
    (sandbox / "in.txt").write_text("changed")  # changed since the upload: output too
    (sandbox / "secret").symlink_to("/etc/hostname")
    ad = ClassAd({"Iwd": str(sandbox), "Out": "/dev/null", "Err": "missing.err"})
    with pack_output(ad, sandbox, tmp_path) as tar:
        assert untar(tar.read()) == {"in.txt": b"changed", "made.txt": b"made"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1"]  # the tar had no name


@pytest.mark.parametrize("count", [3, 1200])
def test_missing_spool_directories_are_made_and_existing_ones_kept(
    tmp_path: Path, count: int
) -> None:
    # 1,200 go to `mkdir` processes (at most 500 names each); 3 are made in place.
    paths = [tmp_path / "spool" / str(1 + i % 2) / str(i) for i in range(count)]
    paths[1].mkdir(parents=True)
    (paths[1] / "in.txt").write_text("staged before")

    make_dirs(paths)

    assert all(path.is_dir() for path in paths)
    assert (paths[1] / "in.txt").read_text() == "staged before"


@pytest.mark.parametrize("count", [3, 20])
def test_a_directory_that_cannot_be_made_is_named(tmp_path: Path, count: int) -> None:
    (tmp_path / "7").write_text("a file where a cluster's directory should be")
    paths = [tmp_path / "6" / str(i) for i in range(count - 1)] + [tmp_path / "7" / "0"]

    with pytest.raises(OSError, match=str(tmp_path / "7")):
        make_dirs(paths)


@pytest.mark.parametrize("size", [100, 3 << 20])
def test_an_upload_reads_back_whole_in_memory_or_from_a_file(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, size, 64 << 10):
            yield data[start : start + (64 << 10)]

    body = asyncio.run(receive_input(tmp_path, chunks(), NO_LIMIT, "the input"))
    with body:
        assert body.read() == data


def _batch(blocks: bytes) -> io.BytesIO:
    """A batch upload: header blocks, then the end of the archive as tarfile writes it."""
    data = blocks + tarfile.NUL * (2 * tarfile.BLOCKSIZE)
    return io.BytesIO(data + tarfile.NUL * (-len(data) % tarfile.RECORDSIZE))


def _dir_header(name: str, fmt: int = tarfile.PAX_FORMAT, **fields: object) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    for key, value in fields.items():
        setattr(info, key, value)
    return info.tobuf(fmt, "utf-8", "surrogateescape")


def _file(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape") + data.ljust(512, b"\0")


def _corrupt(header: bytes, at: int, value: bytes) -> bytes:
    return header[:at] + value + header[at + len(value) :]


def _read(data: io.BytesIO, monkeypatch: pytest.MonkeyPatch, quick: bool) -> object:
    """What read_batch makes of `data`: its jobs' members and problems, or its error."""
    if not quick:
        monkeypatch.setattr(_spool, "empty_job_dirs", lambda _: None)
    data.seek(0)
    try:
        batch = read_batch(data, NO_LIMIT)
    except BadRequest as exc:
        return ("refused", str(exc))
    finally:
        monkeypatch.undo()
    with batch.tar:
        members = {
            job: [(m.name, str(rel)) for m, rel in found] for job, found in batch.members.items()
        }
        return members, {job: str(problem) for job, problem in batch.problems.items()}


_EMPTY_DIRS = {
    "the GAHP's headers": b"".join(_top_header(f"{c}.{p}") for c in (7, 1234) for p in range(3)),
    "ustar": b"".join(_dir_header(f"3.{p}", tarfile.USTAR_FORMAT) for p in range(4)),
    "gnu": b"".join(_dir_header(f"3.{p}", tarfile.GNU_FORMAT) for p in range(4)),
    "./ names": b"".join(_dir_header(f"./5.{p}") for p in range(2)),
    "a job twice": _dir_header("8.0") + _dir_header("8.1") + _dir_header("8.0"),
    "owners and times": _dir_header("9.0", uid=1000, gid=50, mtime=1_700_000_000, uname="u"),
}
_OTHERS = {
    "a file in a job": _dir_header("1.0") + _file("1.0/in.txt", b"data"),
    "a directory in a job": _dir_header("1.0") + _dir_header("1.0/sub"),
    "not a job": _dir_header("1.0") + _dir_header("input"),
    "a long name": _dir_header("1." + "0" * 120),
    "not ASCII": _dir_header("1.0") + _dir_header("é.0"),
    "a bad checksum": _dir_header("1.0") + _corrupt(_dir_header("1.1"), 148, b"000001\0 "),
    "a bad mode": _corrupt(_dir_header("1.0"), 100, b"9999999\0"),
    "a later bad mode": _dir_header("1.0") + _corrupt(_dir_header("1.1"), 100, b"xyz\0"),
    "a size": _corrupt(_dir_header("1.0"), 124, b"00000000001\0"),
    "a prefix": _corrupt(_dir_header("1.0"), 345, b"2.0"),
    "nothing": b"",
    "not a tar": b"garbage".ljust(512, b"x"),
}


@pytest.mark.parametrize("what", [*_EMPTY_DIRS, *_OTHERS])
def test_a_batch_of_empty_sandboxes_reads_as_tarfile_reads_it(
    what: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = _EMPTY_DIRS.get(what, _OTHERS.get(what, b""))
    data = _batch(blocks)

    assert (empty_job_dirs(data) is not None) is (what in _EMPTY_DIRS)
    assert data.tell() == 0
    assert _read(data, monkeypatch, quick=True) == _read(data, monkeypatch, quick=False)


def test_the_quick_read_of_empty_sandboxes_names_each_job_once_in_order() -> None:
    assert empty_job_dirs(_batch(_EMPTY_DIRS["a job twice"])) == ["8.0", "8.1"]
    assert empty_job_dirs(_batch(_EMPTY_DIRS["./ names"])) == ["5.0", "5.1"]
    # A tar cut short before its end block is tarfile's to judge.
    assert empty_job_dirs(io.BytesIO(_top_header("1.0"))) is None


def _walked_by_os_walk(root: Path) -> list[str]:
    """What the output walk found when it was os.walk's (the reference)."""
    found = []
    for here, dirs, files in os.walk(root):
        base = os.path.relpath(here, root)
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(here, d)))
        found += [name if base == "." else f"{base}/{name}" for name in sorted(files)]
    return found


def test_the_output_walk_finds_what_os_walk_found(tmp_path: Path) -> None:
    root = tmp_path / "sandbox"
    (root / "b" / "deep").mkdir(parents=True)
    (root / "a").mkdir()
    (root / "empty").mkdir()
    for name in ("z.txt", "m.txt", "b/deep/x", "b/y", "a/é é"):
        (root / name).write_text(name)
    os.symlink(root / "b", root / "link-to-dir")  # not entered, not listed
    os.symlink(root / "z.txt", root / "link-to-file")  # listed (refused when packed)
    os.symlink(tmp_path / "nowhere", root / "a" / "dangling")
    os.mkfifo(root / "b" / "fifo")
    walked = [str(rel) for rel in _spool_output._walk(root)]
    assert walked == _walked_by_os_walk(root)
    assert walked[:3] == ["link-to-file", "m.txt", "z.txt"]  # a directory's files first
    assert list(_spool_output._walk(tmp_path / "missing")) == []
    assert list(_spool_output._walk(root / "empty")) == []
