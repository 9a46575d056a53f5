"""The spool's tar and directory handling on its own: what a job left behind cannot
redirect a write or leak a file; a submit's many directories are made together."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.net import BadRequest
from htgrid.schedd._spool import (
    NO_LIMIT,
    make_dirs,
    pack_output,
    receive_input,
    unpack_input,
)

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
