"""What this host offers and what it is: cpus, memory, disk, GPUs, OS and architecture.

Everything here reads the machine (files under /proc and /etc, `nvidia-smi`) and so
blocks: call `detect` off the event loop, once at start-up.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid.startd._config import StartdConfig
from htgrid.startd._states import Resources

__all__ = ["Gpu", "MachineInfo", "detect", "detect_gpus", "os_release"]

# /etc/os-release IDs as HTCondor spells OpSysName (OpSysAndVer = name + major version).
_OS_NAMES: Final = {
    "ubuntu": "Ubuntu",
    "debian": "Debian",
    "almalinux": "AlmaLinux",
    "rocky": "Rocky",
    "centos": "CentOS",
    "rhel": "RedHat",
    "fedora": "Fedora",
    "amzn": "AmazonLinux",
    "opensuse-leap": "openSUSE",
    "sles": "SLES",
    "arch": "ArchLinux",
}
_ARCHES: Final = {"x86_64": "X86_64", "amd64": "X86_64", "i686": "INTEL", "arm64": "aarch64"}
_NVIDIA_SMI_TIMEOUT: Final = 20.0


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as nvidia-smi lists it; `id` is HTCondor's short name (GPU-xxxxxxxx)."""

    id: str
    index: int
    name: str
    memory_mb: int


@dataclass(frozen=True, slots=True)
class MachineInfo:
    """The host as the slot ads describe it."""

    hostname: str
    arch: str
    opsys: str
    opsys_name: str
    opsys_major_ver: int
    opsys_ver: int
    opsys_long_name: str
    detected: Resources  # what the host has
    offered: Resources  # what the partitionable slot offers (configuration may lower it)
    gpus: tuple[Gpu, ...] = ()

    @property
    def opsys_and_ver(self) -> str:
        return f"{self.opsys_name}{self.opsys_major_ver}" if self.opsys_major_ver else ""


def os_release(path: Path = Path("/etc/os-release")) -> tuple[str, int, int, str]:
    """(OpSysName, OpSysMajorVer, OpSysVer, OpSysLongName) from os-release."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            key, eq, value = line.partition("=")
            if eq:
                fields[key.strip()] = value.strip().strip("\"'")
    ident = fields.get("ID", "linux").lower()
    name = _OS_NAMES.get(ident, ident.capitalize())
    version = fields.get("VERSION_ID", "")
    parts = [p for p in version.split(".") if p.isdigit()]
    major = int(parts[0]) if parts else 0
    minor = int(parts[1]) if len(parts) > 1 else 0
    return name, major, major * 100 + minor, fields.get("PRETTY_NAME", name)


def detect_gpus() -> tuple[Gpu, ...]:
    """The GPUs nvidia-smi reports (none when it is not on PATH or fails)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return ()
    try:
        done = subprocess.run(
            [tool, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    gpus = []
    for line in done.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 4 or not fields[0].isdigit():
            continue
        uuid = fields[1].removeprefix("GPU-")
        memory = int(float(fields[3])) if fields[3].replace(".", "", 1).isdigit() else 0
        gpus.append(Gpu(f"GPU-{uuid[:8]}", int(fields[0]), fields[2], memory))
    return tuple(gpus)


def _memory_mb() -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))


def detect(config: StartdConfig) -> MachineInfo:
    """The host, with what the configuration offers of it (blocking)."""
    cpus = len(os.sched_getaffinity(0)) or os.cpu_count() or 1
    memory = _memory_mb()
    config.make_execute_dir()
    disk = shutil.disk_usage(config.execute_dir).free // 1024
    gpus = detect_gpus() if config.gpu_discovery else ()
    ids = tuple(g.id for g in gpus)
    detected = Resources(cpus, memory, disk, ids)
    offered = Resources(
        config.num_cpus if config.num_cpus is not None else cpus,
        config.memory if config.memory is not None else memory,
        config.disk if config.disk is not None else disk,
        ids,
    )
    name, major, ver, long_name = os_release()
    machine = platform.machine()
    return MachineInfo(
        hostname=config.network_hostname or socket.gethostname(),
        arch=_ARCHES.get(machine.lower(), machine),
        opsys="LINUX" if platform.system() == "Linux" else platform.system().upper(),
        opsys_name=name,
        opsys_major_ver=major,
        opsys_ver=ver,
        opsys_long_name=long_name,
        detected=detected,
        offered=offered,
        gpus=gpus,
    )
