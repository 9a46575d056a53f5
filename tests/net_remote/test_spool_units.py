"""The spool's tar handling on its own: what a job left behind cannot redirect a write
or leak a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.net import BadRequest
from htgrid.schedd._spool import pack_output, unpack_input

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
