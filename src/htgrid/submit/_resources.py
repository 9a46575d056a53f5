"""Job-ad steps for resource requests, file transfer and the Requirements expression."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from htgrid.submit import _classad, _exprs
from htgrid.submit._ad import Expr
from htgrid.submit._commands import parse_bytes
from htgrid.submit._errors import SubmitError
from htgrid.submit._trace import EXE

if TYPE_CHECKING:
    from htgrid.submit._jobad import JobBuilder

__all__ = [
    "set_image_size",
    "set_request_resources",
    "set_resource_requirements",
    "set_transfer_files",
]

VANILLA, MPI, GRID, JAVA, PARALLEL, LOCAL, VM = 5, 8, 9, 10, 11, 12, 13
_MIGHT_TRANSFER = (VANILLA, MPI, PARALLEL, JAVA, VM)
_SPECIAL = (
    "request_cpus",
    "request_cpu",
    "request_gpus",
    "request_gpu",
    "request_disk",
    "request_memory",
)
_DISALLOWED = ("request_gpu_memory", "request_gpus_memory")


def _request_bytes(b: JobBuilder, attr: str, text: str, base: int) -> None:
    parsed = parse_bytes(text, base)
    if parsed is not None:
        b.ad[attr] = parsed[0]
    elif text.lower() != "undefined":
        b.expr(attr, text)


def set_request_resources(b: JobBuilder) -> None:
    """request_cpus/memory/disk/gpus and custom request_<name> resources."""
    use_defaults = b.universe.grid_type.lower() != "batch"
    cfg = b.config
    for key in b.x.macros.names():
        low = key.lower()
        if not low.startswith("request_") or low in _SPECIAL or low in _DISALLOWED:
            continue
        name = key[len("request_") :]
        if len(name) < 2 or name.startswith("_"):
            continue
        value = b.x.expand(b.x.lookup(key) or "")
        if value:
            b.expr("Request" + name, value)
    if "request_cpu" in b.x.macros:
        b.warnings.append("request_cpu is not a valid submit keyword, did you mean request_cpus?")
    cpus = b.p("request_cpus", "RequestCpus")
    if cpus is None and "RequestCpus" not in b.ad and use_defaults:
        cpus = cfg.job_default_request_cpus
    if cpus is not None and cpus.lower() != "undefined":
        b.expr("RequestCpus", cpus)
    gpus = b.p("request_gpus", "RequestGPUs")
    if gpus is not None and gpus.lower() != "undefined":
        b.expr("RequestGPUs", gpus)
    disk = b.p("request_disk", "RequestDisk")
    if disk is None and "RequestDisk" not in b.ad and use_defaults:
        disk = cfg.job_default_request_disk
    if disk is not None:
        _request_bytes(b, "RequestDisk", disk, 1024)
    memory = b.p("request_memory", "RequestMemory")
    if memory is None and "RequestMemory" not in b.ad:
        if "JobVMMemory" in b.ad:
            b.warnings.append(
                f"'RequestMemory' was NOT specified.  Using JobVMMemory = {b.ad['JobVMMemory']}."
            )
            b.ad["RequestMemory"] = Expr("MY.JobVMMemory")
        elif use_defaults:
            memory = cfg.job_default_request_memory
    if memory is not None:
        _request_bytes(b, "RequestMemory", memory, 1024 * 1024)
    if "RequestGPUs" in b.ad:
        _gpu_constraints(b)


def _gpu_constraints(b: JobBuilder) -> None:
    require = b.p("require_gpus", "RequireGPUs")
    if require:
        b.expr("RequireGPUs", require)
    for key, attr in (
        ("gpus_minimum_capability", "GPUsMinCapability"),
        ("gpus_maximum_capability", "GPUsMaxCapability"),
    ):
        value = b.p(key, attr)
        if value:
            b.expr(attr, value)
    memory = b.p("gpus_minimum_memory", "GPUsMinMemory")
    if memory:
        _request_bytes(b, "GPUsMinMemory", memory, 1024 * 1024)
    runtime = b.p("gpus_minimum_runtime", "GPUsMinRuntime")
    if runtime:
        match = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?\s*", runtime)
        if match and (match.group(2) is None or int(match.group(2)) < 100):
            major = int(match.group(1))
            minor = int(match.group(2)) if match.group(2) is not None else -1
            if minor == -1 and major > 1000:
                version = major
            else:
                version = major * 1000 + (minor * 10 if minor > 0 else 0)
            b.ad["GPUsMinRuntime"] = version
        else:
            b.expr("GPUsMinRuntime", runtime)


def set_resource_requirements(b: JobBuilder) -> None:
    """Complete RequireGPUs from the gpus_minimum_*/maximum_* commands."""
    if "RequestGPUs" not in b.ad:
        return
    require = b.ad.get("RequireGPUs")
    props: set[str] = set()
    if isinstance(require, Expr):
        props = _classad.internal_refs(
            require.text,
            {
                "Capability": 7.5,
                "GlobalMemoryMb": 11012,
                "DriverVersion": 12.1,
                "MaxSupportedVersion": 12010,
            },
        )
    clauses = []
    if "GPUsMinCapability" in b.ad and "capability" not in props:
        clauses.append("Capability >= GPUsMinCapability")
    if "GPUsMaxCapability" in b.ad and "capability" not in props:
        clauses.append("Capability <= GPUsMaxCapability")
    if "GPUsMinMemory" in b.ad and "globalmemorymb" not in props:
        clauses.append("GlobalMemoryMb >= GPUsMinMemory")
    if "GPUsMinRuntime" in b.ad and "maxsupportedversion" not in props:
        clauses.append("MaxSupportedVersion >= GPUsMinRuntime")
    if not clauses:
        return
    joined = " && ".join(clauses)
    if isinstance(require, Expr):
        text = _classad.normalize(require.text)
        text = _exprs.wrap_for(text, "&&")
        b.expr("RequireGPUs", f"{text} && {joined}")
    else:
        b.expr("RequireGPUs", joined)


def set_image_size(b: JobBuilder) -> None:
    """ExecutableSize (from the executable on disk) and ImageSize."""
    if b.universe.number != VM:
        cmd = b.ad.string("Cmd") or ""
        size = 0
        pseudo = b.universe.number == GRID and b.universe.grid_type.lower() in (
            "ec2",
            "gce",
            "azure",
        )
        if cmd and not pseudo:
            size = b.size_kb(cmd)
        b.set_exe_size(size)
        b.ad["ExecutableSize"] = size
    image = b.p("image_size", "ImageSize")
    if image:
        parsed = parse_bytes(image, 1024)
        if parsed is None or parsed[0] < 1:
            raise SubmitError("Image Size must be positive")
        b.ad["ImageSize"] = parsed[0]
    elif "ImageSize" not in b.ad:
        b.note(EXE)
        b.ad["ImageSize"] = b.exe_size_kb


def _file_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def set_transfer_files(b: JobBuilder) -> None:
    """SetTransferFiles: the input/output lists and the should/when settings."""
    ad = b.ad
    inputs: list[str] = []
    text = b.p("transfer_input_files", "TransferInputFiles")
    if text and text != '""':
        inputs = _file_list(text)
    input_kb = sum(b.size_kb(name) for name in inputs)
    if b.universe.container:
        input_kb += _container_input(b, inputs)
    in_specified = bool(inputs)
    if ad.boolean("TransferIn") is not False:
        stdin = ad.string("In")
        if stdin:
            input_kb += b.size_kb(stdin)
    outputs: list[str] = []
    out_specified = False
    text = b.p("transfer_output_files", "TransferOutputFiles")
    if text is not None:
        out_specified = True
        if text != '""':
            outputs = _file_list(text)
            out_specified = bool(outputs)
    should_text = b.p("ShouldTransferFiles", "should_transfer_files")
    default_should = should_text is None
    should = (should_text or "IF_NEEDED").upper()
    if should not in ("YES", "NO", "IF_NEEDED"):
        raise SubmitError(
            f"invalid value ({should_text}) for ShouldTransferFiles.  Please either specify YES, NO, or IF_NEEDED and try again."
        )
    if should == "NO" and (inputs or out_specified):
        raise SubmitError(
            "you specified files you want Condor to transfer, but you disabled should_transfer_files."
        )
    when_text = b.p("WhenToTransferOutput", "when_to_transfer_output")
    default_when = when_text is None
    when = (when_text or "ON_EXIT").upper()
    if when not in ("ON_EXIT", "ON_EXIT_OR_EVICT", "NEVER", "ON_SUCCESS"):
        raise SubmitError(
            f"invalid value ({when_text}) for WhenToTransferOutput.  Please either specify ON_EXIT, or ON_EXIT_OR_EVICT and try again."
        )
    if not default_should and default_when and should == "NO":
        when = "NEVER"
    if (should == "NO") != (when == "NEVER"):
        raise SubmitError(
            f"WhenToTransferOutput specified as {when} yet ShouldTransferFiles defined as {should}.  "
            "Please remove this contradiction from your submit file and try again."
        )
    if default_should and when == "ON_EXIT_OR_EVICT" and should == "IF_NEEDED":
        should = "YES"
    if when == "ON_EXIT_OR_EVICT" and should == "IF_NEEDED":
        raise SubmitError(
            '"when_to_transfer_output = ON_EXIT_OR_EVICT" and "should_transfer_files = IF_NEEDED" are incompatible.'
        )
    ad["ShouldTransferFiles"] = should
    if should != "NO":
        ad["WhenToTransferOutput"] = when
    if should != "YES" and "FileSystemDomain" not in ad:
        ad["FileSystemDomain"] = b.config.filesystem_domain
    if should != "NO" and b.universe.number == JAVA:
        cmd = ad.string("Cmd")
        if cmd and cmd != "java" and cmd not in inputs:
            inputs.append(cmd)
            input_kb += b.size_kb(cmd)
        jars = ad.string("JarFiles")
        for jar in _file_list(jars or ""):
            inputs.append(jar)
            input_kb += b.size_kb(jar)
        ad["Cmd"] = "java"
        ad["TransferExecutable"] = False
    usage = b.p("disk_usage", "DiskUsage")
    if usage:
        parsed = parse_bytes(usage, 1024)
        if parsed is None or parsed[0] < 1:
            raise SubmitError(f"'{usage}' is not valid for disk_usage. It must be >= 1")
        ad["DiskUsage"] = parsed[0]
    else:
        b.note(EXE)
        ad["TransferInputSizeMB"] = (b.exe_size_kb + input_kb) // 1024
        ad["DiskUsage"] = b.exe_size_kb + input_kb
    if should != "NO":
        if in_specified:
            ad["TransferInput"] = ",".join(inputs)
        if out_specified:
            ad["TransferOutput"] = ",".join(outputs)
    elif (
        b.universe.number not in (GRID, JAVA, VM)
        and b.pbool("transfer_executable", "TransferExecutable", False)[0]
    ):
        raise SubmitError(
            "You explicitly requested that the executable be transfered, but you disabled file transfer."
        )
    remaps = b.p("transfer_output_remaps", "TransferOutputRemaps")
    if remaps:
        if not (len(remaps) > 1 and remaps.startswith('"') and remaps.endswith('"')):
            raise SubmitError(f"transfer_output_remaps must be a quoted string, not: {remaps}")
        ad["TransferOutputRemaps"] = remaps[1:-1]


def _container_input(b: JobBuilder, inputs: list[str]) -> int:
    """A container image to be transferred joins the input files (24.0 rules)."""
    image = b.p("container_image", "ContainerImage")
    if b.ad.boolean("TransferContainer") is False:
        b.ad["ContainerImageSource"] = "local"
        return 0
    if not image:
        return 0
    for scheme in ("docker://", "oras://"):
        if image.startswith(scheme):
            b.ad["ContainerImageSource"] = scheme[:-3]
            return 0
    inputs.append(image)
    trimmed = image[:-1] if image.endswith("/") else image
    b.ad["ContainerImage"] = trimmed.rsplit("/", 1)[-1]
    b.ad["ContainerImageSource"] = trimmed.split(":", 1)[0] if ":" in trimmed else "cedar"
    return b.size_kb(image)
