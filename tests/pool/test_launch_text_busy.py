"""A job's executable still open for writing somewhere when it is started.

A transferred executable is written by the node, and a child forked meanwhile by
another thread (another job starting) holds the written file open until that child
execs: for that moment exec says "Text file busy". Seen as jobs held with
"Failed to execute ...: Text file busy (errno 26)" on a node starting many jobs."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from htgrid.pool import LaunchError, LaunchSpec, spawn
from htgrid.queue import HoldReasonCode, JobId


def _executable(tmp_path: Path) -> Path:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    return script


def _spec(tmp_path: Path, script: Path) -> LaunchSpec:
    return LaunchSpec(
        job_id=JobId(1, 0),
        argv=(str(script),),
        env={},
        cwd=str(tmp_path),
        stdin=os.devnull,
        stdout=str(tmp_path / "out"),
        stderr=str(tmp_path / "err"),
    )


def test_a_job_whose_executable_is_briefly_busy_starts(tmp_path: Path) -> None:
    script = _executable(tmp_path)
    writer = os.open(script, os.O_WRONLY)  # as the forked child's copy of the fd
    closer = threading.Timer(0.2, os.close, (writer,))
    closer.start()
    try:
        proc = spawn(_spec(tmp_path, script))
        assert proc.wait(30) == 0
    finally:
        closer.join()
    assert (tmp_path / "out").read_text() == "ran\n"


def test_an_executable_that_stays_busy_holds_the_job_saying_why(tmp_path: Path) -> None:
    script = _executable(tmp_path)
    writer = os.open(script, os.O_WRONLY)
    try:
        with pytest.raises(LaunchError) as failed:
            spawn(_spec(tmp_path, script))
    finally:
        os.close(writer)
    assert failed.value.code == HoldReasonCode.FailedToCreateProcess
    assert f"Text file busy (errno {errno.ETXTBSY})" in failed.value.reason
