"""The shared layer: the job wrapper (run for real with bash), the command runner, and
the status algorithm (queue, exit-code file, history, UNKNOWN) over a scripted LRM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from htgrid.backends.batch import _runner, _spawn
from htgrid.backends.batch._base import (
    BackendError,
    BackendUnavailable,
    BatchJobSpec,
    CommandResult,
    JobState,
)
from htgrid.backends.batch._command import CountingRunner, run_command
from htgrid.backends.batch._script import (
    check_spec,
    exit_file,
    read_exit_file,
    render_job_script,
)
from htgrid.backends.batch.slurm import SlurmBackend


def spec(tmp_path: Path, *args: str, **kw: Any) -> BatchJobSpec:
    job_dir = tmp_path / "job"
    job_dir.mkdir(exist_ok=True)
    return BatchJobSpec(
        tag="42.0", job_dir=job_dir, executable="/bin/sh", arguments=("-c", *args), **kw
    )


def run_wrapper(s: BatchJobSpec, job_id: str, registry: Path) -> subprocess.Popen[bytes]:
    script = s.job_dir / "job.sh"
    script.write_text(
        render_job_script(s, directives=["#X -n"], job_id_var="FAKE_ID", registry=registry)
    )
    env = {**os.environ, "FAKE_ID": job_id}
    # A session of its own, so a test can signal the whole job as a batch system does.
    return subprocess.Popen(
        ["bash", str(script)], env=env, stdout=subprocess.PIPE, start_new_session=True
    )


# --- the wrapper ------------------------------------------------------------------------


def test_wrapper_records_exit_code_and_runs_in_job_dir(tmp_path: Path) -> None:
    s = spec(
        tmp_path,
        'printf "%s|%s|%s|%s" "$PWD" "$A" "$1" "$(cat)"; exit 3',
        "sh",
        "arg with 'quotes' and $dollars",
        environment={"A": "x y\nz"},
        stdin="in.txt",
    )
    (s.job_dir / "in.txt").write_text("input")
    proc = run_wrapper(s, "77", tmp_path / "reg")
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 3
    assert out.decode() == f"{s.job_dir}|x y\nz|arg with 'quotes' and $dollars|input"
    rec = read_exit_file(exit_file(s.job_dir, "77"), "77")
    assert rec is not None
    assert (rec.exit_code, rec.signal) == (3, None)
    # The wrapper also links the registry entry to the job directory.
    assert os.readlink(tmp_path / "reg" / "77") == str(s.job_dir)


def test_wrapper_records_the_signal_that_killed_the_job(tmp_path: Path) -> None:
    proc = run_wrapper(spec(tmp_path, "kill -9 $$"), "78", tmp_path / "reg")
    proc.communicate(timeout=20)
    rec = read_exit_file(exit_file(tmp_path / "job", "78"), "78")
    assert rec is not None
    assert (rec.exit_code, rec.signal) == (None, 9)


def test_wrapper_survives_sigterm_to_record_it(tmp_path: Path) -> None:
    # As on cancel or walltime: the batch system signals every process of the job.
    s = spec(tmp_path, "sleep 30", runtime_seconds=1)
    proc = run_wrapper(s, "79", tmp_path / "reg")
    path = exit_file(s.job_dir, "79")
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline
        and not subprocess.run(
            ["pgrep", "-f", "sleep 30", "-s", str(proc.pid)], capture_output=True, check=False
        ).stdout
    ):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=20)
    rec = read_exit_file(path, "79")
    assert rec is not None
    assert rec.signal == signal.SIGTERM
    # Killed at (past) its 1 s limit: the record reads as a walltime kill.
    assert rec.walltime_exceeded


def test_exit_file_of_another_submission_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "x.exit"
    path.write_text("job_id=5\nexit_code=0\nsignal=\n")
    assert read_exit_file(path, "5") is not None
    assert read_exit_file(path, "6") is None
    assert read_exit_file(tmp_path / "missing", "5") is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tag": "a b"}, "tag"),
        ({"job_dir": Path("relative")}, "absolute"),
        ({"environment": {"1BAD": "x"}}, "environment"),
        ({"stdout": "/tmp/with space"}, "white space"),
        ({"cpus": 0}, "cpus"),
    ],
)
def test_bad_specs_are_permanent_errors(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {"tag": "1.0", "job_dir": tmp_path, "executable": "/bin/true"}
    fields.update(change)
    with pytest.raises(BackendError, match=message):
        check_spec(BatchJobSpec(**fields))  # type: ignore[arg-type]


# --- the runner ---------------------------------------------------------------------------


def test_runner_captures_output_and_exit_code() -> None:
    result = asyncio.run(
        run_command(["sh", "-c", "cat; echo err >&2; exit 4"], stdin="in", timeout=10)
    )
    assert (result.returncode, result.stdout, result.stderr) == (4, "in", "err\n")


def test_runner_timeout_and_missing_command_are_unavailable() -> None:
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match="did not answer"):
        asyncio.run(run_command(["sh", "-c", "sleep 30 & sleep 30"], timeout=0.3))
    assert time.monotonic() - start < 5
    with pytest.raises(BackendUnavailable, match="cannot run"):
        asyncio.run(run_command(["htgrid-no-such-command"], timeout=5))


def test_runner_reads_large_output_and_kills_the_group_when_cancelled(tmp_path: Path) -> None:
    big = asyncio.run(run_command(["sh", "-c", "head -c 3000000 /dev/zero"], timeout=20))
    assert len(big.stdout) == 3_000_000
    marker = tmp_path / "alive"

    async def cancelled() -> None:
        # A grandchild in the same session: cancelling must kill it too.
        task = asyncio.create_task(
            run_command(["sh", "-c", f"(sleep 2; touch {marker}) & sleep 30"], timeout=60)
        )
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    time.sleep(2.5)
    assert not marker.exists()


def test_a_program_found_on_the_path_is_looked_up_again_once_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for where in (first, second):
        where.mkdir()
        (where / "lrmtool").write_text(f"#!/bin/sh\necho {where.name}\n")
        (where / "lrmtool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{first}:{second}:{os.environ['PATH']}")

    async def twice() -> list[str]:
        one = await run_command(["lrmtool"], timeout=30)
        (first / "lrmtool").unlink()
        two = await run_command(["lrmtool"], timeout=30)
        return [one.stdout.strip(), two.stdout.strip()]

    assert asyncio.run(twice()) == ["a", "b"]


def test_a_command_cancelled_while_it_starts_is_killed_and_reaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The process starts in a worker thread: a caller cancelled meanwhile must not leave
    # it running (nor a zombie) once the start completes.
    started: list[Any] = []
    start = _runner._start

    def recorded(argv: Sequence[str], stdin: str | None) -> Any:
        child = start(argv, stdin)
        started.append(child)
        return child

    monkeypatch.setattr(_runner, "_start", recorded)

    async def cancelled() -> None:
        task = asyncio.create_task(run_command(["sleep", "30"], timeout=60))
        await asyncio.sleep(0)  # the task is waiting for its process to start
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 10
        while not (started and started[0].returncode is not None):
            assert time.monotonic() < deadline, "the abandoned process was not reaped"
            await asyncio.sleep(0.01)

    asyncio.run(cancelled())
    assert started[0].returncode == -signal.SIGKILL
    with pytest.raises(ChildProcessError):  # reaped: no zombie left
        os.waitpid(started[0].pid, os.WNOHANG)


@pytest.mark.parametrize("through", ["the C library", "os.posix_spawn"])
def test_runner_feeds_stdin_and_restores_the_signals_python_ignores(
    monkeypatch: pytest.MonkeyPatch, through: str
) -> None:
    # Python ignores SIGPIPE: a command that inherited that would not die of a closed
    # pipe (`yes | head`), as LRM tools and job scripts expect. Both ways of starting
    # it leave the command the same: its own session, no signal blocked or ignored.
    if through == "os.posix_spawn":
        monkeypatch.setattr(_spawn, "_libc", None)
    else:
        assert _spawn._libc is not None, "the C library's posix_spawn cannot be called"
    # The masks are read by the command's last program, exec'd, from its own status: the
    # shell's, read while it waits for a child, is its wait's (dash blocks every signal
    # for a moment there before sigsuspend), not the one it was started with.
    script = "cat; ps -o sid= -p $$; echo $$; exec grep -E 'SigIgn|SigBlk' /proc/self/status"
    result = asyncio.run(run_command(["sh", "-c", script], stdin="line one\n", timeout=30))
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "line one"
    signals = dict(line.split(":") for line in lines[3:5])
    assert int(signals["SigBlk"], 16) == 0
    ignored = int(signals["SigIgn"], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))
    assert not ignored & (1 << (signal.SIGXFSZ - 1))
    assert lines[1].strip() == lines[2].strip()  # a session leader


# --- the status algorithm, over a scripted Slurm --------------------------------------------


class Scripted:
    """Answers each program with a canned result; counts the calls."""

    def __init__(self, answers: dict[str, CommandResult]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    async def __call__(
        self, argv: Sequence[str], *, stdin: str | None = None, timeout: float
    ) -> CommandResult:
        self.calls.append(tuple(argv))
        return self.answers[argv[0]]


def ok(stdout: str = "", stderr: str = "", rc: int = 0) -> CommandResult:
    return CommandResult(argv=(), returncode=rc, stdout=stdout, stderr=stderr)


def test_status_combines_queue_exit_file_and_history(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    (reg / "slurm").mkdir(parents=True)
    # Job 3 left the queue and its wrapper wrote an ordinary exit: no history needed.
    (tmp_path / "j3").mkdir()
    (reg / "slurm" / "3").symlink_to(tmp_path / "j3")
    exit_file(tmp_path / "j3", "3").write_text("job_id=3\nexit_code=5\nsignal=\n")
    runner = Scripted(
        {
            "squeue": ok(
                "1|RUNNING|None|0:05|a\n2|PENDING|JobHeldUser|0:00|b\n"
                "7|FAILED|NonZeroExitCode|0:01|g\n"
            ),
            "sacct": ok("4|TIMEOUT|0:0|61|d\n5|CANCELLED by 0|0:15|3|e\n7|FAILED|2:0|1|g\n"),
        }
    )
    backend = SlurmBackend(runner=runner, registry=reg)
    found = asyncio.run(backend.status(["1", "2", "3", "4", "5", "6", "7", "1"]))
    assert {k: v.state for k, v in found.items()} == {
        "1": JobState.RUNNING,
        "2": JobState.HELD,
        "3": JobState.COMPLETED,
        "4": JobState.COMPLETED,
        "5": JobState.REMOVED,
        "6": JobState.UNKNOWN,  # found nowhere: never COMPLETED
        "7": JobState.COMPLETED,
    }
    # Still in squeue but without an exit code or file: sacct supplies it.
    assert (found["7"].exit_code, found["7"].source) == (2, "history")
    assert (found["3"].exit_code, found["3"].source) == (5, "exit-file")
    assert found["4"].reason == "walltime exceeded"
    assert found["6"].source == "none"
    # One queue query, one history query for the jobs nothing else explained.
    assert runner.calls[0][-1] == "1,2,3,4,5,6,7"
    assert runner.calls[1][-1] == "4,5,6,7"
    assert len(runner.calls) == 2


def test_failed_query_is_unavailable_never_a_failed_job(tmp_path: Path) -> None:
    runner = Scripted({"squeue": ok(stderr="Unable to contact slurm controller", rc=1)})
    backend = SlurmBackend(runner=runner, registry=tmp_path)
    with pytest.raises(BackendUnavailable):
        asyncio.run(backend.status(["1"]))
    # All ids purged from squeue is an answer, not a failure.
    runner.answers["squeue"] = ok(stderr="slurm_load_jobs error: Invalid job id specified", rc=1)
    runner.answers["sacct"] = ok(stderr="Slurm accounting storage is disabled", rc=1)
    found = asyncio.run(backend.status(["1"]))
    assert found["1"].state == JobState.UNKNOWN
    # sacct said accounting is off: it is not asked again.
    assert backend.accounting is False
    asyncio.run(backend.status(["1"]))
    assert [c[0] for c in runner.calls].count("sacct") == 1


def test_submit_errors_are_classified(tmp_path: Path) -> None:
    s = spec(tmp_path, "true")
    runner = Scripted(
        {"sbatch": ok(stderr="sbatch: error: Invalid partition name specified", rc=1)}
    )
    backend = SlurmBackend(runner=runner, registry=tmp_path / "reg")
    with pytest.raises(BackendError) as err:
        asyncio.run(backend.submit(s))
    assert not isinstance(err.value, BackendUnavailable)
    runner.answers["sbatch"] = ok(
        stderr="Unable to contact slurm controller (connect failure)", rc=1
    )
    with pytest.raises(BackendUnavailable):
        asyncio.run(backend.submit(s))
    runner.answers["sbatch"] = ok("garbage\n")
    with pytest.raises(BackendError) as err:
        asyncio.run(backend.submit(s))
    assert err.value.code == 8


def test_counting_runner_counts_by_program() -> None:
    runner = CountingRunner()
    asyncio.run(runner(["true"], timeout=5))
    asyncio.run(runner(["/bin/true"], timeout=5))
    assert runner.count("true") == 2
