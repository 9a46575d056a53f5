"""Submit commands to job ad: the steps of condor_submit's make_job_ad, in order.

Each `_set_*` method mirrors one SubmitHash::SetXXX of submit_utils.cpp;
grid jobs, VM jobs, resources and Requirements live in sibling modules.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from htgrid.submit import _classad, _commands, _environ, _grid, _requirements, _resources
from htgrid.submit._ad import Expr, JobAd
from htgrid.submit._argsenv import (
    parse_args_v1_wacked_or_v2_quoted,
    parse_args_v2_quoted,
)
from htgrid.submit._config import SubmitConfig
from htgrid.submit._errors import SubmitError
from htgrid.submit._macros import Expander
from htgrid.submit._tables import SIGNALS, SIMPLE_COMMANDS, UNIVERSE_NAMES, Simple, universe_number
from htgrid.submit._trace import EXE, IWD, StepTrace
from htgrid.submit._values import string_is_bool, string_is_long

__all__ = ["UNIVERSE_STEP", "JobBuilder", "Step", "Universe"]

#: One step of the build: its name and what it does.
Step = tuple[str, Callable[[], None]]
#: The step that decides the universe, which every later step reads.
UNIVERSE_STEP: Final = "universe"

VANILLA, SCHEDULER, MPI, GRID, JAVA, PARALLEL, LOCAL, VM = 5, 7, 8, 9, 10, 11, 12, 13
_PSEUDO_EXE_GRIDS = ("ec2", "gce", "azure")
_GRID_TYPES = (
    "blah",
    "batch",
    "pbs",
    "sge",
    "lsf",
    "nqs",
    "naregi",
    "condor",
    "arc",
    "gt2",
    "gt5",
    "ec2",
    "gce",
    "azure",
)

#: Grid types HTCondor itself retired: the release that removed each, and what to use now.
_CE = "for a compute entrypoint use `condor` (HTCondor-CE) or `arc`"
_RETIRED_GRID_TYPES: Final = {
    "deltacloud": ("8.5.4", ""),
    "globus": ("9.2.0", "use `gt2` or `gt5` (Globus GRAM)"),  # gt2's old name
    "cream": ("9.2.0", _CE),
    "unicore": ("9.2.0", ""),
    "boinc": ("10.0.0", ""),
    "nordugrid": ("10.2.0", "for an ARC CE use `arc` (its REST interface)"),
}


def _retired(grid_type: str) -> str | None:
    """Why `grid_type` is refused, if HTCondor itself retired it."""
    retired = _RETIRED_GRID_TYPES.get(grid_type.lower())
    if retired is None:
        return None
    release, instead = retired
    return (
        f'grid_resource: grid type "{grid_type}" was retired by HTCondor in {release}; '
        + (f"{instead}; " if instead else "")
        + "htgrid runs condor, batch, arc, gt2, gt5, ec2, gce and azure"
    )


@dataclass(slots=True)
class Universe:
    """The universe of a cluster, decided once (SetUniverse)."""

    number: int = VANILLA
    docker: bool = False
    container: bool = False
    grid_type: str = ""


def compress_path(path: str) -> str:
    """Collapse runs of path separators, as condor_submit does."""
    return re.sub(r"[/\\]{2,}", lambda m: m.group()[0], path)


@dataclass(slots=True)
class JobBuilder:
    """Builds the ad of one proc from an expander holding that proc's macros."""

    x: Expander
    config: SubmitConfig
    cluster: int
    proc: int
    qdate: int
    cwd: str
    owner: str
    universe: Universe
    env: Mapping[str, str]
    check_files: bool = True
    ad: JobAd = field(default_factory=JobAd)
    warnings: list[str] = field(default_factory=list)
    iwd: str = ""
    exe_size_kb: int = 0
    trace: StepTrace | None = None  # the step running, while a build is watched (_plan)

    # -- helpers -------------------------------------------------------------

    def note(self, state: str) -> None:
        """The step running reads the builder's `state` (IWD, EXE) (see `_trace`)."""
        if self.trace is not None:
            self.trace.reads.add(state)

    def set_iwd(self, iwd: str) -> None:
        """The job's iwd, which relative file names (and $Fp()) are taken against."""
        self.iwd = iwd
        self.x.cwd = iwd
        if self.trace is not None:
            self.trace.writes[IWD] = (IWD, iwd)

    def set_exe_size(self, kb: int) -> None:
        """The executable's size (KiB), which the disk usage counts."""
        self.exe_size_kb = kb
        if self.trace is not None:
            self.trace.writes[EXE] = (EXE, kb)

    def p(self, name: str, alt: str | None = None) -> str | None:
        """The expanded value of a submit command (None when unset or empty)."""
        return self.x.param(name, alt)

    def pbool(self, name: str, alt: str | None, default: bool) -> tuple[bool, bool]:
        """(value, was given) of a boolean command; an error when it is not boolean."""
        text = self.p(name, alt)
        if text is None:
            return default, False
        value = string_is_bool(text)
        if value is None:
            raise SubmitError(f"{name}={text} is invalid, must eval to a boolean.")
        return value, True

    def plong(self, name: str, alt: str | None = None) -> int | None:
        """An integer command; an error when it is not an integer."""
        text = self.p(name, alt)
        if text is None:
            return None
        value = string_is_long(text)
        if value is None:
            raise SubmitError(f"{name}={text} is invalid, must eval to an integer.")
        return value

    def expr(self, attr: str, text: str) -> None:
        """Insert an expression attribute; a parse failure fails the submit."""
        if not _classad.parses(text):
            raise SubmitError(f"Parse error in expression: \n\t{attr} = {text}\n\t")
        self.ad[attr] = Expr(text)

    def full_path(self, name: str, *, use_iwd: bool = True) -> str:
        """`name` made absolute against the job's iwd (or the submit directory)."""
        if use_iwd:
            self.note(IWD)
        base = self.iwd if use_iwd else self.cwd
        path = f"/{name}" if name.startswith("/") else f"/{base}/{name}"
        return compress_path(path)

    def size_kb(self, name: str) -> int:
        """Size in KiB of a file (or directory tree) named relative to the iwd; 0 if absent."""
        if "://" in name:
            return 0
        path = self.full_path(name)
        try:
            if os.path.isdir(path):
                total = 0
                for root, _dirs, files in os.walk(path):
                    for file in files:
                        with contextlib.suppress(OSError):
                            total += os.lstat(os.path.join(root, file)).st_size
                return (total + 1023) // 1024
            return (os.stat(path).st_size + 1023) // 1024
        except OSError:
            return 0

    # -- the steps -------------------------------------------------------------

    def build(self) -> JobAd:
        """Run every step and return the finished ad."""
        for _name, step in self.steps():
            step()
        self.ad["ProcId"] = self.proc
        return self.ad

    def steps(self) -> list[Step]:
        """The steps of the build, in order (ProcId, set last, is not one of them).

        Each is as small as the language lets it be: `_plan` replays, for each proc,
        only the steps whose result can differ from proc to proc.
        """
        call = functools.partial
        steps: list[Step] = [
            ("base", self._base),
            (UNIVERSE_STEP, self._set_universe),
            ("iwd", self._set_iwd),
            ("executable", self._set_executable),
            ("arguments", self._set_arguments),
            ("grid", call(_grid.set_grid_params, self)),
            ("vm", call(_commands.set_vm_params, self)),
            ("java_vm_args", call(_environ.set_java_vm_args, self)),
            ("parallel", self._set_parallel),
            ("environment", call(_environ.set_environment, self)),
            ("job_status", self._set_job_status),
            *((which, call(self._set_std, which)) for which in ("input", "output", "error")),
            ("credentials", call(_commands.set_credentials, self)),
            ("notification", self._set_notification),
            ("rank", self._set_rank),
            ("policy", call(_commands.set_policy, self)),
            ("kill_sig", self._set_kill_sig),
            ("request_resources", call(_resources.set_request_resources, self)),
            ("concurrency", call(_commands.set_concurrency_and_accounting, self)),
            *((group[0].key, call(_commands.set_simple, self, group)) for group in _SIMPLE),
            ("deferral", call(_commands.set_deferral, self)),
            ("image_size", call(_resources.set_image_size, self)),
            ("transfer_files", call(_resources.set_transfer_files, self)),
            ("auto_attributes", self._set_auto_attributes),
            *((name, call(self._forced_attribute, name)) for name in self._forced_names()),
            ("resource_requirements", call(_resources.set_resource_requirements, self)),
            ("requirements", call(_requirements.set_requirements, self)),
        ]
        return steps

    def _base(self) -> None:
        ad, cfg = self.ad, self.config
        ad["MyType"] = "Job"
        ad["TargetType"] = "Machine"
        ad["ClusterId"] = self.cluster
        ad["QDate"] = self.qdate
        if cfg.submit_method is not None:
            ad["JobSubmitMethod"] = cfg.submit_method
        ad["Owner"] = Expr("undefined")
        for name in ("RemoteWallClockTime", "RemoteUserCpu", "RemoteSysCpu"):
            ad[name] = 0.0
        for name in ("CumulativeRemoteUserCpu", "CumulativeRemoteSysCpu"):
            ad[name] = 0.0
        for name in (
            "ExitStatus",
            "NumCkpts",
            "NumJobStarts",
            "NumJobCompletions",
            "NumRestarts",
            "NumSystemHolds",
            "CommittedTime",
            "CommittedSlotTime",
            "CumulativeSlotTime",
            "TotalSuspensions",
            "LastSuspensionTime",
            "CumulativeSuspensionTime",
            "CommittedSuspensionTime",
        ):
            ad[name] = 0
        ad["ExitBySignal"] = False
        ad["CondorVersion"] = cfg.condor_version
        ad["CondorPlatform"] = cfg.condor_platform

    def _set_universe(self) -> None:
        u = self.universe
        ad = self.ad
        text = self.p("universe", "JobUniverse") or self.config.default_universe
        number = VANILLA
        if text:
            number = universe_number(text)
            if not number and text.strip().lower() == "docker":
                number, u.docker = VANILLA, True
            if not number and text.strip().lower() == "container":
                number, u.container = VANILLA, True
        u.number = number
        if number in (VANILLA, LOCAL):
            container_image = self.p("container_image", "ContainerImage")
            if u.docker:
                if container_image:
                    raise SubmitError("docker universe does not allow use of container_image.")
            else:
                docker_image = self.p("docker_image", "DockerImage")
                if docker_image and container_image:
                    raise SubmitError("cannot declare both docker_image and container_image")
                if docker_image or container_image:
                    u.container = True
                    if docker_image:
                        ad["WantDockerImage"] = True
        ad["JobUniverse"] = number
        for prefix in ("Remote_", "Remote_Remote_"):
            remote = self.p(prefix + "universe", prefix + "JobUniverse")
            if remote:
                remote_number = universe_number(remote)
                if not remote_number:
                    raise SubmitError(f"Unknown {prefix}Universe of '{remote}' specified")
                ad[prefix + "JobUniverse"] = remote_number
        if self.pbool("WantParallelScheduling", None, False)[0]:
            ad["WantParallelScheduling"] = True
        if number == JAVA:
            return
        if number in (VANILLA, LOCAL):
            if u.docker:
                ad["WantDocker"] = True
            if u.container:
                ad["WantContainer"] = True
            return
        if number in (SCHEDULER, PARALLEL, MPI):
            return
        if number == GRID:
            resource = self.p("grid_resource", "GridResource")
            if not resource:
                raise SubmitError("grid_resource attribute not defined for grid universe job")
            u.grid_type = resource.split(" ", 1)[0]
            # `$$(resource_name)` is filled in at match time (grid matchmaking).
            retired = _retired(u.grid_type)
            if retired is not None:
                raise SubmitError(retired)
            if u.grid_type.lower() not in _GRID_TYPES and not u.grid_type.startswith("$$("):
                raise SubmitError(
                    f"Invalid value '{u.grid_type}' for grid type\n"
                    "Must be one of: condor, batch, arc, ec2, gce, or azure"
                )
            return
        if number == VM:
            # VM jobs always use file transfer; these act as if the user set them
            self.x.set_default("ShouldTransferFiles", "YES")
            self.x.set_default("WhenToTransferOutput", "ON_EXIT")
            return
        if text and not number:
            raise SubmitError(f"I don't know about the '{text}' universe.")
        raise SubmitError(
            f"'{UNIVERSE_NAMES.get(number, str(number))}' is not a supported universe."
        )

    def _set_iwd(self) -> None:
        short = self.p("initialdir", "Iwd") or self.p("initial_dir", "job_iwd")
        if short:
            iwd = short if short.startswith("/") else f"{self.cwd}/{short}"
        else:
            iwd = self.cwd
        iwd = compress_path(iwd)
        if self.check_files and not os.access(iwd, os.F_OK | os.X_OK):
            raise SubmitError(f"No such directory: {iwd}")
        self.set_iwd(iwd)
        self.ad["Iwd"] = iwd
        submit_file = self.p("SUBMIT_FILE")
        if submit_file:
            self.ad["JobSubmitFile"] = submit_file

    def _set_executable(self) -> None:
        u, ad = self.universe, self.ad
        grid = u.grid_type.lower()
        ignore = u.number == VM or (u.number == GRID and grid in _PSEUDO_EXE_GRIDS)
        if u.docker or u.container:
            ignore = ignore or False
            docker_image = self.p("docker_image", "DockerImage")
            if docker_image:
                image = _strip_quotes(docker_image)
                if not image:
                    raise SubmitError(f"'{docker_image}' is not a valid docker_image")
                ad["DockerImage"] = image
            elif u.docker:
                raise SubmitError("docker jobs require a docker_image")
            if u.container:
                _commands.set_container_image(self, docker_image is not None)
        exe = self.p("executable", "Cmd")
        transfer = True
        if exe is None:
            if u.docker or u.container:
                ignore = True
            else:
                raise SubmitError("No 'executable' parameter was provided")
        flag = self.p("transfer_executable", "TransferExecutable")
        if flag is not None and flag[:1] in ("F", "f"):
            ad["TransferExecutable"] = False
            transfer = False
        if ignore and transfer:
            ad["TransferExecutable"] = False
            transfer = False
        name = exe or ""
        full = self.full_path(name, use_iwd=False) if transfer else name
        ad["Cmd"] = full
        checked = self.check_files and transfer and not ignore and "://" not in full
        if checked and not os.path.exists(full):
            raise SubmitError(f"Executable file {full} does not exist")

    def _set_arguments(self) -> None:
        args1 = self.p("arguments", "Args")
        args2 = self.p("arguments2")
        allow_v1 = self.pbool("allow_arguments_v1", None, False)[0]
        if args1 and args2 and not allow_v1:
            raise SubmitError(
                "If you wish to specify both 'arguments' and\n'arguments2' for maximal "
                "compatibility with different\nversions of Condor, then you must also "
                "specify\nallow_arguments_v1=true."
            )
        try:
            if args2 is not None:
                parsed = parse_args_v2_quoted(args2)
            elif args1 is not None:
                parsed = parse_args_v1_wacked_or_v2_quoted(args1)
            else:
                parsed = parse_args_v2_quoted("")
        except SubmitError as exc:
            raise SubmitError(
                f"{exc.reason}\nThe full arguments you specified were: {args2 or args1}"
            ) from None
        if parsed.input_was_v1:
            self.ad["Args"] = parsed.v1_raw()
        else:
            self.ad["Arguments"] = parsed.v2_raw()
        if self.universe.number == JAVA and not parsed.words:
            raise SubmitError(
                "In Java universe, you must specify the class name to run.\nExample:\n\n"
                "arguments = MyClass\n"
            )

    def _set_parallel(self) -> None:
        want = self.ad.boolean("WantParallelScheduling") or False
        number = self.universe.number
        if number in (MPI, PARALLEL) or want:
            count = self.p("machine_count", "MachineCount") or self.p("node_count", "NodeCount")
            if count is not None:
                match = re.match(r"\s*[+-]?\d+", count)
                hosts = int(match.group()) if match else 0
                self.ad["MinHosts"] = hosts
                self.ad["MaxHosts"] = hosts
            elif "MaxHosts" not in self.ad:
                raise SubmitError("No machine_count specified!")
            self.ad["RequestCpus"] = 1
        if number == PARALLEL:
            self.ad["WantIOProxy"] = True
            self.ad["JobRequiresSandbox"] = True

    def _set_job_status(self) -> None:
        hold = self.pbool("hold", None, False)[0]
        if hold:
            self.ad["JobStatus"] = 5
            self.ad["HoldReasonCode"] = 15
            self.ad["HoldReason"] = "submitted on hold at user's request"
        else:
            self.ad["JobStatus"] = 1
        self.ad["EnteredCurrentStatus"] = self.qdate

    def _set_std(self, which: str) -> None:
        key, alt, attr, transfer_attr, stream_attr = {
            "input": ("input", "stdin", "In", "TransferIn", "StreamIn"),
            "output": ("output", "stdout", "Out", "TransferOut", "StreamOut"),
            "error": ("error", "stderr", "Err", "TransferErr", "StreamErr"),
        }[which]
        transfer, given = self.pbool(f"transfer_{which}", transfer_attr, True)
        must_set = given and not transfer
        stream = self.pbool(f"stream_{which}", stream_attr, False)[0]
        value = self.p(key, alt)
        if not value or value == "/dev/null":
            transfer = stream = False
            value = "/dev/null"
        elif self.universe.number == VM:
            raise SubmitError(
                "You cannot use input, ouput, and error parameters in the submit description "
                "file for vm universe"
            )
        self.ad[attr] = value
        if transfer:
            self.ad[stream_attr] = stream
            if must_set:
                self.ad[transfer_attr] = True
        else:
            self.ad[transfer_attr] = False

    def _set_notification(self) -> None:
        how = self.p("notification", "JobNotification") or self.config.job_default_notification
        table = {"never": 0, "always": 1, "complete": 2, "error": 3}
        if how is None:
            self.ad["JobNotification"] = 0
            return
        if how.lower() not in table:
            raise SubmitError("Notification must be 'Never', 'Always', 'Complete', or 'Error'")
        self.ad["JobNotification"] = table[how.lower()]

    def _set_rank(self) -> None:
        rank = self.p("rank", "preferences")
        if rank:
            self.expr("Rank", rank)
        else:
            self.ad["Rank"] = 0.0

    def _set_kill_sig(self) -> None:
        for key, attr in (
            ("kill_sig", "KillSig"),
            ("remove_kill_sig", "RemoveKillSig"),
            ("hold_kill_sig", "HoldKillSig"),
        ):
            name = _signal_name(self.p(key, attr))
            if name is None and attr == "KillSig" and self.universe.number != VANILLA:
                name = "SIGTERM"
            if name is not None:
                self.ad[attr] = name
        timeout = self.p("kill_sig_timeout", "KillSigTimeout")
        if timeout is not None:
            match = re.match(r"\s*[+-]?\d+", timeout)
            self.ad["KillSigTimeout"] = int(match.group()) if match else 0

    def _set_auto_attributes(self) -> None:
        ad = self.ad
        if "MaxHosts" not in ad and self.universe.number != MPI:
            ad["MinHosts"] = 1
            ad["MaxHosts"] = 1
        if "CurrentHosts" not in ad:
            ad["CurrentHosts"] = 0
        if "CheckpointExitCode" in ad:
            ad["WantFTOnCheckpoint"] = True
        lease = self.config.job_default_lease_duration
        if (
            self.universe.number in (VANILLA, JAVA, PARALLEL, VM)
            and "JobLeaseDuration" not in ad
            and lease
        ):
            self.expr("JobLeaseDuration", lease)
        if "JobPrio" not in ad:
            ad["JobPrio"] = 0
        if "JobStarterLog" in ad and "JobStarterDebug" not in ad:
            ad["JobStarterDebug"] = True
        lease_value = ad.number("JobLeaseDuration")
        if lease_value is not None and 0 < lease_value < 20:
            self.warnings.append(
                "JobLeaseDuration less than 20 seconds is not allowed, using 20 instead"
            )
            ad["JobLeaseDuration"] = 20
        history = ad.number("JobMachineAttrsHistoryLength")
        if history is not None and not 0 <= history <= 2**31 - 1:
            raise SubmitError(
                f"job_machine_attrs_history_length={int(history)} is out of bounds 0 to 2147483647"
            )
        if self.universe.number == SCHEDULER and "DeferralTime" in ad:
            raise SubmitError(
                "DeferralTime does not work for scheduler universe jobs.\n"
                "Consider submitting this job using the local universe, instead"
            )

    def _forced_names(self) -> list[str]:
        """The `MY.name` (and `+name`) commands, in HTCondor's order."""
        return [name for name in self.x.macros.names() if name.lower().startswith("my.")]

    def _forced_attribute(self, name: str) -> None:
        raw = self.x.lookup(name)
        value = self.x.expand(raw) if raw else ""
        self.expr(name[3:], value or "undefined")


def _simple_groups() -> tuple[tuple[Simple, ...], ...]:
    """The simple commands, each with those that are its other spellings after it."""
    groups: list[list[Simple]] = []
    for cmd in SIMPLE_COMMANDS:
        if cmd.alt_of_previous and groups:
            groups[-1].append(cmd)
        else:
            groups.append([cmd])
    return tuple(tuple(group) for group in groups)


_SIMPLE: Final = _simple_groups()


def _strip_quotes(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1]
    return text


def _signal_name(text: str | None) -> str | None:
    if text is None:
        return None
    match = re.match(r"\s*[+-]?\d+", text)
    if match and int(match.group()):
        number = int(match.group())
        for name, value in SIGNALS.items():
            if value == number:
                return name
        raise SubmitError(f"invalid signal {text}")
    upper = text.strip().upper()
    if upper in SIGNALS:
        return upper
    if "SIG" + upper in SIGNALS:
        return upper
    raise SubmitError(f"invalid signal {text}")
