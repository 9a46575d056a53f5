"""Running one claim's job (HTCondor's condor_starter, inside the startd's process).

The job runs in a scratch sandbox under EXECUTE (`dir_<pid>_<slot>`, mode 0700) which
holds `.job.ad` and `.machine.ad`. When its files travel (should_transfer_files YES, or
IF_NEEDED from another filesystem domain) the sandbox is also its working directory:
input arrives as a tar from the schedd, stdout and stderr go to `_condor_stdout` and
`_condor_stderr`, and after the exit the output is packed for the schedd to fetch.
Otherwise the job runs in its Iwd on the shared filesystem, as a local job does.

The job's process is its own session, with the job's environment plus HTCondor's
(`_CONDOR_SCRATCH_DIR`, `_CONDOR_SLOT`, `_CONDOR_JOB_AD`, `OMP_NUM_THREADS`,
`CUDA_VISIBLE_DEVICES`, HOME...) and a marker naming the execute node (and the slot,
never the claim id), by which a restarted startd finds and kills what a killed one left
running.

When the node runs as root, the job runs as its owner (the job ad's Owner, a local
account; root's only with ALLOW_ROOT_JOBS): the sandbox is the owner's, the job's files
are unpacked, read and packed with the owner's rights (the transfer tars, beside the
sandbox, are the node's own), and its process has the owner's uid, gid and groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import io
import logging
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO, Final

from htgrid._aio import call_from_thread, fail_from_thread, resolve_from_thread
from htgrid._files import private_file, write_all, write_atomic
from htgrid._privsep import Account, OwnerPolicy, OwnerRefused, as_owner, new_owned_dir
from htgrid.classad import ClassAd
from htgrid.net import SandboxTooLarge
from htgrid.net.server import SizeLimit
from htgrid.pool import (
    MARKER,
    Exit,
    LaunchError,
    LaunchSpec,
    job_arguments,
    job_environment,
    kill_group,
    reap,
    signal_of,
    spawn,
    wait_exit,
)
from htgrid.queue import HoldReasonCode, JobId
from htgrid.startd._claims import Claim
from htgrid.startd._config import StartdConfig
from htgrid.startd._errors import ClaimStateError
from htgrid.startd._states import ACTIVE, ClaimState, Outcome, OutcomeKind
from htgrid.startd._transfer import (
    JOB_AD,
    MACHINE_AD,
    STDERR,
    STDOUT,
    TransferError,
    Written,
    output_entries,
    pack,
    should_transfer,
    snapshot,
    top_level,
    unpack_input,
)

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = ["Starter", "StopReason"]

_log = logging.getLogger("htgrid.startd.starter")

# HTCondor's STARTER_NUM_THREADS_ENV_VARS: a job uses as many threads as it has cpus.
_THREAD_VARS: Final = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_THREADS",
    "JULIA_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

StopReason = str  # "vacate" (the startd or the schedd), "hold" or "remove" (the user)
#: The job's process started, and the sandbox's files before it ran (`snapshot`).
_Launched = tuple[dict[str, int], subprocess.Popen[bytes]]
#: What a run in the job's own thread returns (`Starter._through`).
_Through = _Launched | LaunchError | Outcome | None


class Starter:
    """Sets up, runs and cleans up one job of one claim."""

    def __init__(
        self,
        claim: Claim,
        job: ClassAd,
        config: StartdConfig,
        machine_ad: ClassAd,
        *,
        marker: str,
        clock: Callable[[], float] = time.time,
        changed: Callable[[], None] = lambda: None,
        policy: OwnerPolicy | None = None,
    ) -> None:
        """`policy`: as whom the job runs (None: as the node's own user)."""
        self._policy = policy
        self.account: Account | None = None
        self.claim = claim
        self.job = job
        self.config = config
        self.machine_ad = machine_ad
        self.marker = marker
        self._clock = clock
        self._changed = changed
        base = f"dir_{os.getpid()}_{claim.slot_id}"
        self.sandbox = config.execute_dir / base
        self.input_tar = config.execute_dir / f"{base}.input.tar"
        self.output_tar = config.execute_dir / f"{base}.output.tar"
        # The output tar itself when it is small: it goes with the job's end, in the
        # claim's status (one request a job fewer for the schedd).
        self.output_inline: bytes | None = None
        self.transfer = should_transfer(job, config.filesystem_domain)
        self._input = asyncio.Event()
        self._input_error: TransferError | None = None
        self._renewed_proxy: bytes | None = None
        self._stop: StopReason | None = None
        self._why = ("", 0)  # the eviction's VacateReason and VacateReasonCode, if known
        self._proc: subprocess.Popen[bytes] | None = None
        self._spec: LaunchSpec | None = None
        self._task: asyncio.Task[None] | None = None
        # What the set-up wrote of a flat input (`unpack_input`): the files there before
        # the job ran, known without reading the sandbox back.
        self._unpacked: dict[str, Written] | None = None
        self._tars = False  # whether a transfer tar may have been written beside it

    # -- set-up -------------------------------------------------------------------------

    async def prepare(
        self, input_data: bytes | None = None, previous: Starter | None = None
    ) -> bool:
        """Make the sandbox and write the ads into it; then wait for input, or run.

        In the same call off the event loop (a short job's activation pays one): the
        files of the claim's `previous` job are removed first, and `input_data` (the
        input sandbox's tar, come with the activation) is unpacked and the job started,
        when nothing else is to come first (a job with an X.509 proxy, which the shadow
        may renew meanwhile, takes its input by `receive_input`).

        Whether it took `input_data`. LaunchError when the job's owner may not run jobs
        here (`previous`'s files removed even so)."""
        if self._policy is not None:
            try:
                self.account = self._policy.account(self.job.get("Owner"))
            except OwnerRefused as exc:
                if previous is not None:
                    await asyncio.to_thread(previous.remove)
                raise LaunchError(str(exc), HoldReasonCode.FailedToAccessUserAccount) from None
        data = input_data if self.transfer and not self._proxied() else None
        spec = None
        if data is not None or not self.transfer:
            with contextlib.suppress(LaunchError):  # the run says what is wrong with it
                spec = self._launch_spec()
        # The run owns what the set-up starts (a cancelled activation does not).
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(
            self._run(ready, previous, data, spec), name=f"starter {self.claim.name}"
        )
        await ready
        return data is not None

    def _proxied(self) -> bool:
        proxy = self.job.get("x509userproxy")
        return isinstance(proxy, str) and bool(proxy)

    def _set_up(
        self, previous: Starter | None, data: bytes | None, spec: LaunchSpec | None
    ) -> _Launched | LaunchError | None:
        """`prepare`'s work off the loop: the job started, or why not (None: not yet)."""
        if previous is not None:
            previous.remove()
        fd = self._make_sandbox()
        try:
            if data is not None:
                self._take_input(data, fd)
        finally:
            os.close(fd)
        if spec is None or self._input_error is not None or self._stop is not None:
            return None
        try:
            return self._launch(spec)
        except LaunchError as exc:
            return exc

    def _take_input(self, data: bytes, fd: int) -> None:
        """Unpack an input sandbox come whole (a small one's tar), as `receive_input`,
        through the sandbox open as `fd`."""
        limit = SizeLimit("MAX_TRANSFER_INPUT_MB", self.config.max_transfer_input_mb)
        try:
            limit.check(len(data), "the input sandbox", at_least=True)
            self._unpack_input(io.BytesIO(data), limit, fd)
        except SandboxTooLarge as exc:
            self._input_error = TransferError(
                f"Transfer input files failure: {exc}",
                HoldReasonCode.MaxTransferInputSizeExceeded,
            )
        except TransferError as exc:
            self._input_error = exc

    def _make_sandbox(self) -> int:
        """The sandbox made anew, the job's ads written into it, open: its descriptor."""
        try:
            new_owned_dir(self.sandbox, self.account)
        except FileNotFoundError:  # EXECUTE itself is gone (the node made it at its start)
            self.sandbox.parent.mkdir(parents=True, exist_ok=True)
            new_owned_dir(self.sandbox, self.account)
        except FileExistsError:
            raise FileExistsError(
                errno.EEXIST, "a sandbox is there already", str(self.sandbox)
            ) from None
        fd = os.open(self.sandbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            with as_owner(self.account):
                _write_new(fd, JOB_AD, self.job.printOld() + "\n")
                _write_new(fd, MACHINE_AD, self.machine_ad.printOld() + "\n")
        except BaseException:
            os.close(fd)
            raise
        return fd

    @property
    def input_received(self) -> bool:
        return self._input.is_set()

    async def receive_input(self, chunks: AsyncIterator[bytes]) -> None:
        """Take the input sandbox (a tar, streamed, kept in a file of the node's own) and
        unpack it as the job's owner; the job may then run (or is held: a sandbox over
        MAX_TRANSFER_INPUT_MB, on the wire or unpacked)."""
        limit = SizeLimit("MAX_TRANSFER_INPUT_MB", self.config.max_transfer_input_mb)
        f: BinaryIO | None = None
        held = bytearray()  # a small sandbox is unpacked from memory: one call off the loop
        try:
            total = 0
            async for chunk in chunks:
                total += len(chunk)
                limit.check(total, "the input sandbox", at_least=True)
                if f is None and total <= _IN_MEMORY:
                    held += chunk
                    continue
                if f is None:
                    self._tars = True
                    f = await asyncio.to_thread(_spill, self.input_tar, bytes(held))
                    held.clear()
                await asyncio.to_thread(f.write, chunk)
            tar = f if f is not None else io.BytesIO(held)
            await asyncio.to_thread(self._unpack_input, tar, limit)
            if self._renewed_proxy is not None:  # renewed while the input was on its way
                try:
                    await self.replace_proxy(self._renewed_proxy, unpacked=True)
                except OSError as exc:
                    _log.warning("claim %s: cannot renew its proxy: %s", self.claim.name, exc)
        except SandboxTooLarge as exc:  # the rest of the body is not read
            self._input_error = TransferError(
                f"Transfer input files failure: {exc}",
                HoldReasonCode.MaxTransferInputSizeExceeded,
            )
        except TransferError as exc:
            self._input_error = exc  # the run ends with it, and the job is held
        finally:
            if f is not None:
                await asyncio.to_thread(f.close)
            with contextlib.suppress(OSError):
                self.input_tar.unlink()
            self._input.set()

    def _unpack_input(self, tar: BinaryIO, limit: SizeLimit, fd: int | None = None) -> None:
        """Unpack the input tar as the job's owner (through the sandbox open as `fd`, if
        given: what a flat tar wrote is then known, `_unpacked`)."""
        tar.flush()
        tar.seek(0)  # the node's file, read by the owner's thread: no need to open it
        with as_owner(self.account):
            self._unpacked = unpack_input(tar, self.sandbox, limit, dir_fd=fd)

    # -- the run --------------------------------------------------------------------------

    async def _run(
        self,
        ready: asyncio.Future[None],
        previous: Starter | None,
        data: bytes | None,
        spec: LaunchSpec | None,
    ) -> None:
        claim = self.claim
        started = self._clock()
        try:
            if spec is not None and (data is not None or not self.transfer):
                # Nothing more is to come: the job's whole run is one thread's (`_through`).
                launched: _Through | Exception = await self._job_thread(
                    self._through, ready, previous, data, spec, started
                )
            else:
                launched = await asyncio.to_thread(self._set_up, previous, data, spec)
        except Exception as exc:
            if not ready.done():  # no sandbox: `prepare` raises it, and nothing ran
                ready.set_exception(exc)
                return
            launched = exc  # the run failed after its start: it ends as any failure does
        if isinstance(launched, tuple):
            self._spec, self._proc = spec, launched[1]
        if data is not None or not self.transfer:
            self._input.set()
        if not ready.done():
            ready.set_result(None)
        outcome = Outcome(OutcomeKind.EVICTED)
        try:
            if isinstance(launched, Outcome):
                outcome = launched
            else:
                await self._input.wait()
                if self._input_error is not None:
                    raise self._input_error
                if isinstance(launched, Exception):
                    raise launched
                if launched is not None or self._stop is None:
                    outcome = await self._execute(started, launched)
        except (LaunchError, TransferError) as exc:
            _log.warning("%s: job %s failed: %s", claim.name, claim.job_id, exc.reason)
            outcome = Outcome(
                OutcomeKind.FAILED,
                wall=self._clock() - started,
                reason=exc.reason,
                hold_code=int(exc.code),
                hold_subcode=exc.subcode,
            )
        except Exception as exc:  # a bug here must not leave the claim running forever
            _log.exception("%s: the starter failed", claim.name)
            outcome = Outcome(
                OutcomeKind.FAILED,
                reason=f"the execute node failed to run the job: {exc!r}",
                hold_code=int(HoldReasonCode.Unspecified),
            )
        finally:
            if self._proc is not None and self._proc.returncode is None:
                kill_group(self._proc.pid, signal.SIGKILL)  # never leave a process behind
            if outcome.kind is OutcomeKind.EVICTED and self._why[0]:
                outcome = dataclasses.replace(outcome, reason=self._why[0], hold_code=self._why[1])
            claim.outcome = outcome
            if claim.state is not ClaimState.ENDED:
                claim.move(ClaimState.ENDED, self._clock())
            self._changed()
        _log.info("%s: job %s ended: %s", claim.name, claim.job_id, _describe(outcome))

    def _job_thread(self, fn: Callable[..., _Through], *args: object) -> asyncio.Future[_Through]:
        """`fn(*args, loop)` in a thread of its own, which may wait for the job's end: a
        daemon thread, which a stopping node does not wait for (its jobs are killed)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Through] = loop.create_future()

        def body() -> None:
            try:
                result = fn(*args, loop)
            except BaseException as exc:  # the loop gets whatever it raised
                fail_from_thread(loop, future, exc)
            else:
                resolve_from_thread(loop, future, result)

        threading.Thread(target=body, name=f"job {self.claim.name}", daemon=True).start()
        return future

    def _through(
        self,
        ready: asyncio.Future[None],
        previous: Starter | None,
        data: bytes | None,
        spec: LaunchSpec,
        started: float,
        loop: asyncio.AbstractEventLoop,
    ) -> _Through:
        """The job's whole run, blocking, in its own thread (`_job_thread`): set up and
        started (`_set_up`), which the loop learns at once (`_launched`); then waited
        for, reaped, and its output packed. A short job costs the node one thread's
        start and two wake-ups of the loop, not two calls off it and a wait on it.
        What `_set_up` returns when the job did not start."""
        launched = self._set_up(previous, data, spec)
        if not isinstance(launched, tuple):
            return launched
        call_from_thread(loop, self._launched, ready, spec, launched)
        before, proc = launched
        ended = reap(proc)  # signalled from the loop meanwhile: vacate, suspend, kill
        kill_group(proc.pid, signal.SIGKILL)  # what the job left running dies with it
        return self._ended(started, before, ended)

    def _launched(self, ready: asyncio.Future[None], spec: LaunchSpec, launched: _Launched) -> None:
        """`_through`'s job started (on the loop): the activation is answered."""
        if self.claim.state is ClaimState.ENDED:  # its run was cancelled meanwhile
            kill_group(launched[1].pid, signal.SIGKILL)
            return
        self._spec, self._proc = spec, launched[1]
        self._input.set()
        if not ready.done():
            ready.set_result(None)
        self._started(launched[1])

    async def _execute(self, started: float, launched: _Launched | None) -> Outcome:
        """The job run to its end: started here, or `launched` already (`prepare`)."""
        if launched is None:
            spec = self._launch_spec()
            self._spec = spec
            launched = await asyncio.to_thread(self._launch, spec)
            self._proc = launched[1]
        before, proc = launched
        self._started(proc)
        ended: Exit = await wait_exit(proc)
        kill_group(proc.pid, signal.SIGKILL)  # what the job left running dies with it
        return await asyncio.to_thread(self._ended, started, before, ended)

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        claim = self.claim
        claim.job_start = self._clock()
        if self._stop is None:
            claim.move(ClaimState.RUNNING, self._clock())
            self._changed()
        else:  # vacated while the process was being created
            self._signal()
        _log.info("%s: job %s started: pid %d", claim.name, claim.job_id, proc.pid)

    def _ended(self, started: float, before: dict[str, int], ended: Exit) -> Outcome:
        """The outcome of a job's process that `ended`, its output packed (blocking)."""
        wall = self._clock() - started
        kind = OutcomeKind.EXITED if self._stop is None else OutcomeKind.EVICTED
        keep = kind is OutcomeKind.EXITED or (
            str(self.job.get("WhenToTransferOutput", "")).upper() == "ON_EXIT_OR_EVICT"
        )
        output = self.transfer and keep
        disk = self._measure_and_pack(before if output else None, kind is OutcomeKind.EXITED)
        return Outcome(
            kind,
            exit_code=ended.code,
            signal=ended.signal,
            user_cpu=ended.user_cpu,
            sys_cpu=ended.sys_cpu,
            wall=wall,
            max_rss_kb=ended.max_rss_kb,
            disk_kb=disk,
            output=output,
        )

    def _measure_and_pack(self, before: dict[str, int] | None, strict: bool) -> int:
        """The sandbox's size (KB); then, given the files there `before` the job ran,
        its output tar (one call off the event loop for both: a job's end is short),
        from one read of the sandbox, as the job's owner."""
        try:
            with as_owner(self.account):
                top: dict[str, os.stat_result] | None = top_level(self.sandbox)
        except OSError:  # the job took the sandbox from itself: the packing says so
            top = None
        disk = _disk_kb(self.sandbox, top)
        if before is not None:
            self._pack_output(before, strict, top)
        return disk

    def _pack_output(
        self, before: dict[str, int], strict: bool, top: dict[str, os.stat_result] | None
    ) -> None:
        """The output tar, its members read as the job's owner: in memory when it is
        small (`output_inline`), else the node's file; an eviction (not `strict`) skips
        the listed files that are not there."""
        code = HoldReasonCode.TransferOutputError
        with as_owner(self.account):
            entries = output_entries(self.job, self.sandbox, before, strict=strict, top=top)
            held = _Capped()
            with contextlib.suppress(_TooLarge):
                pack(entries, held, dereference=False, code=code)
                self.output_inline = held.getvalue()
                return
        self._tars = True
        with private_file(self.output_tar) as tar, as_owner(self.account):
            pack(entries, tar, dereference=False, code=code)

    def _launch(self, spec: LaunchSpec) -> _Launched:
        """The sandbox's files before the job runs, and the job's process started."""
        return self._ready_and_snapshot(spec), spawn(spec)

    def _ready_and_snapshot(self, spec: LaunchSpec) -> dict[str, int]:
        """The executable made executable by its owner if it came with the input; the
        sandbox's files and their times (those the set-up wrote, if it knows them)."""
        exe = spec.argv[0]
        ours = self.transfer and os.path.dirname(exe) == str(self.sandbox)
        unpacked = self._unpacked
        with as_owner(self.account):
            if ours and unpacked is not None and os.path.basename(exe) in unpacked:
                mode = unpacked[os.path.basename(exe)].mode
                if mode & 0o700 != 0o700:
                    os.chmod(exe, mode | 0o700)
            elif ours:
                with contextlib.suppress(OSError):  # spawn says what is wrong with it
                    os.chmod(exe, os.stat(exe).st_mode | 0o700)
            if unpacked is not None:  # the ads are never output: not needed here
                return {name: file.mtime_ns for name, file in unpacked.items()}
            return snapshot(self.sandbox)

    def _launch_spec(self) -> LaunchSpec:
        job, claim = self.job, self.claim
        iwd = job.get("Iwd")
        if not isinstance(iwd, str) or not iwd:
            raise LaunchError("the job has no Iwd", HoldReasonCode.IwdError)
        cmd = job.get("Cmd")
        if not isinstance(cmd, str) or not cmd:
            raise LaunchError("the job has no Cmd", HoldReasonCode.FailedToCreateProcess)
        box = str(self.sandbox)

        def where(attr: str, transferred: bool) -> str:
            value = job.get(attr)
            if not isinstance(value, str) or not value or value == os.devnull:
                return os.devnull
            if self.transfer and transferred:
                return os.path.join(box, PurePosixPath(value).name)
            return os.path.join(iwd, value)

        if self.transfer:
            cwd = box
            exe = (
                os.path.join(box, PurePosixPath(cmd).name)
                if job.get("TransferExecutable") is not False
                else os.path.join(iwd, cmd)
            )
            stdin = where("In", job.get("TransferIn") is not False)
            # A stream to /dev/null goes there, as HTCondor's starter sends it: no file
            # in the sandbox (made and removed for every job), none in the output.
            stdout = os.path.join(box, STDOUT) if _named(job.get("Out")) else os.devnull
            same = job.get("Err") == job.get("Out")
            stderr = (
                stdout
                if same
                else os.path.join(box, STDERR)
                if _named(job.get("Err"))
                else os.devnull
            )
        else:
            cwd, exe = iwd, os.path.join(iwd, cmd)
            stdin, stdout, stderr = where("In", False), where("Out", False), where("Err", False)
        env = job_environment(job)
        if self.account is not None:  # HTCondor's STARTER_SETS_HOME_ENV
            env.setdefault("HOME", self.account.home)
        proxy = job.get("x509userproxy")
        if isinstance(proxy, str) and proxy:
            env["X509_USER_PROXY"] = where("x509userproxy", True)
        cpus = str(claim.resources.cpus)
        env.update(dict.fromkeys(_THREAD_VARS, cpus))
        env.update(
            {
                "_CONDOR_SCRATCH_DIR": box,
                "_CONDOR_SLOT": claim.name.split("@")[0],
                "_CONDOR_JOB_AD": os.path.join(box, JOB_AD),
                "_CONDOR_MACHINE_AD": os.path.join(box, MACHINE_AD),
                "_CONDOR_JOB_IWD": cwd,
                "BATCH_SYSTEM": "HTCondor",
                "TMPDIR": box,
                "TMP": box,
                "TEMP": box,
                # The node's marker and the dynamic slot's name: never the claim id, the
                # capability for the claim, which the job must not see.
                MARKER: f"{self.marker}:{claim.name}",
            }
        )
        if claim.resources.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(claim.resources.gpus)
        kill = signal_of(job.get("KillSig"), signal.SIGTERM)
        vacate = job.get("JobMaxVacateTime")
        if not isinstance(vacate, int | float) or isinstance(vacate, bool) or vacate < 0:
            vacate = self.config.vacate_time
        return LaunchSpec(
            job_id=claim.job_id or _NO_JOB,
            argv=(exe, *job_arguments(job)),
            env=env,
            cwd=cwd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            kill_signal=kill,
            hold_signal=signal_of(job.get("HoldKillSig"), kill),
            remove_signal=signal_of(job.get("RemoveKillSig"), kill),
            vacate_time=float(vacate),
            append_output=self.transfer,  # a spooled stdout (ON_EXIT_OR_EVICT) goes on
            account=self.account,
        )

    # -- stopping and cleaning up -------------------------------------------------------

    async def replace_proxy(self, data: bytes, *, unpacked: bool = False) -> None:
        """The job's renewed X.509 proxy in the place of the copy its input brought
        (written whole, mode 0600, then renamed over it), as HTCondor's starter takes one
        from the shadow; kept until the input is unpacked when it has not arrived yet (it
        may hold the old one). A job that does not transfer files reads the proxy where
        its ad names it, which the schedd renews itself."""
        proxy = self.job.get("x509userproxy")
        name = PurePosixPath(proxy).name if isinstance(proxy, str) else ""
        if name in ("", ".", ".."):
            raise ClaimStateError(f"claim {self.claim.name}: its job has no x509userproxy")
        if not self.transfer:
            return
        if not (unpacked or self.input_received):
            self._renewed_proxy = data
            return

        def write() -> None:
            with as_owner(self.account):
                write_atomic(self.sandbox / name, data, mode=0o600)

        await asyncio.to_thread(write)

    def vacate(
        self, reason: StopReason, *, hard: bool = False, why: str = "", code: int = 0
    ) -> None:
        """Stop the job: its kill signal, SIGKILL after its vacate time (Vacating); with
        `hard`, SIGKILL at once (Killing: WANT_VACATE was not true). `why` and `code` (a
        VacateReasonCode) tell the schedd why, when the node's own policy stops it."""
        if self._stop is not None or self.claim.state not in ACTIVE:
            return
        self._stop = reason
        self._why = (why, code)
        stopped = self.claim.state is ClaimState.SUSPENDED
        self.claim.move(ClaimState.KILLING if hard else ClaimState.VACATING, self._clock())
        self._changed()
        if self._proc is None:
            self._input.set()  # no process yet: the run ends without one
        elif hard:
            kill_group(self._proc.pid, signal.SIGKILL)
        else:
            self._signal()
            if stopped:  # a stopped process takes its kill signal once it runs again
                kill_group(self._proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """Vacating to Killing (KILL was true, or the vacate time is over): SIGKILL."""
        if self.claim.state is not ClaimState.VACATING:
            return
        self.claim.move(ClaimState.KILLING, self._clock())
        self._changed()
        if self._proc is not None and self._proc.returncode is None:
            kill_group(self._proc.pid, signal.SIGKILL)

    def suspend(self) -> None:
        """SUSPEND: the job's process group stopped (SIGSTOP); the claim is Suspended."""
        proc = self._proc
        if proc is None or proc.returncode is not None or self._stop is not None:
            return
        if self.claim.state not in (ClaimState.RUNNING, ClaimState.RETIRING):
            return
        kill_group(proc.pid, signal.SIGSTOP)
        self.claim.move(ClaimState.SUSPENDED, self._clock())
        self._changed()

    def resume(self) -> None:
        """CONTINUE (or PREEMPT, which lets a suspended job run out its retirement): the
        job runs again (SIGCONT), Retiring if it was preempted, else Running."""
        proc = self._proc
        if proc is None or self.claim.state is not ClaimState.SUSPENDED:
            return
        kill_group(proc.pid, signal.SIGCONT)
        to = ClaimState.RETIRING if self.claim.preempted else ClaimState.RUNNING
        self.claim.move(to, self._clock())
        self._changed()

    def retire(self) -> None:
        """PREEMPT: the job may run until its retirement time is over (Retiring)."""
        self.claim.preempted = True
        if self.claim.state is ClaimState.SUSPENDED:
            self.resume()
        elif self.claim.state is ClaimState.RUNNING:
            self.claim.move(ClaimState.RETIRING, self._clock())
            self._changed()

    def _signal(self) -> None:
        proc, spec = self._proc, self._spec
        if proc is None or spec is None or proc.returncode is not None:
            return
        sig = {"hold": spec.hold_signal, "remove": spec.remove_signal}.get(
            self._stop or "", spec.kill_signal
        )
        _log.info(
            "%s: job %s %s: sending %s", self.claim.name, self.claim.job_id, self._stop, sig.name
        )
        kill_group(proc.pid, sig)
        asyncio.get_running_loop().call_later(spec.vacate_time, self._vacate_time_over, proc)

    def _vacate_time_over(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.returncode is not None:
            return  # it went in time
        if self.claim.starter is self and self.claim.state is ClaimState.VACATING:
            self.kill()  # Preempting/Killing, as the slot says
        else:
            _kill_if_running(proc)

    @property
    def vacate_time(self) -> float:
        """Seconds from the job's kill signal to SIGKILL (its JobMaxVacateTime, else
        JOB_MAX_VACATE_TIME)."""
        return self._spec.vacate_time if self._spec is not None else self.config.vacate_time

    async def wait(self) -> None:
        """Until the run is over (its outcome recorded)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def cleanup(self) -> None:
        """Remove the sandbox and the transfer files."""
        await self.stop()
        await asyncio.to_thread(self.remove)

    async def stop(self) -> None:
        """Vacate a job still running, and wait for its run to be over."""
        if self._task is not None and not self._task.done():
            self.vacate("vacate")
            await self.wait()

    def remove(self) -> None:
        """Remove the sandbox and the transfer files (blocking: off the event loop; the
        job's run is over)."""
        shutil.rmtree(self.sandbox, ignore_errors=True)
        if not self._tars:
            return
        for path in (self.input_tar, self.output_tar):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


_NO_JOB: Final = JobId(0, 0)  # a claim whose ad has no ids (a test's)
#: An output tar up to this size goes with the job's end (`ClaimStatus.output_data`).
INLINE_OUTPUT: Final = 1 << 16
_IN_MEMORY: Final = 1 << 20  # an input sandbox up to this size is not written to a file


class _TooLarge(Exception):
    """An output tar past `INLINE_OUTPUT`: it goes to a file."""


class _Capped(io.BytesIO):
    """A tar held in memory up to `INLINE_OUTPUT` (_TooLarge past it)."""

    def write(self, data: ReadableBuffer, /) -> int:
        if self.tell() + memoryview(data).nbytes > INLINE_OUTPUT:
            raise _TooLarge
        return super().write(data)


def _spill(path: Path, data: bytes) -> BinaryIO:
    """A private file at `path` holding `data`, open for more."""
    f = private_file(path)
    try:
        f.write(data)
    except BaseException:
        f.close()
        raise
    return f


def _write_new(dir_fd: int, name: str, text: str) -> None:
    """A new file `name` in the directory `dir_fd` holding `text` (the umask's mode)."""
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o666,
        dir_fd=dir_fd,
    )
    try:
        write_all(fd, text.encode())
    finally:
        os.close(fd)


def _named(stream: object) -> bool:
    """Whether a job's Out or Err names a file (not nothing, nor /dev/null)."""
    return isinstance(stream, str) and bool(stream) and stream != os.devnull


def _kill_if_running(proc: subprocess.Popen[bytes]) -> None:
    if proc.returncode is None:
        kill_group(proc.pid, signal.SIGKILL)


def _disk_kb(path: Path, top: dict[str, os.stat_result] | None) -> int:
    """The KB the files in the sandbox `path` take (its `top_level` read already, if
    given: only its subdirectories are walked)."""
    total = 0
    walked: list[str] = [str(path)]
    if top is not None:
        walked = [os.path.join(path, n) for n, st in top.items() if stat.S_ISDIR(st.st_mode)]
        total = sum(st.st_size for st in top.values() if not stat.S_ISDIR(st.st_mode))
    for where in walked:
        for root, _, files in os.walk(where):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_size
    return (total + 1023) // 1024


def _describe(outcome: Outcome) -> str:
    if outcome.kind is OutcomeKind.FAILED:
        return f"failed ({outcome.reason})"
    how = f"signal {outcome.signal}" if outcome.signal is not None else f"exit {outcome.exit_code}"
    return f"{outcome.kind.value} ({how})" if outcome.kind is OutcomeKind.EXITED else "evicted"
