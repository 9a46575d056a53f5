"""Settings that condor_submit would read from the HTCondor configuration."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SubmitConfig"]

_DEFAULT_REQUEST_MEMORY = (
    "ifthenelse(MemoryUsage =!= undefined,MemoryUsage,(ImageSize + 1023) / 1024)"
)


@dataclass(frozen=True, slots=True)
class SubmitConfig:
    """The configuration values that shape job ads (HTCondor's defaults, Linux x86_64).

    `filesystem_domain` defaults to the host name in HTCondor; pass it in
    explicitly, so that nothing here reads the machine.
    """

    arch: str = "X86_64"
    opsys: str = "LINUX"
    opsys_and_ver: str = ""
    opsys_major_ver: str = ""
    opsys_ver: str = ""
    spool: str = ""
    filesystem_domain: str = "localhost"
    uid_domain: str = "localhost"
    condor_version: str = "$CondorVersion: 24.0.24 2026-09-24 BuildID: htgrid $"
    condor_platform: str = "$CondorPlatform: X86_64-htgrid $"
    submit_method: int | None = 0
    job_default_lease_duration: str | None = "2400"
    job_default_request_cpus: str | None = "1"
    job_default_request_disk: str | None = "DiskUsage"
    job_default_request_memory: str | None = _DEFAULT_REQUEST_MEMORY
    job_default_notification: str | None = None
    default_universe: str | None = None
    nice_user_accounting_group_name: str = "nice-user"
    schedd_interval: int = 300
    submit_generate_condor_c_requirements: bool = True
    x509_user_proxy: str | None = None

    def macro_defaults(self) -> dict[str, str]:
        """The config-derived entries of the submit macro defaults table."""
        return {
            "ARCH": self.arch,
            "OPSYS": self.opsys,
            "OPSYSANDVER": self.opsys_and_ver,
            "OPSYSMAJORVER": self.opsys_major_ver,
            "OPSYSVER": self.opsys_ver,
            "SPOOL": self.spool,
            "IsLinux": "1" if self.opsys.upper() == "LINUX" else "0",
            "IsWindows": "1" if self.opsys.upper() == "WINDOWS" else "0",
        }
