"""The batch type on another host over SSH (`batch slurm user@host`, HTCondor's BOSCO):
the GAHP started there by ssh drives the real Slurm, the sandbox goes there and its
output comes back, rm reaches Slurm; the host key is checked and the key file must be
the owner's alone. See htgrid.testing.bosco for the sshd and the remote install."""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.grid import GridManager, UnsupportedGridJob
from htgrid.grid.batch import BatchJobId, BatchResourceName, RemoteHost, remote_submit_ad
from htgrid.queue import JobAction, JobId, JobStatus
from htgrid.testing.bosco import (
    KEY,
    USER,
    grid_resource,
    install_remote_gahp,
    remote_slurm_missing,
    sandbox_exists,
)

from ._harness import ROOT, Grid, in_slurm, running, wait_for

# ---- what GridResource says, and what goes over the wire ------------------------------------


def test_a_remote_grid_resource_is_read_as_remote_gahp_reads_it() -> None:
    name = BatchResourceName.parse(
        "batch slurm alice@login.example.org:2200 --rgahp-key /k/id --rgahp-nologin"
    )
    assert name.lrms == "slurm" and name.key.startswith("batch slurm alice@login")
    assert name.remote == RemoteHost(
        "login.example.org", "alice", 2200, "/k/id", None, "htgrid gahp batch", login=False
    )
    argv = name.remote.gahp_argv()
    # Host keys always checked, never a password prompt; the host after "--".
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
    assert argv[-3:] == ["--", "login.example.org", "exec htgrid gahp batch"]
    assert BatchResourceName.parse("batch pbs bob@hpc").remote == RemoteHost("hpc", "bob")
    assert BatchResourceName.parse("batch slurm").remote is None
    for bad, why in (
        ("batch slurm alice@host --rgahp-frob 1", "unknown option --rgahp-frob"),
        ("batch slurm -oProxyCommand=x", "unknown option -oProxyCommand=x"),
        ("batch slurm a@h b@h", "'b@h' is not [user@]host[:port]"),
        ("batch slurm a@h --rgahp-key", "--rgahp-key needs a value"),
    ):
        with pytest.raises(UnsupportedGridJob, match=re.escape(why)):
            BatchResourceName.parse(bad)


def test_the_remote_submit_ad_points_into_the_sandbox() -> None:
    ad = ClassAd(
        {
            "Cmd": "/home/u/run.sh",
            "Iwd": "/home/u/work",
            "In": "in.txt",
            "Out": "out.txt",
            "Err": "err.txt",
            "TransferInput": "data.csv,/abs/dir/,http://x/y",
            "TransferOutput": "made.txt,sub/res.txt",
            "TransferOutputRemaps": "made.txt=kept/made.txt",
            "gridtype": "slurm",
        }
    )
    text, sandbox = remote_submit_ad(ad, "htgrid_1_0_abc")
    assert sandbox.path == ".htgrid/sandbox/htgrid_1_0_abc"
    assert dict(sandbox.uploads) == {
        "run.sh": "/home/u/run.sh",
        "in.txt": "/home/u/work/in.txt",
        "data.csv": "/home/u/work/data.csv",
        "dir": "/abs/dir",
    }
    assert dict(sandbox.downloads) == {
        "_condor_stdout": "/home/u/work/out.txt",
        "_condor_stderr": "/home/u/work/err.txt",
        "made.txt": "/home/u/work/kept/made.txt",
        "res.txt": "/home/u/work/res.txt",
    }
    assert ad["Cmd"] == "run.sh" and ad["Iwd"] == sandbox.path and ad["In"] == "in.txt"
    assert ad["TransferInput"] == "data.csv,dir/,http://x/y"
    assert ad["Out"] == "_condor_stdout" and "TransferOutputRemaps" not in ad
    # /dev/null is the remote host's own: neither sent nor fetched.
    devnull = ClassAd({"Cmd": "/bin/sleep", "In": "/dev/null", "Out": "/dev/null", "Iwd": "/w"})
    _, sandbox = remote_submit_ad(devnull, "htgrid_1_1_abc")
    assert dict(sandbox.uploads) == {"sleep": "/bin/sleep"} and not sandbox.downloads
    assert devnull["In"] == devnull["Out"] == "/dev/null"
    assert 'Cmd = "run.sh"' in text


# ---- end to end: the real sshd and Slurm ------------------------------------------------------


def submitted(grid: Grid, job_id: JobId) -> BatchJobId | None:
    """The job's GridJobId once the batch system took it."""
    grid_id = BatchJobId.parse(grid.ad(job_id).get("GridJobId"))
    return grid_id if grid_id is not None and grid_id.blah_id is not None else None


def ended(grid: Grid, job_id: JobId) -> bool:
    """Whether the job left the queue, or was held (which fails the test at once)."""
    return not grid.in_queue(job_id) or grid.ad(job_id)["JobStatus"] == JobStatus.HELD


@pytest.fixture(scope="module")
def remote_script() -> str:
    missing = remote_slurm_missing()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} not up (CI runs .ci/sshd-up.sh and .ci/slurm-up.sh)")
        pytest.skip(f"{missing} not up here")
    return install_remote_gahp()


@pytest.mark.timeout(420)
def test_a_job_runs_in_slurm_over_ssh_and_its_output_comes_back(
    grid: Grid, remote_script: str
) -> None:
    (grid.work / "in.txt").write_text("input from the submit side\n")
    (grid.work / "data.txt").write_text("data\n")
    script = grid.work / "job.sh"
    script.write_text(
        "#!/bin/sh\ncat\ncat data.txt\nid -un >&2\nmkdir -p sub\necho made > made.txt\n"
        "echo deep > sub/deep.txt\nexit 3\n"
    )
    script.chmod(0o755)
    resource = grid_resource(remote_script)
    (job,) = grid.submit(
        f"executable = {script}\ninput = in.txt\noutput = out.txt\nerror = err.txt\n"
        "transfer_input_files = data.txt\ntransfer_output_files = made.txt,sub\n"
        'transfer_output_remaps = "made.txt=kept.txt"\nlog = job.log',
        resource=resource,
    )
    (sleeper,) = grid.submit(
        "executable = /bin/sleep\narguments = 600\nlog = job.log", resource=resource
    )

    async def main() -> None:
        async with running(grid):
            # In Slurm's queue (running or not: a busy Slurm may keep it pending).
            grid_id = await wait_for(
                "the sleeper in Slurm",
                lambda: submitted(grid, sleeper) or ended(grid, sleeper),
                120,
            )
            assert isinstance(grid_id, BatchJobId), grid.ad(sleeper).get("HoldReason")
            assert grid_id.blah_id is not None
            native = grid_id.blah_id.rsplit("/", 1)[-1]
            assert in_slurm(native)
            assert sandbox_exists(grid_id.tag)
            grid.queue.act(JobAction.Remove, sleeper, ROOT)
            await wait_for("the sleeper to leave", lambda: not grid.in_queue(sleeper), 120)
            await wait_for("Slurm to drop it", lambda: not in_slurm(native), 60)
            await wait_for("its sandbox to go", lambda: not sandbox_exists(grid_id.tag), 30)
            await wait_for("the job to end", lambda: ended(grid, job), timeout=300)

    asyncio.run(main())
    ad = grid.ad(job)
    assert ad["JobStatus"] == JobStatus.COMPLETED, ad.get("HoldReason")
    assert ad["ExitCode"] == 3
    assert (grid.work / "out.txt").read_text() == "input from the submit side\ndata\n"
    assert (grid.work / "err.txt").read_text() == "boscotest\n"  # ran as the remote user
    assert (grid.work / "kept.txt").read_text() == "made\n"
    assert (grid.work / "sub" / "deep.txt").read_text() == "deep\n"
    tag = BatchJobId.parse(ad["GridJobId"])
    assert tag is not None and not sandbox_exists(tag.tag)
    assert grid.log().count("027 (") == 2


@pytest.mark.timeout(120)
def test_an_unknown_host_key_or_an_open_key_file_logs_nothing_in(
    grid: Grid, remote_script: str, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    loose = tmp_path / "loose_key"
    shutil.copy(KEY, loose)
    loose.chmod(0o644)
    (unknown,) = grid.submit(
        "executable = /bin/true", resource=grid_resource(remote_script, known_hosts=empty)
    )
    (open_key,) = grid.submit(
        "executable = /bin/true", resource=grid_resource(remote_script, key=loose)
    )

    def down_because(manager: GridManager, key: str, words: str) -> bool:
        return any(
            r.down and words in r.down_reason for r in manager.resources.values() if key in r.name
        )

    async def main() -> None:
        async with running(grid) as manager:
            # The resource is down with ssh's own words (the grid manager logs them).
            await wait_for(
                "the unknown host to be refused",
                lambda: down_because(manager, str(empty), "Host key verification failed"),
                60,
            )
            await wait_for(
                "the open key to be refused",
                lambda: down_because(manager, str(loose), "make it 0600"),
                60,
            )

    asyncio.run(main())
    for job_id in (unknown, open_key):
        ad = grid.ad(job_id)
        assert ad["JobStatus"] == JobStatus.IDLE and "GridJobId" not in ad
        assert ad["GridResourceUnavailableTime"] > 0


# ---- kill -9 of the grid manager just before the sandbox is removed ---------------------------


def _gridmanager(grid: Grid, env: dict[str, str], *extra: str) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "htgrid.cli", "gridmanager",
        "--home", str(grid.home),
        "--poll-interval", "0.3",
        "--feed-interval", "0.1",
        "--log", str(grid.home / "gridmanager.log"),
        *extra,
    ]  # fmt: skip
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env)


def _ssh_doing(where: Path, command: str, script: str) -> dict[str, str]:
    """An environment whose `ssh` is the real one, except that a run of `command` runs
    the shell `script` first."""
    where.mkdir()
    real = shutil.which("ssh")
    assert real is not None
    wrapper = where / "ssh"
    wrapper.write_text(
        f'#!/bin/sh\ncase "$*" in *{shlex.quote(command)}*)\n{script};;\nesac\nexec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return dict(os.environ, PATH=f"{where}:{os.environ['PATH']}")


def _ssh_stopping_at(where: Path, mark: Path, command: str) -> dict[str, str]:
    """An environment whose `ssh` is the real one, except that the first to run `command`
    (e.g. the removal of a sandbox) writes its pid to `mark` and hangs there."""
    return _ssh_doing(
        where,
        command,
        f"  if [ ! -e {mark} ]; then echo $$ > {mark}.new && mv {mark}.new {mark}; "
        "exec sleep 600; fi",
    )


@pytest.mark.timeout(420)
def test_a_sandbox_is_removed_even_when_the_grid_manager_dies_at_its_removal(
    grid: Grid, remote_script: str, tmp_path: Path
) -> None:
    """kill -9 between the outputs coming back and the sandbox's removal: the restarted
    grid manager removes it, and the job completes once, with its output."""
    runs = Path(pwd.getpwnam(USER).pw_dir) / f".htgrid-test-runs.{os.getpid()}.{tmp_path.name}"
    script = grid.work / "job.sh"
    script.write_text(f"#!/bin/sh\necho run >> {runs}\necho out of slurm\nexit 4\n")
    script.chmod(0o755)
    (job,) = grid.submit(
        f"executable = {script}\noutput = out.txt\nlog = job.log",
        resource=grid_resource(remote_script),
    )
    mark = tmp_path / "rm.pid"
    manager = _gridmanager(
        grid, _ssh_stopping_at(tmp_path / "bin", mark, "rm -rf -- .htgrid/sandbox/")
    )
    try:
        asyncio.run(wait_for("the sandbox's removal", mark.exists, 300))
        os.kill(manager.pid, signal.SIGKILL)
        manager.wait()
        os.kill(int(mark.read_text()), signal.SIGKILL)  # the hung "ssh ... rm"
        grid_id = BatchJobId.parse(grid.ad(job)["GridJobId"])
        assert grid_id is not None and sandbox_exists(grid_id.tag)
        manager = _gridmanager(grid, dict(os.environ))

        async def restarted() -> None:
            await wait_for("the job to end", lambda: ended(grid, job), 120)
            await wait_for("the sandbox to go", lambda: not sandbox_exists(grid_id.tag), 60)

        asyncio.run(restarted())
    finally:
        manager.send_signal(signal.SIGTERM)
        status = manager.wait(30)
        ran = runs.read_text() if runs.exists() else ""
        runs.unlink(missing_ok=True)
    assert status == 0
    assert ran == "run\n"  # once in Slurm
    ad = grid.ad(job)
    assert ad["JobStatus"] == JobStatus.COMPLETED, ad.get("HoldReason")
    assert ad["ExitCode"] == 4 and ad["GridJobId"] == str(grid_id)
    assert (grid.work / "out.txt").read_text() == "out of slurm\n"
    assert grid.log().count("027 (") == 1


@pytest.mark.timeout(420)
def test_a_job_removed_while_its_outputs_come_back_leaves_no_sandbox(
    grid: Grid, remote_script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job,) = grid.submit(
        "executable = /bin/echo\narguments = done\noutput = out.txt\nlog = job.log",
        resource=grid_resource(remote_script),
    )
    mark = tmp_path / "fetch.pid"
    env = _ssh_stopping_at(tmp_path / "bin", mark, "tar -cf -")
    monkeypatch.setenv("PATH", env["PATH"])  # the grid manager's ssh, run in this process

    async def main() -> None:
        async with running(grid):
            await wait_for("the fetch of the outputs", mark.exists, 300)
            grid_id = BatchJobId.parse(grid.ad(job)["GridJobId"])
            assert grid_id is not None and sandbox_exists(grid_id.tag)
            grid.queue.act(JobAction.Remove, job, ROOT)
            os.kill(int(mark.read_text()), signal.SIGKILL)  # the fetch fails: try again
            await wait_for("the job to leave", lambda: not grid.in_queue(job), 60)
            await wait_for("its sandbox to go", lambda: not sandbox_exists(grid_id.tag), 30)

    asyncio.run(main())
    assert grid.ad(job)["JobStatus"] == JobStatus.REMOVED


def _ssh_failing_at(where: Path, fail: Path, tries: Path, command: str) -> dict[str, str]:
    """An environment whose `ssh` is the real one, except that while `fail` exists each
    run of `command` fails as ssh does when it cannot reach the host (exit 255); each run of
    it adds a line to `tries`."""
    return _ssh_doing(
        where,
        command,
        f"  echo try >> {tries}\n"
        f"  if [ -e {fail} ]; then echo 'ssh: connect to host: Connection refused' >&2; "
        "exit 255; fi",
    )


@pytest.mark.timeout(420)
def test_a_sandbox_whose_removal_fails_is_removed_later_across_a_restart(
    grid: Grid, remote_script: str, tmp_path: Path
) -> None:
    """The host cannot be reached to remove the sandbox of a finished job: the grid manager
    tries again, keeps what it owes on disk, and a restarted one removes it."""
    (job,) = grid.submit(
        "executable = /bin/echo\narguments = done\noutput = out.txt\nlog = job.log",
        resource=grid_resource(remote_script),
    )
    fail, tries = tmp_path / "fail", tmp_path / "tries"
    fail.touch()
    env = _ssh_failing_at(tmp_path / "bin", fail, tries, "rm -rf -- .htgrid/sandbox/")
    quick = ("--set", "retry_initial=0.3")
    manager = _gridmanager(grid, env, *quick)
    owed = grid.home / "spool" / "gridmanager" / "leftovers"

    def tried() -> int:
        return len(tries.read_text().splitlines()) if tries.exists() else 0

    try:
        asyncio.run(wait_for("the job to end", lambda: ended(grid, job), 300))
        asyncio.run(wait_for("a second try", lambda: tried() >= 2, 60))
        manager.send_signal(signal.SIGTERM)
        assert manager.wait(30) == 0
        grid_id = BatchJobId.parse(grid.ad(job)["GridJobId"])
        assert grid_id is not None and sandbox_exists(grid_id.tag)
        assert [p.name for p in owed.iterdir()] == [f"{job.cluster}.{job.proc}.json"]
        fail.unlink()
        manager = _gridmanager(grid, env, *quick)
        asyncio.run(wait_for("the sandbox to go", lambda: not sandbox_exists(grid_id.tag), 60))
        asyncio.run(wait_for("nothing owed", lambda: not any(owed.iterdir()), 30))
    finally:
        manager.send_signal(signal.SIGTERM)
        status = manager.wait(30)
    assert status == 0
    ad = grid.ad(job)
    assert ad["JobStatus"] == JobStatus.COMPLETED, ad.get("HoldReason")
    assert (grid.work / "out.txt").read_text() == "done\n"
    log = (grid.home / "gridmanager.log").read_text()
    assert f"removed its sandbox .htgrid/sandbox/{grid_id.tag} at " in log
    assert "Connection refused" in log
