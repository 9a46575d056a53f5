"""The Azure GAHP's commands (HTCondor's `azure_gahp_protocol.txt`), as the grid manager
sends them and the Azure GAHP server answers them.

Every request is `CMD <id> <auth-file> <subscription> ...`; every result line starts
`<id> NULL` on success and is `<id> <error>` on failure, <error> one field (`Failure`):

    AZURE_PING <id> <auth> <sub>                                  <id> NULL
    AZURE_VM_CREATE <id> <auth> <sub> name= location= size= image= [key=value ...]
                                                                  <id> NULL <vmId> <ip|NULL>
    AZURE_VM_DELETE <id> <auth> <sub> [<group>] <name>            <id> NULL
    AZURE_VM_LIST <id> <auth> <sub> [<group> [<name>]] [tag=<t>[=<v>]]...
                                   <id> NULL <n> <name> <status> ... (n pairs)
    AZURE_VMSS_CREATE <id> <auth> <sub> (VM_CREATE's keys) nodecount= [schedule=]
                      [keyvaultName= vaultKey= [keyvaultRG=] [vaultSecretFile=] [vaultSecretPath=]]
                                                                  <id> NULL
    AZURE_VMSS_DELETE|START|STOP|RESTART <id> <auth> <sub> [<group>] <name>     <id> NULL
    AZURE_VMSS_SCALE <id> <auth> <sub> name=<n> nodecount=<k> | [<group>] <name> <k>
                                                                  <id> NULL

A VM's status is its instance-view codes joined by commas, e.g.
`ProvisioningState/succeeded,PowerState/running`; the grid manager keeps what follows the
last `/`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from htgrid.gahp._codec import null, unnull
from htgrid.gahp._errors import GahpProtocolError
from htgrid.gahp.commands import Spec

__all__ = [
    "PING",
    "VMSS_CREATE",
    "VMSS_DELETE",
    "VMSS_RESTART",
    "VMSS_SCALE",
    "VMSS_START",
    "VMSS_STOP",
    "VM_CREATE",
    "VM_DELETE",
    "VM_LIST",
    "Done",
    "Failure",
    "VmCreated",
    "VmList",
    "account",
    "vm_create_args",
]

PING = Spec("AZURE_PING", 2, variadic=True)
VM_CREATE = Spec("AZURE_VM_CREATE", 2, variadic=True)
VM_DELETE = Spec("AZURE_VM_DELETE", 3, variadic=True)
VM_LIST = Spec("AZURE_VM_LIST", 2, variadic=True)
VMSS_CREATE = Spec("AZURE_VMSS_CREATE", 2, variadic=True)
VMSS_DELETE = Spec("AZURE_VMSS_DELETE", 3, variadic=True)
VMSS_SCALE = Spec("AZURE_VMSS_SCALE", 3, variadic=True)
VMSS_START = Spec("AZURE_VMSS_START", 3, variadic=True)
VMSS_STOP = Spec("AZURE_VMSS_STOP", 3, variadic=True)
VMSS_RESTART = Spec("AZURE_VMSS_RESTART", 3, variadic=True)

_SUCCESS = "NULL"
_MESSAGE_LIMIT = 1000
_FAILURE = re.compile(
    r"(?P<what>[^:]+): (?P<code>\S+) \(HTTP (?P<status>\d+|-), "
    r"(?P<kind>transient|permanent)\): (?P<message>.*)",
    re.DOTALL,
)


def account(auth_file: str, subscription: str) -> tuple[str, str]:
    """The two arguments every request starts with."""
    return (auth_file, subscription)


def vm_create_args(name: str, options: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """AZURE_VM_CREATE's `key=value` arguments after the account: the VM's name first."""
    return (f"name={name}", *(f"{key}={value}" for key, value in options))


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed request's one field: what failed, the provider's code, the HTTP status (None
    when no response came), whether trying later may work, and the message:

        Error creating VM: QuotaExceeded (HTTP 409, permanent): Operation could not be ...
        Error listing VMs: TooManyRequests (HTTP 429, transient): Rate limit exceeded
    """

    what: str
    code: str
    status: int | None
    transient: bool
    message: str

    def text(self) -> str:
        status = "-" if self.status is None else str(self.status)
        kind = "transient" if self.transient else "permanent"
        message = " ".join(self.message.split())[:_MESSAGE_LIMIT]
        return f"{self.what}: {self.code} (HTTP {status}, {kind}): {message}"

    @classmethod
    def of(cls, text: str) -> Failure | None:
        """The parts of an error field the Azure GAHP wrote; None for any other text."""
        match = _FAILURE.fullmatch(text)
        if match is None:
            return None
        status = match["status"]
        return cls(
            what=match["what"],
            code=match["code"],
            status=None if status == "-" else int(status),
            transient=match["kind"] == "transient",
            message=match["message"],
        )


def is_transient(error: str) -> bool:
    """Whether an error field says trying later may work."""
    failure = Failure.of(error)
    return failure is not None and failure.transient


def _error(fields: Sequence[str], command: Spec) -> str | None:
    if fields[:1] == (_SUCCESS,):
        return None
    return fields[0] if fields else f"{command.name} gave no result"


@dataclass(frozen=True, slots=True)
class Done:
    """The result of a request that answers nothing more than success (NULL) or its error."""

    error: str | None = None

    def fields(self) -> tuple[str, ...]:
        return (_SUCCESS,) if self.error is None else (self.error,)

    @classmethod
    def of(cls, fields: Sequence[str]) -> Done:
        return cls(_error(fields, PING))


@dataclass(frozen=True, slots=True)
class VmCreated:
    """AZURE_VM_CREATE's result: the VM's id and public IP address (None: none), or an error."""

    vm_id: str | None = None
    address: str | None = None
    error: str | None = None

    def fields(self) -> tuple[str, ...]:
        if self.error is not None:
            return (self.error,)
        return (_SUCCESS, self.vm_id or "", null(self.address))

    @classmethod
    def of(cls, fields: Sequence[str]) -> VmCreated:
        error = _error(fields, VM_CREATE)
        if error is None and len(fields) < 2:
            error = f"{VM_CREATE.name} gave no VM id"
        if error is not None:
            return cls(error=error)
        return cls(fields[1], unnull(fields[2]) if len(fields) > 2 else None)


@dataclass(frozen=True, slots=True)
class VmList:
    """AZURE_VM_LIST's result: (name, status) of every VM listed, or an error."""

    vms: tuple[tuple[str, str], ...] = ()
    error: str | None = None

    def by_name(self) -> Mapping[str, str]:
        """The statuses by lower-cased VM name (Azure's names are not case-sensitive)."""
        return {name.lower(): status for name, status in self.vms}

    def fields(self) -> tuple[str, ...]:
        if self.error is not None:
            return (self.error,)
        return (_SUCCESS, str(len(self.vms)), *(word for vm in self.vms for word in vm))

    @classmethod
    def of(cls, fields: Sequence[str]) -> VmList:
        """GahpProtocolError if the count and the pairs disagree."""
        error = _error(fields, VM_LIST)
        if error is not None:
            return cls(error=error)
        if len(fields) < 2 or not fields[1].isdigit():
            raise GahpProtocolError(f"bad {VM_LIST.name} result: {' '.join(fields)[:200]!r}")
        count, pairs = int(fields[1]), fields[2:]
        if len(pairs) != 2 * count:
            raise GahpProtocolError(
                f"{VM_LIST.name} promised {count} VMs and gave {len(pairs) // 2}"
            )
        return cls(tuple((pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)))
