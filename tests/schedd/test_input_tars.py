"""The small input tars a schedd keeps (`InputTars`): a cluster's jobs that send the same
executable have it packed once; a file changed since is packed again, and one owner
never gets the tar packed for another."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from htgrid.classad import ClassAd
from htgrid.queue import JobId
from htgrid.schedd import _shadow_files
from htgrid.schedd._shadow_base import ShadowSettings
from htgrid.schedd._shadow_files import InputTars, small_input
from htgrid.schedd._shadow_run import ShadowRun


class _Host:
    def __init__(self, spool: Path) -> None:
        self.settings = ShadowSettings("schedd@test", spool, alive_interval=1.0, lease=60.0)
        self.input_tars = InputTars()


@pytest.fixture
def packs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One item a tar packed."""
    packed: list[int] = []
    pack = _shadow_files.pack

    def counted(*args: Any, **kw: Any) -> int:
        packed.append(1)
        return pack(*args, **kw)

    monkeypatch.setattr(_shadow_files, "pack", counted)
    return packed


def _input(host: _Host, iwd: Path, owner: str, proc: int = 0) -> dict[str, bytes]:
    """The files of `owner`'s job's input tar, by name."""
    ad = ClassAd({"Cmd": "exe", "Iwd": str(iwd), "Owner": owner, "JobUniverse": 5})
    run = ShadowRun(host, JobId(1, proc), ad, None, "<127.0.0.2:9620>")  # type: ignore[arg-type]
    small = asyncio.run(small_input(run, ad))
    assert small is not None
    data, size, _ = small
    assert size == len(data)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def test_the_same_executable_is_packed_once(tmp_path: Path, packs: list[int]) -> None:
    (tmp_path / "exe").write_bytes(b"#!/bin/sh\necho one\n")
    host = _Host(tmp_path / "spool")
    for proc in range(3):
        assert _input(host, tmp_path, "alice", proc) == {"exe": b"#!/bin/sh\necho one\n"}
    assert len(packs) == 1


def test_a_changed_file_is_read_again(tmp_path: Path, packs: list[int]) -> None:
    exe = tmp_path / "exe"
    exe.write_bytes(b"#!/bin/sh\necho one\n")
    host = _Host(tmp_path / "spool")
    assert _input(host, tmp_path, "alice") == {"exe": b"#!/bin/sh\necho one\n"}
    # The same size and modification time: its change time (and inode, replaced) differ.
    st = exe.stat()
    new = tmp_path / "exe.new"
    new.write_bytes(b"#!/bin/sh\necho two\n")
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    new.replace(exe)
    assert _input(host, tmp_path, "alice", 1) == {"exe": b"#!/bin/sh\necho two\n"}
    # Rewritten in place, its time set back: its change time still tells.
    with open(exe, "r+b") as f:
        f.write(b"#!/bin/sh\necho six\n")
    os.utime(exe, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _input(host, tmp_path, "alice", 2) == {"exe": b"#!/bin/sh\necho six\n"}
    assert len(packs) == 3


def test_another_owner_never_gets_a_kept_tar(tmp_path: Path, packs: list[int]) -> None:
    (tmp_path / "exe").write_bytes(b"#!/bin/sh\necho mine\n")
    host = _Host(tmp_path / "spool")
    assert _input(host, tmp_path, "alice") == {"exe": b"#!/bin/sh\necho mine\n"}
    assert _input(host, tmp_path, "bob") == {"exe": b"#!/bin/sh\necho mine\n"}
    assert len(packs) == 2  # bob's read of his own, not alice's tar
    assert _input(host, tmp_path, "alice", 1) and _input(host, tmp_path, "bob", 1)
    assert len(packs) == 2


def test_the_kept_tars_are_bounded(tmp_path: Path) -> None:
    tars = InputTars(limit=100)
    for n in range(5):
        tars.put(("alice", n), bytes(40))
    assert tars.get(("alice", 0)) is None and tars.get(("alice", 1)) is None
    assert tars.get(("alice", 3)) == bytes(40) and tars.get(("alice", 4)) == bytes(40)
    tars.put(("alice", 9), bytes(101))  # larger than the whole: not kept
    assert tars.get(("alice", 9)) is None
