"""The Azure GAHP server: HTCondor's Azure GAHP commands, answered through the Azure SDK.

The commands, their arguments and result lines are `htgrid.gahp.commands.azure`'s, which
the grid manager reads with the same values; an error is one field (see _errors).
AZURE_VM_LIST makes one paged list call however many VMs there are: the subscription's
VMs, or one group's.

SDK calls block, so each request runs in a worker thread (a pool sized by the commands'
limits) and gets `timeout` seconds; past that the result is a transient Timeout error
(the thread finishes its Azure calls on its own).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from htgrid import __version__
from htgrid.backends.azure._args import (
    parse_list,
    parse_scale,
    parse_target,
    parse_vm_create,
    parse_vmss_create,
)
from htgrid.backends.azure._errors import AzureError, AzureServiceError, translate_errors
from htgrid.backends.azure._session import ClientOptions, Session, SessionCache
from htgrid.backends.azure._vm import create_vm, delete_vm, list_vms, ping
from htgrid.backends.azure._vmss import create_vmss, delete_vmss, power_vmss, scale_vmss
from htgrid.gahp import Call, Command, GahpServer, GahpVersion
from htgrid.gahp.commands import Spec, azure

__all__ = ["VERSION", "AzureGahp", "AzureOptions"]

VERSION = GahpVersion(__version__, datetime.date(2026, 11, 21), "htgrid Azure GAHP")

Operation = Callable[[Session, tuple[str, ...]], Sequence[str]]


@dataclass(frozen=True, slots=True)
class AzureOptions:
    """How an Azure GAHP server runs."""

    clients: ClientOptions = field(default_factory=ClientOptions)
    #: Seconds one request may take (under the grid manager's 600 s call timeout).
    timeout: float = 540.0
    #: How many of each kind of request run at once; one more gets `F Threads limit reached`.
    create_workers: int = 20
    delete_workers: int = 20
    list_workers: int = 4
    ping_workers: int = 4
    vmss_workers: int = 8


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


_DONE = azure.Done().fields()


def _ping(session: Session, args: tuple[str, ...]) -> Sequence[str]:
    ping(session)
    return _DONE


def _vm_create(session: Session, args: tuple[str, ...]) -> Sequence[str]:
    vm_id, address = create_vm(session, parse_vm_create(args), _now())
    return azure.VmCreated(vm_id, address).fields()


def _vm_delete(session: Session, args: tuple[str, ...]) -> Sequence[str]:
    delete_vm(session, parse_target(args))
    return _DONE


def _vm_list(session: Session, args: tuple[str, ...]) -> Sequence[str]:
    return azure.VmList(tuple(list_vms(session, parse_list(args)))).fields()


def _vmss_create(session: Session, args: tuple[str, ...]) -> Sequence[str]:
    create_vmss(session, parse_vmss_create(args), _now())
    return _DONE


def _vmss_delete(session: Session, args: tuple[str, ...]) -> Sequence[str]:
    delete_vmss(session, parse_target(args))
    return _DONE


def _vmss_scale(session: Session, args: tuple[str, ...]) -> Sequence[str]:
    scale_vmss(session, parse_scale(args))
    return _DONE


def _vmss_power(action: str) -> Operation:
    def run(session: Session, args: tuple[str, ...]) -> Sequence[str]:
        power_vmss(session, parse_target(args), action)
        return _DONE

    return run


class AzureGahp:
    """The Azure GAHP's commands, each run in a worker thread with a deadline."""

    def __init__(self, options: AzureOptions | None = None) -> None:
        self.options = options or AzureOptions()
        self._sessions = SessionCache(self.options.clients)
        opts = self.options
        threads = (
            opts.create_workers
            + opts.delete_workers
            + opts.list_workers
            + opts.ping_workers
            + 2 * opts.vmss_workers
        )
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="azure-gahp")

    def server(self) -> GahpServer:
        """A GahpServer serving the Azure commands."""
        opts = self.options

        def command(spec: Spec, what: str, op: Operation, workers: int) -> Command:
            async def handler(call: Call) -> Sequence[str]:
                return await self.run(call, what, op)

            def on_error(reason: str) -> Sequence[str]:
                # Only a bug in this GAHP gets here; still one well-formed error field.
                return [AzureError(reason, code="InternalError").error_string(what)]

            return spec.command(handler, workers, on_error=on_error)

        vmss = opts.vmss_workers
        return GahpServer(
            VERSION,
            [
                command(azure.PING, "Error pinging Azure", _ping, opts.ping_workers),
                command(azure.VM_CREATE, "Error creating VM", _vm_create, opts.create_workers),
                command(azure.VM_DELETE, "Error deleting VM", _vm_delete, opts.delete_workers),
                command(azure.VM_LIST, "Error listing VMs", _vm_list, opts.list_workers),
                command(azure.VMSS_CREATE, "Error creating VMSS", _vmss_create, vmss),
                command(azure.VMSS_DELETE, "Error deleting VMSS", _vmss_delete, vmss),
                command(azure.VMSS_SCALE, "Error scaling VMSS", _vmss_scale, vmss),
                command(azure.VMSS_START, "Error starting VMSS", _vmss_power("start"), vmss),
                command(azure.VMSS_STOP, "Error stopping VMSS", _vmss_power("deallocate"), vmss),
                command(azure.VMSS_RESTART, "Error restarting VMSS", _vmss_power("restart"), vmss),
            ],
        )

    async def run(self, call: Call, what: str, op: Operation) -> Sequence[str]:
        """Run `op` in a worker thread; its result fields, or one error field."""
        auth_file, subscription, *rest = call.args
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(
            self._pool, self._invoke, op, auth_file, subscription, tuple(rest)
        )
        try:
            return await asyncio.wait_for(work, self.options.timeout)
        except AzureError as err:
            return [err.error_string(what)]
        except TimeoutError:
            late = AzureServiceError(
                f"no answer in {self.options.timeout:g} s", code="Timeout", transient=True
            )
            return [late.error_string(what)]

    def _invoke(
        self, op: Operation, auth_file: str, subscription: str, args: tuple[str, ...]
    ) -> Sequence[str]:
        # The one boundary where azure-core's exceptions become htgrid's.
        with translate_errors():
            return op(self._sessions.get(auth_file, subscription), args)

    async def serve_stdio(self) -> None:
        """Serve on stdin and stdout until QUIT or EOF."""
        try:
            await self.server().serve_stdio()
        finally:
            self.close()

    def close(self) -> None:
        """Stop taking work; threads still talking to Azure are left to finish."""
        self._pool.shutdown(wait=False, cancel_futures=True)
