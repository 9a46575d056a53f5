"""The Requirements expression: the user's, extended with HTCondor's default clauses
(SubmitHash::SetRequirements).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from htgrid.submit import _classad
from htgrid.submit._errors import SubmitError

if TYPE_CHECKING:
    from htgrid.submit._jobad import JobBuilder

__all__ = ["set_requirements"]

VANILLA, MPI, GRID, JAVA, PARALLEL, LOCAL, VM = 5, 8, 9, 10, 11, 12, 13
_MIGHT_TRANSFER = (VANILLA, MPI, PARALLEL, JAVA, VM)
_DEFERRAL_ATTRS = (
    "CronMinute",
    "CronHour",
    "CronDayOfMonth",
    "CronMonth",
    "CronDayOfWeek",
    "DeferralTime",
)
_OPSYS_REFS = (
    "opsys",
    "opsysandver",
    "opsyslongname",
    "opsysshortname",
    "opsysname",
    "opsyslegacy",
)


def _file_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _url_method(name: str) -> str | None:
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", name)
    return match.group(1) if match else None


def set_requirements(b: JobBuilder) -> None:
    """The Requirements expression: the user's, extended with HTCondor's default clauses."""
    ad, u, cfg = b.ad, b.universe, b.config
    user = b.p("requirements")
    answer = f"({user})" if user else ""
    if b.p("MY.Requirements") is not None:
        if user:
            b.warnings.append("Use of MY.Requirements or +Requirements  overrides requirements.")
        return
    if u.number == GRID and (
        u.grid_type.lower() != "condor" or not cfg.submit_generate_condor_c_requirements
    ):
        b.expr("Requirements", answer or "TRUE")
        return
    if answer and not _classad.parses(answer):
        raise SubmitError(f"Parse error in expression: \n\tRequirements = {answer}\n\t")
    refs = (
        _classad.external_refs(answer, {"RequestMemory": 0, "VM_CkptMac": ""}) if answer else set()
    )
    checks_arch = "arch" in refs
    checks_opsys = u.docker or u.container or any(r in refs for r in _OPSYS_REFS)
    parts: list[str] = [answer] if answer else []

    def add(clause: str) -> None:
        if parts:
            parts.append(" && ")
        parts.append(clause)

    arch_clause = f'(TARGET.Arch == "{cfg.arch}")'
    if u.number == JAVA:
        add("TARGET.HasJava")
    elif u.number == VM:
        if not checks_arch:
            add(arch_clause)
        if "hasvm" not in refs:
            parts.append("&& (TARGET.HasVM =?= true)")
        if "vm_type" not in refs:
            parts.append(" && (TARGET.VM_Type == MY.JobVMType)")
        if "vm_avail_num" not in refs:
            parts.append(" && (TARGET.VM_AvailNum > 0)")
    elif u.docker:
        if not checks_arch:
            add(arch_clause)
        add("TARGET.HasDocker")
        network = ad.string("DockerNetworkType")
        if network and network not in ("host", "none", "nat"):
            parts.append("&& StringListMember(My.DockerNetworkType, TARGET.DockerNetworks)")
    elif u.container:
        if not checks_arch:
            add(arch_clause)
        add("TARGET.HasContainer")
        image = ad.string("ContainerImage")
        if "DockerImage" in ad or (image or "").startswith("docker:"):
            parts.append("&& TARGET.HasDockerURL")
        elif image is not None:
            parts.append(
                "&& TARGET.HasSIF" if image.endswith(".sif") else "&& TARGET.HasSandboxImage"
            )
    else:
        if not checks_arch:
            add(arch_clause)
        if not checks_opsys:
            parts.append(f' && (TARGET.OpSys == "{cfg.opsys}")')
    _resource_clauses(b, refs, add)
    if "ToolDaemonCmd" in ad and "hastdp" not in refs:
        add("TARGET.HasTDP")
    if ad.boolean("EncryptExecuteDirectory") and "encryptexecutedirectory" not in refs:
        add("TARGET.HasEncryptExecuteDirectory")
    if u.number == MPI and "hasmpi" not in refs:
        add("TARGET.HasMPI")
    if u.number in _MIGHT_TRANSFER:
        _transfer_clause(b, refs, parts)
    if any(a in ad for a in _DEFERRAL_ATTRS):
        if u.number != LOCAL:
            add("TARGET.HasJobDeferral")
        if "ScheddInterval" not in ad:
            ad["ScheddInterval"] = cfg.schedd_interval
        add(
            "(((time() + ScheddInterval) >= (DeferralTime - DeferralPrepTime)) && "
            "(time() < (DeferralTime + DeferralWindow)))"
        )
    if ad.boolean("WantFTOnCheckpoint") and "hasselfcheckpointtransfers" not in refs:
        add("TARGET.HasSelfCheckpointTransfers")
    _cuda(b, parts)
    b.expr("Requirements", "".join(parts))


def _resource_clauses(b: JobBuilder, refs: set[str], add: Callable[[str], None]) -> None:
    ad, u = b.ad, b.universe
    if "disk" not in refs:
        disk = ad.number("RequestDisk")
        if "RequestDisk" in ad:
            if disk is None or disk > 0:
                add("(TARGET.Disk >= RequestDisk)")
        else:
            add(
                "(TARGET.TotalDisk >= DiskUsage)"
                if u.number == VM
                else "(TARGET.Disk >= DiskUsage)"
            )
    elif u.number != VM and "RequestDisk" in ad:
        add("(TARGET.Disk >= RequestDisk)")
    if u.number == VM:
        if (ad.string("JobVMType") or "").lower() != "xen":
            add("(TARGET.TotalMemory >= MY.JobVMMemory)")
        if "vm_memory" not in refs:
            add("(TARGET.VM_Memory >= MY.JobVMMemory)")
        if ad.boolean("JobVMHardwareVT") and "vm_hardware_vt" not in refs:
            add("TARGET.VM_HardwareVT")
        if ad.boolean("JobVMNetworking"):
            if "vm_networking" not in refs:
                add("TARGET.VM_Networking")
            if "JobVMNetworkingType" in ad:
                add('stringListIMember(JobVMNetworkingType,TARGET.VM_Networking_Types,",")')
    elif "RequestMemory" in ad:
        memory = ad.number("RequestMemory")
        if memory is None or memory > 1.0:
            add("(TARGET.Memory >= RequestMemory)")
    if u.number != GRID and "cpus" not in refs and "RequestCpus" in ad:
        cpus = ad.number("RequestCpus")
        if cpus is None or cpus > 1.0:
            add("(TARGET.Cpus >= RequestCpus)")
    _custom_resources(b, refs, add)


def _custom_resources(b: JobBuilder, refs: set[str], add: Callable[[str], None]) -> None:
    tags = sorted(
        (n for n in b.ad if n.lower().startswith("request") and len(n) >= 9 and n[7] != "_"),
        key=str.lower,
    )
    for attr in tags:
        if attr.lower() in ("requestcpus", "requestdisk", "requestmemory"):
            continue
        tag = attr[len("Request") :]
        if tag.lower() in refs:
            continue
        value = b.ad.evaluated(attr)
        if isinstance(value, str):
            if value:
                add(f"regexp({attr}, TARGET.{tag})")
            continue
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (numeric or _classad.is_undefined(value)):
            continue
        if numeric and value <= 0:
            continue
        if f"Require{tag}" in b.ad:
            add(f"(countMatches(MY.Require{tag},TARGET.Available{tag}) >= {attr})")
        else:
            add(f"(TARGET.{tag} >= {attr})")


def _transfer_clause(b: JobBuilder, refs: set[str], parts: list[str]) -> None:
    ad = b.ad
    domain = "(TARGET.FileSystemDomain == MY.FileSystemDomain)"
    checks_fsdomain = "filesystemdomain" in refs
    checks_transfer = "hasfiletransfer" in refs or "hasjobtransferplugins" in refs
    crypt = ""
    crypt_attrs = (
        "EncryptInputFiles",
        "EncryptOutputFiles",
        "DontEncryptInputFiles",
        "DontEncryptOutputFiles",
    )
    if "hasperfileencryption" not in refs and any(a in ad for a in crypt_attrs):
        crypt = " && TARGET.HasPerFileEncryption"
    should = ad.string("ShouldTransferFiles") or "IF_NEEDED"
    if should == "NO":
        if not checks_fsdomain:
            parts.append(" && " + domain)
        return
    if checks_transfer:
        return
    join, close = " && (", ")"
    if should == "IF_NEEDED" and not checks_fsdomain:
        parts.append(join + domain)
        join, close = " || (", "))"
    plugins = ad.string("TransferPlugins") or ""
    check = "TARGET.HasJobTransferPlugins" if plugins else "TARGET.HasFileTransfer"
    parts.append(join + check + crypt)
    if (
        "TransferCheckpoint" in ad
        or ad.boolean("PreserveRelativePaths")
        or (ad.string("WhenToTransferOutput") or "") == "ON_SUCCESS"
    ):
        parts.append(' && versioncmp( split(TARGET.CondorVersion)[1], "8.9.7" ) >= 0')
    supplied: set[str] = set()
    for plug in plugins.split(";"):
        if "=" in plug:
            supplied.update(
                m.strip().upper() for m in plug.split("=", 1)[0].split(",") if m.strip()
            )
    urls = _file_list(ad.string("TransferInput") or "")
    urls.append(ad.string("OutputDestination") or "")
    for remap in (ad.string("TransferOutputRemaps") or "").split(";"):
        if "=" in remap:
            urls.append(remap.split("=", 1)[1].strip())
    methods: set[str] = set()
    for url in urls:
        method = _url_method(url)
        if method and method.upper() not in supplied:
            methods.add(method)
    if "hasfiletransferpluginmethods" not in refs:
        parts.extend(
            f' && stringListIMember("{method}",TARGET.HasFileTransferPluginMethods)'
            for method in sorted(methods, key=str.lower)
        )
    if methods:
        ad["WantTransferPluginMethods"] = ",".join(sorted(methods, key=str.lower))
    parts.append(close)


def _cuda(b: JobBuilder, parts: list[str]) -> None:
    cuda = b.ad.string("CUDAVersion")
    if cuda is None:
        return
    match = re.fullmatch(r"(\d+)(?:\.(\d+))?", cuda)
    if not match:
        raise SubmitError(
            "require_cuda_version must be of the form 'x' or 'x.y', where x and y are positive integers."
        )
    major = int(match.group(1))
    if match.group(2):
        version = major * 1000 + int(match.group(2)) % 100
    else:
        version = major * 1000 if major < 1000 else major
    b.ad["CUDAVersion"] = version
    parts.append("&& CUDAVersion <= TARGET.CUDAMaxSupportedVersion")
