"""The fork back end's job wrapper: start one job detached and record how it ended.

ForkBackend runs `python -I -S _forkrun.py <job_dir>`. That launcher forks the wrapper,
which makes itself a session leader (so it outlives the GAHP server), prints nothing, and
tells the launcher it is ready; the launcher prints the wrapper's pid and exits. The
wrapper then runs the job in its own process group, enforces the runtime limit (time
spent stopped by a hold does not count), and writes the exit record when the job ends:
the exit code or the signal, and why it was killed when the wrapper killed it.

Standard library only, and no htgrid import: the wrapper must not depend on how the GAHP
server was installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, BinaryIO

SPEC = ".htgrid-fork-spec.json"
JOB_PID = ".htgrid-fork-job.pid"
EXIT = ".htgrid-fork-exit.json"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class Supervisor:
    """Watches the clock for a running job: walltime, and the grace before SIGKILL."""

    def __init__(self, pgid: int, limit: float | None, grace: float) -> None:
        self.pgid = pgid
        self.limit = limit
        self.grace = grace
        # Reentrant: the SIGTERM handler runs in the main thread, which may hold it.
        self.cond = threading.Condition(threading.RLock())
        self.used = 0.0
        self.running_since = time.monotonic()
        self.stopped = False
        self.done = False
        self.kill_at: float | None = None
        self.reason: str | None = None

    def run(self) -> None:
        """The timer thread."""
        with self.cond:
            while not self.done:
                now = time.monotonic()
                if self.kill_at is not None and now >= self.kill_at:
                    _killpg(self.pgid, signal.SIGKILL)
                    self.kill_at = None
                    continue
                waits = []
                if self.kill_at is not None:
                    waits.append(self.kill_at - now)
                if self.limit is not None and self.reason is None:
                    used = self.used + (0.0 if self.stopped else now - self.running_since)
                    if used >= self.limit:
                        self.reason = f"walltime exceeded (limit {self.limit:g} s)"
                        self.terminate()
                        continue
                    if not self.stopped:
                        waits.append(self.limit - used)
                self.cond.wait(min(waits) if waits else None)

    def terminate(self) -> None:
        """SIGTERM the job (waking it if stopped), SIGKILL after the grace period."""
        with self.cond:
            _killpg(self.pgid, signal.SIGTERM)
            _killpg(self.pgid, signal.SIGCONT)
            if self.kill_at is None:
                self.kill_at = time.monotonic() + self.grace
            self.cond.notify_all()

    def stopped_now(self, stopped: bool) -> None:
        """The job was stopped (held) or continued."""
        with self.cond:
            now = time.monotonic()
            if stopped and not self.stopped:
                self.used += now - self.running_since
            elif not stopped and self.stopped:
                self.running_since = now
            self.stopped = stopped
            self.cond.notify_all()

    def finished(self) -> None:
        """The job exited."""
        with self.cond:
            self.done = True
            self.cond.notify_all()


def _open_io(spec: dict[str, Any]) -> tuple[BinaryIO, BinaryIO, BinaryIO]:
    stdin = open(spec.get("stdin") or os.devnull, "rb")  # noqa: SIM115 (handed to the job)
    stdout = open(spec.get("stdout") or os.devnull, "wb")  # noqa: SIM115
    if spec.get("stderr") and spec.get("stderr") == spec.get("stdout"):
        return stdin, stdout, stdout
    stderr = open(spec.get("stderr") or os.devnull, "wb")  # noqa: SIM115
    return stdin, stdout, stderr


def _argv(spec: dict[str, Any]) -> list[str]:
    exe = str(spec["executable"])
    if "/" not in exe and os.path.exists(exe):
        exe = "./" + exe
    return [exe, *spec.get("arguments", [])]


def _write_record(record: dict[str, Any]) -> None:
    tmp = EXIT + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(record, out)
    os.replace(tmp, EXIT)


def supervise(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the job to its end; the exit record."""
    start = time.time()
    record: dict[str, Any] = {"exit_code": None, "signal": None, "reason": None, "start": start}
    pending_stop: list[int] = []
    supervisor: Supervisor | None = None

    def on_stop(signum: int, frame: object) -> None:
        # Cancel: the back end signals the wrapper; the wrapper stops the job.
        if supervisor is None:
            pending_stop.append(signum)
        else:
            supervisor.terminate()

    for signum in _STOP_SIGNALS:
        signal.signal(signum, on_stop)
    env = dict(os.environ)
    env.update(spec.get("environment", {}))
    argv = _argv(spec)
    try:
        stdin, stdout, stderr = _open_io(spec)
        job = subprocess.Popen(
            argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env, process_group=0
        )
    except OSError as err:
        record["exit_code"] = 126 if isinstance(err, PermissionError) else 127
        record["reason"] = f"cannot execute {argv[0]}: {err.strerror or err}"
        record["end"] = time.time()
        return record
    with open(JOB_PID + ".tmp", "w", encoding="ascii") as out:
        out.write(f"{job.pid}\n")
    os.replace(JOB_PID + ".tmp", JOB_PID)
    limit = spec.get("runtime")
    supervisor = Supervisor(job.pid, float(limit) if limit else None, float(spec.get("grace", 10)))
    timer = threading.Thread(target=supervisor.run, daemon=True)
    timer.start()
    if pending_stop:
        supervisor.terminate()
    while True:
        _, status = os.waitpid(job.pid, os.WUNTRACED | os.WCONTINUED)
        if os.WIFSTOPPED(status):
            supervisor.stopped_now(True)
        elif os.WIFCONTINUED(status):
            supervisor.stopped_now(False)
        else:
            break
    supervisor.finished()
    # Like a batch system, nothing the job left behind in its process group survives it.
    _killpg(job.pid, signal.SIGKILL)
    if os.WIFSIGNALED(status):
        record["signal"] = os.WTERMSIG(status)
        record["core_dumped"] = os.WCOREDUMP(status)
    else:
        record["exit_code"] = os.WEXITSTATUS(status)
    record["reason"] = supervisor.reason
    record["end"] = time.time()
    return record


def main(argv: list[str]) -> int:
    """Launcher: fork the wrapper, print its pid once it leads its own session."""
    job_dir = argv[1]
    os.chdir(job_dir)
    with open(SPEC, encoding="utf-8") as spec_file:
        spec = json.load(spec_file)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(ready_w)
        ok = os.read(ready_r, 1) == b"1"
        print(pid if ok else "failed", flush=True)
        return 0 if ok else 1
    os.close(ready_r)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.write(ready_w, b"1")
    os.close(ready_w)
    try:
        record = supervise(spec)
    except BaseException as err:  # the record is the only way to report anything
        record = {"exit_code": None, "signal": None, "reason": f"wrapper failed: {err!r}"}
    _write_record(record)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
