"""Each job's working area under the GAHP scratch dir, and the files staged in and out.

    <scratch>/jobs/<name>[.N]/        the job's directory: its cwd, inputs, stdout, stderr
        .htgrid-job.json              what this server knows about the job (JobRecord)
        .htgrid-blah-id               a link whose target is the job's blah id, once known
    <scratch>/ids/<lrms>/<native id>  a link to the job's directory, to find it by id (a
                                      command back end's registry: it makes the link)
    <scratch>/backends/<lrms>/        each back end's own files

A submit writes the record once, before the job is sent (the crash-safety point: a
record without an id is a job that may have reached the batch system, found again by
its tag), then two links once it is there: by id, and the blah id in the directory. A
record is rewritten only when something new is learnt (the final status, an id found
after a crash).

At submit the executable (unless StageCmd is false), stdin, the x509 proxy and the
TransferInput files are copied in. When a status query first sees the job COMPLETED,
stdout, stderr and the TransferOutput files are copied back to Iwd (TransferOutputRemaps
apply, keyed by file name; stdout and stderr answer to `_condor_stdout`/`_condor_stderr`)
and the final status is kept in the record, so it survives a GAHP restart and a batch
system that forgets finished jobs. A missing output file holds the job (HoldReasonCode 12),
as HTCondor does. All of this is blocking file work: run it in a thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, fields, replace
from pathlib import Path

from htgrid.backends.batch._base import BatchJobSpec, JobState, NativeStatus, link_name
from htgrid.backends.batch._jobad import InvalidSubmitAd, SubmitRequest

__all__ = ["STDERR_NAME", "STDIN_NAME", "STDOUT_NAME", "JobRecord", "JobStore"]

STDOUT_NAME = "_condor_stdout"
STDERR_NAME = "_condor_stderr"
STDIN_NAME = "_condor_stdin"
_RECORD = ".htgrid-job.json"
_BLAH_ID = ".htgrid-blah-id"
#: HTCondor's HoldReasonCode for "failed to transfer output files".
HOLD_TRANSFER_OUTPUT = 12


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What the server keeps about one submitted job (JSON in the job's directory)."""

    lrms: str
    tag: str
    job_dir: str
    iwd: str
    native_id: str | None = None
    blah_id: str | None = None
    #: The job's copy of its x509 proxy (BLAH_JOB_REFRESH_PROXY replaces it).
    proxy: str | None = None
    #: (file in the job dir, absolute destination) pairs copied back at completion.
    outputs: tuple[tuple[str, str], ...] = ()
    #: The final status once outputs were staged (NativeStatus fields).
    final: dict[str, int | float | str | None] | None = None
    #: Why staging out failed (the job is then reported HELD).
    stage_error: str | None = None
    stage_errno: int = 0

    def final_status(self) -> NativeStatus | None:
        """The recorded final status, if the job's end was recorded."""
        if self.final is None:
            return None
        get = self.final.get
        return NativeStatus(
            native_id=str(get("native_id")),
            state=JobState(_number(get("state")) or 0),
            exit_code=_number(get("exit_code")),
            exit_signal=_number(get("exit_signal")),
            reason=None if get("reason") is None else str(get("reason")),
            wallclock_seconds=_real(get("wallclock_seconds")),
            source=str(get("source") or "none"),
        )


class JobStore:
    """The scratch directory this GAHP server owns."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.jobs = scratch / "jobs"
        self.ids = scratch / "ids"
        for path in (self.jobs, self.ids):
            path.mkdir(parents=True, exist_ok=True)

    def backend_dir(self, lrms: str) -> Path:
        """The back end's own directory."""
        path = self.scratch / "backends" / lrms
        path.mkdir(parents=True, exist_ok=True)
        return path

    def index_dir(self, lrms: str) -> Path:
        """The `<native id> -> job dir` links of `lrms`'s jobs."""
        return self.ids / lrms

    # ---- records ------------------------------------------------------------------------------

    def latest(self, name: str) -> JobRecord | None:
        """The record of the newest job directory made for `name`, if any."""
        newest: JobRecord | None = None
        for path in self._dirs(name):
            record = self.read(path)
            if record is not None:
                newest = record
        return newest

    def read(self, job_dir: Path) -> JobRecord | None:
        """The record in `job_dir`, with the job's ids once it was submitted."""
        try:
            data = json.loads((job_dir / _RECORD).read_bytes())
            data["outputs"] = tuple(tuple(pair) for pair in data.get("outputs", ()))
            record = JobRecord(**data)
        except (OSError, ValueError, TypeError):
            return None
        if record.native_id is not None:
            return record
        try:
            blah_id = os.readlink(job_dir / _BLAH_ID)
        except OSError:
            return record  # not sent, or sent just before a crash: ask the batch system
        return replace(record, native_id=blah_id.rsplit("/", 1)[-1], blah_id=blah_id)

    def create(self, record: JobRecord) -> None:
        """Save the first record of a new job directory.

        Written in place: the job is sent only once it is whole, and one cut short by a
        crash is unreadable, which is a job never sent (its submit gets a new directory).
        """
        data = _record_json(record)
        fd = os.open(Path(record.job_dir) / _RECORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "wb") as file:
            file.write(data)

    def write(self, record: JobRecord) -> None:
        """Save `record` (atomically), replacing the one in its directory."""
        _atomic_write(Path(record.job_dir) / _RECORD, _record_json(record))

    def note_blah_id(self, job_dir: Path, blah_id: str) -> None:
        """Write down the blah id of the job sent from `job_dir` (a link: no record write)."""
        _replace_link(job_dir / _BLAH_ID, blah_id)

    def index(self, lrms: str, native_id: str, job_dir: Path) -> None:
        """Link `native_id` to the job's directory (replacing a link of an older job)."""
        link = self.index_dir(lrms) / link_name(native_id)
        try:
            _replace_link(link, str(job_dir))
        except FileNotFoundError:
            link.parent.mkdir(parents=True, exist_ok=True)
            _replace_link(link, str(job_dir))

    def find(self, lrms: str, native_id: str) -> JobRecord | None:
        """The record of the job `native_id` of `lrms`, if this server submitted it."""
        record = self.read(self.index_dir(lrms) / link_name(native_id))
        if record is None or record.lrms != lrms:
            return None
        if record.native_id is None:
            # Linked by id, its blah id not yet written down (a crash between the two).
            return replace(record, native_id=native_id)
        return record if record.native_id == native_id else None

    def discard(self, job_dir: Path) -> None:
        """Remove the directory of a job that was not sent."""
        shutil.rmtree(job_dir, ignore_errors=True)

    def _dirs(self, name: str) -> list[Path]:
        first = self.jobs / name
        paths = [first] if first.is_dir() else []
        number = 2
        while (candidate := self.jobs / f"{name}.{number}").is_dir():
            paths.append(candidate)
            number += 1
        return paths

    # ---- staging in -----------------------------------------------------------------------------

    def stage_in(self, request: SubmitRequest) -> tuple[BatchJobSpec, JobRecord]:
        """Make the job's directory, copy its inputs in, and build what the back end runs."""
        job_dir = self._new_dir(request.job_dir_name)
        try:
            return self._stage_in(request, job_dir)
        except BaseException:
            shutil.rmtree(job_dir, ignore_errors=True)
            raise

    def _stage_in(self, request: SubmitRequest, job_dir: Path) -> tuple[BatchJobSpec, JobRecord]:
        iwd = request.iwd
        executable = self._executable(request, job_dir)
        env = dict(request.environment)
        stdin = None
        if request.stdin is not None:
            _copy_in(_resolve(iwd, request.stdin), job_dir / STDIN_NAME, "stdin file")
            stdin = STDIN_NAME
        for item in request.transfer_input:
            if "://" in item:
                raise InvalidSubmitAd(f"Cannot stage input {item}: URLs are not supported")
            source = _resolve(iwd, item)
            name = os.path.basename(source.rstrip("/")) or source
            if item.endswith("/") and os.path.isdir(source):
                shutil.copytree(source, job_dir, dirs_exist_ok=True, symlinks=True)
            else:
                _copy_in(source, job_dir / name, "input file")
        proxy = None
        if request.proxy:
            copy = job_dir / os.path.basename(request.proxy)
            proxy = str(copy)
            _copy_in(_resolve(iwd, request.proxy), copy, "x509 proxy")
            copy.chmod(stat.S_IRUSR | stat.S_IWUSR)
            env["X509_USER_PROXY"] = str(copy)
        remaps = request.remaps
        outputs: list[tuple[str, str]] = []
        stdout = stderr = None
        if request.stdout is not None:
            stdout = STDOUT_NAME
            outputs.append((STDOUT_NAME, _resolve(iwd, remaps.get(STDOUT_NAME, request.stdout))))
        if request.stderr is not None:
            if request.stderr == request.stdout:
                stderr = STDOUT_NAME
            else:
                stderr = STDERR_NAME
                dest = remaps.get(STDERR_NAME, request.stderr)
                outputs.append((STDERR_NAME, _resolve(iwd, dest)))
        for name in request.transfer_output:
            base = os.path.basename(name.rstrip("/"))
            dest = remaps.get(name, remaps.get(base, base))
            outputs.append((name, _resolve(iwd, dest)))
        spec = BatchJobSpec(
            tag=request.tag,
            job_dir=job_dir,
            executable=executable,
            arguments=request.arguments,
            environment=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            queue=request.queue,
            project=request.project,
            runtime_seconds=request.runtime_seconds,
            memory_mb=request.memory_mb,
            cpus=request.cpus,
            nodes=request.nodes,
            gpus=request.gpus,
            extra_args=request.extra_args,
        )
        record = JobRecord(
            lrms=request.lrms,
            tag=request.tag,
            job_dir=str(job_dir),
            iwd=iwd,
            proxy=proxy,
            outputs=tuple(outputs),
        )
        self.create(record)
        return spec, record

    def _new_dir(self, name: str) -> Path:
        number = 1
        while True:
            path = self.jobs / (name if number == 1 else f"{name}.{number}")
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                number += 1
                continue
            return path

    @staticmethod
    def _executable(request: SubmitRequest, job_dir: Path) -> str:
        cmd = request.cmd
        source = _resolve(request.iwd, cmd)
        if "/" not in cmd and not os.path.exists(source):
            # A bare name not in Iwd: found on the PATH where the job runs.
            return cmd
        if not request.stage_cmd:
            return source
        target = job_dir / os.path.basename(source)
        _copy_in(source, target, "executable")
        target.chmod(target.stat().st_mode | stat.S_IXUSR)
        return str(target)

    # ---- staging out ------------------------------------------------------------------------

    def stage_out(self, record: JobRecord, status: NativeStatus) -> JobRecord:
        """Copy a completed job's outputs back and keep its final status; returns the record."""
        job_dir = Path(record.job_dir)
        error: str | None = None
        errno = 0
        for name, dest in record.outputs:
            source = job_dir / name
            if name in (STDOUT_NAME, STDERR_NAME) and not source.exists():
                # The job never wrote to it: an empty file, as HTCondor would return.
                source.touch()
            try:
                _copy_out(source, Path(dest))
            except OSError as err:
                error = f"Failed to transfer output file {name} to {dest}: {err.strerror or err}"
                errno = err.errno or 0
                break
        final: dict[str, int | float | str | None] = {
            "native_id": status.native_id,
            "state": int(status.state),
            "exit_code": status.exit_code,
            "exit_signal": status.exit_signal,
            "reason": status.reason,
            "wallclock_seconds": status.wallclock_seconds,
            "source": status.source,
        }
        done = replace(record, final=final, stage_error=error, stage_errno=errno)
        self.write(done)
        return done


def _number(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def _real(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _resolve(iwd: str, path: str) -> str:
    return os.path.normpath(os.path.join(iwd, os.path.expanduser(path)))


def _copy_in(source: str, target: Path, what: str) -> None:
    try:
        if os.path.isdir(source):
            shutil.copytree(source, target, symlinks=True)
        else:
            shutil.copy2(source, target)
    except OSError as err:
        raise InvalidSubmitAd(f"Cannot stage {what} {source}: {err.strerror or err}") from err


def _copy_out(source: Path, dest: Path) -> None:
    """Copy to a temporary name beside `dest`, then rename: no half-written outputs."""
    if source.is_dir():
        shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copy2(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _replace_link(link: Path, target: str) -> None:
    """Make `link` point at `target`, atomically replacing whatever it was."""
    try:
        link.symlink_to(target)  # the usual case: one system call
    except FileExistsError:
        tmp = link.with_name(f".{link.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        tmp.replace(link)


def _record_json(record: JobRecord) -> bytes:
    # One line, by the C encoder (an indent would take the pure-Python one).
    return json.dumps({name: getattr(record, name) for name in _FIELDS}).encode()


_FIELDS = tuple(field.name for field in fields(JobRecord))


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
