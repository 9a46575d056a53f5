"""The EC2 GAHP server: HTCondor's EC2 GAHP commands, answered with boto3.

The commands, their arguments and result lines are `htgrid.gahp.commands.ec2`'s, which
the grid manager writes and reads with the same values; STATISTICS (synchronous) answers
`S <requests> <distinct> <throttled> 0`.

EC2_VM_START is idempotent per client token: the token goes to RunInstances as ClientToken
and onto the instance as the tag htcondor:ClientToken, and before starting, the GAHP looks
for an instance with that tag (lookups of concurrent starts share one DescribeInstances).
So repeating a start after a crash returns the first instance, even where the server
ignores ClientToken (moto). EC2_VM_STATUS_ALL with the filter `client-token <token>`
finds an instance by the same tag.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from htgrid import __version__
from htgrid.backends.ec2 import _calls as calls
from htgrid.backends.ec2._account import KeyFiles
from htgrid.backends.ec2._aws import ClientPool, ClientSettings, Counters, Spacer, Workers
from htgrid.backends.ec2._errors import Ec2Error, translate
from htgrid.backends.ec2._lookup import Batcher
from htgrid.backends.ec2._requests import parse_bulk_start, parse_vm_start, status_filters
from htgrid.backends.ec2._results import (
    bulk_query_fields,
    spot_fields,
    status_all_fields,
    status_fields,
)
from htgrid.gahp import (
    Call,
    Clock,
    Command,
    GahpServer,
    GahpVersion,
    ReplyCode,
    SystemClock,
    decode_request,
)
from htgrid.gahp.commands import Spec, ec2
from htgrid.gahp.commands.ec2 import Target

__all__ = ["VERSION", "Ec2Gahp", "Ec2Options"]

log = logging.getLogger("htgrid.gahp.ec2")

VERSION = GahpVersion(__version__, datetime.date(2026, 11, 21), "htgrid EC2 GAHP")

_T = TypeVar("_T")
Handler = Callable[[Call], Coroutine[Any, Any, Sequence[str]]]

_DONE = ec2.Done().fields()

# Worker groups: starts, stops and status questions never wait for each other's threads.
START, STOP, STATUS, LOOKUP = "start", "stop", "status", "lookup"


@dataclass(frozen=True, slots=True)
class Ec2Options:
    """How an EC2 GAHP server runs."""

    #: AWS calls at once for starts, and (separately) for stops and other changes.
    max_workers: int = 10
    #: AWS calls at once for status questions (one per resource and poll is the norm).
    status_workers: int = 2
    #: Requests of one command held at once; one more is refused "F Threads limit reached".
    accept_limit: int = 1000
    #: Region for service URLs whose host does not name one (private clouds, moto).
    region: str = "us-east-1"
    #: Seconds between the starts of two calls to one service and key (0: no spacing).
    rate_limit: float = 0.0
    client: ClientSettings = field(default_factory=ClientSettings)


class Ec2Gahp:
    """The EC2 GAHP's commands over a boto3 client pool and worker threads."""

    def __init__(self, options: Ec2Options | None = None, *, clock: Clock | None = None) -> None:
        self.options = options = options or Ec2Options()
        self.counters = Counters()
        self._keys = KeyFiles(options.region)
        self._pool = ClientPool(options.client, self.counters)
        self._workers = Workers(
            {
                START: options.max_workers,
                STOP: options.max_workers,
                STATUS: options.status_workers,
                LOOKUP: 2,
            }
        )
        self._spacer = Spacer(options.rate_limit, clock or SystemClock())
        self._tokens: Batcher[Target, list[str]] = Batcher()
        # One start per client token at a time: a repeat waits and then finds the first.
        self._locks: weakref.WeakValueDictionary[tuple[Target, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def server(self) -> GahpServer:
        """A GahpServer serving this GAHP's commands (and STATISTICS)."""
        start_check = ec2.NEED_CHECK_VM_START
        table: list[tuple[Spec, Handler, str | None]] = [
            (ec2.VM_START, self.vm_start, start_check),
            (ec2.VM_STOP, self.vm_stop, None),
            (ec2.VM_STATUS, self.vm_status, None),
            (ec2.VM_STATUS_ALL, self.vm_status_all, None),
            (ec2.VM_SERVER_TYPE, self.server_type, None),
            (ec2.VM_CREATE_KEYPAIR, self.create_keypair, "NEED_CHECK_SSHKEY"),
            (ec2.VM_DESTROY_KEYPAIR, self.destroy_keypair, None),
            (ec2.VM_ASSOCIATE_ADDRESS, self.associate_address, None),
            (ec2.VM_ATTACH_VOLUME, self.attach_volume, None),
            (ec2.VM_CREATE_TAGS, self.create_tags, None),
            (ec2.VM_START_SPOT, self.spot_start, start_check),
            (ec2.VM_STOP_SPOT, self.spot_stop, None),
            (ec2.VM_STATUS_SPOT, self.spot_status, None),
            (ec2.VM_STATUS_ALL_SPOT, self.spot_status_all, None),
            (ec2.BULK_START, self.bulk_start, "NEED_CHECK_BULK_START"),
            (ec2.BULK_STOP, self.bulk_stop, "NEED_CHECK_BULK_STOP"),
            (ec2.BULK_QUERY, self.bulk_query, None),
        ]
        commands = [
            spec.command(
                _reporting(handler, transport),
                self.options.accept_limit,
                on_error=lambda reason: ec2.Failure("E_INTERNAL", reason).fields(),
            )
            for spec, handler, transport in table
        ]
        return _Ec2Server(VERSION, commands, self.counters)

    def close(self) -> None:
        """Let go of the worker threads."""
        self._workers.close()

    async def _aws(self, group: str, target: Target, fn: Callable[..., _T], *args: Any) -> _T:
        """fn(client, *args) in a worker thread, with the client `target` names."""
        await self._spacer.wait(target.service_url, target.access_key_file)
        return await self._workers.run(group, self._blocking, target, fn, args)

    def _blocking(self, target: Target, fn: Callable[..., _T], args: Sequence[Any]) -> _T:
        # The one boundary where botocore's exceptions become Ec2Errors.
        with translate():
            account = self._keys.account(
                target.service_url, target.access_key_file, target.secret_key_file
            )
            return fn(self._pool.get(account), *args)

    def _lock(self, key: tuple[Target, str]) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    # ---- on-demand instances ------------------------------------------------------------------

    async def vm_start(self, call: Call) -> Sequence[str]:
        """EC2_VM_START: RunInstances, unless the client token already started one."""
        request = parse_vm_start(call.args)
        token = request.client_token
        if token is None:
            return await self._run(request)
        async with self._lock((request.target, token)):
            fetch = functools.partial(self._find_tokens, request.target)
            existing = await self._tokens.find(request.target, token, fetch)
            if existing:
                log.info("client token %s already started %s", token, " ".join(existing))
                return ec2.Done(tuple(existing)).fields()
            return await self._run(request)

    async def _run(self, request: ec2.VmStart) -> Sequence[str]:
        ids = await self._aws(START, request.target, calls.run_instances, request)
        return ec2.Done(tuple(ids)).fields()

    async def _find_tokens(self, target: Target, tokens: Sequence[str]) -> Mapping[str, list[str]]:
        return await self._aws(LOOKUP, target, calls.find_by_tokens, tokens)

    async def vm_stop(self, call: Call) -> Sequence[str]:
        """EC2_VM_STOP: TerminateInstances."""
        ids = [arg for arg in call.args[3:] if arg.upper() != "NULL"]
        await self._aws(STOP, ec2.Target.of(call.args), calls.terminate, ids)
        return _DONE

    async def vm_status(self, call: Call) -> Sequence[str]:
        """EC2_VM_STATUS (deprecated): one instance, by a filtered DescribeInstances."""
        instance_id = call.args[3]
        filters = [{"Name": "instance-id", "Values": [instance_id]}]
        found = await self._aws(STATUS, ec2.Target.of(call.args), calls.describe_instances, filters)
        return ec2.Done(tuple(status_fields(found, instance_id))).fields()

    async def vm_status_all(self, call: Call) -> Sequence[str]:
        """EC2_VM_STATUS_ALL: every instance, from one DescribeInstances."""
        filters = status_filters(call.args)
        found = await self._aws(STATUS, ec2.Target.of(call.args), calls.describe_instances, filters)
        return ec2.Done(tuple(status_all_fields(found))).fields()

    async def server_type(self, call: Call) -> Sequence[str]:
        """EC2_VM_SERVER_TYPE (the grid manager's ping)."""
        kind = await self._aws(STATUS, ec2.Target.of(call.args), calls.query_server_type)
        return ec2.Done((kind,)).fields()

    async def create_keypair(self, call: Call) -> Sequence[str]:
        """EC2_VM_CREATE_KEYPAIR: CreateKeyPair, private key written to a file."""
        name, output = call.args[3], call.args[4]
        await self._aws(START, ec2.Target.of(call.args), calls.create_key_pair, name, output)
        return _DONE

    async def destroy_keypair(self, call: Call) -> Sequence[str]:
        """EC2_VM_DESTROY_KEYPAIR: DeleteKeyPair."""
        await self._aws(STOP, ec2.Target.of(call.args), calls.delete_key_pair, call.args[3])
        return _DONE

    async def associate_address(self, call: Call) -> Sequence[str]:
        """EC2_VM_ASSOCIATE_ADDRESS: AssociateAddress."""
        args = call.args
        await self._aws(STOP, ec2.Target.of(args), calls.associate_address, args[3], args[4])
        return _DONE

    async def attach_volume(self, call: Call) -> Sequence[str]:
        """EC2_VM_ATTACH_VOLUME: AttachVolume."""
        args = call.args
        await self._aws(STOP, ec2.Target.of(args), calls.attach_volume, args[3], args[4], args[5])
        return _DONE

    async def create_tags(self, call: Call) -> Sequence[str]:
        """EC2_VM_CREATE_TAGS: CreateTags on one resource."""
        request = ec2.CreateTags.of(call.args)
        tags = list(request.tags)
        await self._aws(STOP, request.target, calls.create_tags, request.resource_id, tags)
        return _DONE

    # ---- spot instances -------------------------------------------------------------------------

    async def spot_start(self, call: Call) -> Sequence[str]:
        """EC2_VM_START_SPOT: RequestSpotInstances, unless the token has a live request."""
        request = ec2.SpotStart.of(call.args)
        token = request.client_token
        if token is None:
            return await self._request_spot(request)
        async with self._lock((request.target, "spot " + token)):
            existing = await self._aws(LOOKUP, request.target, calls.find_spot_request, token)
            if existing is not None:
                return ec2.Done((existing,)).fields()
            return await self._request_spot(request)

    async def _request_spot(self, request: ec2.SpotStart) -> Sequence[str]:
        request_id = await self._aws(START, request.target, calls.request_spot, request)
        return ec2.Done((request_id,)).fields()

    async def spot_stop(self, call: Call) -> Sequence[str]:
        """EC2_VM_STOP_SPOT: CancelSpotInstanceRequests."""
        await self._aws(STOP, ec2.Target.of(call.args), calls.cancel_spot, call.args[3])
        return _DONE

    async def spot_status(self, call: Call) -> Sequence[str]:
        """EC2_VM_STATUS_SPOT (deprecated): one spot instance request."""
        found = await self._aws(STATUS, ec2.Target.of(call.args), calls.describe_spot, call.args[3])
        return ec2.Done(tuple(spot_fields(found))).fields()

    async def spot_status_all(self, call: Call) -> Sequence[str]:
        """EC2_VM_STATUS_ALL_SPOT: every spot instance request, from one call."""
        found = await self._aws(STATUS, ec2.Target.of(call.args), calls.describe_spot)
        return ec2.Done(tuple(spot_fields(found))).fields()

    # ---- spot fleets ----------------------------------------------------------------------------

    async def bulk_start(self, call: Call) -> Sequence[str]:
        """EC2_BULK_START: RequestSpotFleet."""
        request = parse_bulk_start(call.args)
        fleet_id = await self._aws(START, request.target, calls.request_fleet, request)
        return ec2.Done((fleet_id,)).fields()

    async def bulk_stop(self, call: Call) -> Sequence[str]:
        """EC2_BULK_STOP: CancelSpotFleetRequests, terminating its instances."""
        await self._aws(STOP, ec2.Target.of(call.args), calls.cancel_fleet, call.args[3])
        return _DONE

    async def bulk_query(self, call: Call) -> Sequence[str]:
        """EC2_BULK_QUERY: DescribeSpotFleetRequests."""
        found = await self._aws(STATUS, ec2.Target.of(call.args), calls.describe_fleets)
        return ec2.Done(tuple(bulk_query_fields(found))).fields()


def _reporting(handler: Handler, transport_code: str | None) -> Handler:
    """`handler` with Ec2Errors turned into the `1 <code> <message>` result."""

    async def run(call: Call) -> Sequence[str]:
        try:
            return await handler(call)
        except Ec2Error as err:
            log.info("%s %d failed: %s", call.command, call.request_id, err.message)
            return err.fields(transport_code)

    return run


class _Ec2Server(GahpServer):
    """GahpServer plus STATISTICS, a synchronous command only the EC2 GAHP has.

    The grid manager's EC2 resource sends it before every status poll and expects
    `S <NumRequests> <NumDistinctRequests> <NumRequestsExceedingLimit> <NumExpiredSignatures>`.
    """

    def __init__(
        self, version: GahpVersion, commands: Sequence[Command], counters: Counters
    ) -> None:
        super().__init__(version, commands)
        self._counters = counters

    def command_names(self) -> list[str]:
        return sorted([*super().command_names(), "STATISTICS"])

    def _dispatch(self, line: bytes) -> bytes:
        # Cheap test first: every other request goes straight to the common dispatcher.
        if line[:10].upper() != b"STATISTICS":
            return super()._dispatch(line)
        request = decode_request(line)
        if request.command != "STATISTICS":
            return super()._dispatch(line)
        if request.args:
            return self._reply(ReplyCode.ERROR, f"expected 0 parameters, {len(request.args)} found")
        return self._reply(ReplyCode.SUCCESS, *self._counters.statistics())
