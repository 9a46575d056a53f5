"""The EC2 GAHP server: HTCondor's EC2 GAHP commands, answered with boto3.

Every request is `CMD <id> <service-url> <access-key-file> <secret-key-file> ...`; every
result is `<id> 0 ...` or `<id> 1 <error-code> <error-message>` (see `_errors`).

    EC2_VM_START <16 fixed args> <sg-name>* NULL <sg-id>* NULL (<param> <value>)* NULL
                                                  -> 0 <instance-id>+
    EC2_VM_STOP <instance-id>+                    -> 0
    EC2_VM_STATUS <instance-id>                   -> 0 [<id> <state> <ami> <reason> ...]
    EC2_VM_STATUS_ALL [<filter-name> <value>]     -> 0 (<id> <state> <client-token> <keypair>
                                                     <reason> <dns> <fleet-id> <annex>)*
    EC2_VM_SERVER_TYPE                            -> 0 Amazon|OpenStack|Nimbus|Eucalyptus|Unknown
    EC2_VM_CREATE_KEYPAIR <name> <private-key-file>  -> 0
    EC2_VM_DESTROY_KEYPAIR <name>                 -> 0
    EC2_VM_ASSOCIATE_ADDRESS <instance-id> <ip[:allocation-id]>  -> 0
    EC2_VM_ATTACH_VOLUME <volume-id> <instance-id> <device>      -> 0
    EC2_VM_CREATE_TAGS <resource-id> <name>=<value>* NULL        -> 0
    EC2_VM_START_SPOT <13 fixed args> <sg-name>* NULL <sg-id>* NULL  -> 0 <spot-request-id>
    EC2_VM_STOP_SPOT <spot-request-id>            -> 0
    EC2_VM_STATUS_SPOT <spot-request-id>          -> 0 (<sir> <state> <launch-group>
    EC2_VM_STATUS_ALL_SPOT                        -> 0  <instance-id> <status-code>)*
    EC2_BULK_START <token> <price> <capacity> <role> <strategy> <valid-until> <json>+ NULL
                                                  -> 0 <spot-fleet-request-id>
    EC2_BULK_STOP <spot-fleet-request-id>         -> 0
    EC2_BULK_QUERY                                -> 0 (<fleet-id> <create-time> <token>)*
    STATISTICS (synchronous)                      -> S <requests> <distinct> <throttled> 0

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
from htgrid.backends.ec2._requests import (
    Target,
    parse_bulk_start,
    parse_spot_start,
    parse_tags,
    parse_vm_start,
    status_filters,
    target_of,
)
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

__all__ = ["VERSION", "Ec2Gahp", "Ec2Options"]

log = logging.getLogger("htgrid.gahp.ec2")

VERSION = GahpVersion(__version__, datetime.date(2026, 11, 21), "htgrid EC2 GAHP")

_T = TypeVar("_T")
Handler = Callable[[Call], Coroutine[Any, Any, Sequence[str]]]

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
        table: list[tuple[str, int, Handler, bool, str | None]] = [
            ("EC2_VM_START", 19, self.vm_start, True, "NEED_CHECK_VM_START"),
            ("EC2_VM_STOP", 4, self.vm_stop, True, None),
            ("EC2_VM_STATUS", 4, self.vm_status, False, None),
            ("EC2_VM_STATUS_ALL", 3, self.vm_status_all, True, None),
            ("EC2_VM_SERVER_TYPE", 3, self.server_type, False, None),
            ("EC2_VM_CREATE_KEYPAIR", 5, self.create_keypair, False, "NEED_CHECK_SSHKEY"),
            ("EC2_VM_DESTROY_KEYPAIR", 4, self.destroy_keypair, False, None),
            ("EC2_VM_ASSOCIATE_ADDRESS", 5, self.associate_address, False, None),
            ("EC2_VM_ATTACH_VOLUME", 6, self.attach_volume, False, None),
            ("EC2_VM_CREATE_TAGS", 5, self.create_tags, True, None),
            ("EC2_VM_START_SPOT", 17, self.spot_start, True, "NEED_CHECK_VM_START"),
            ("EC2_VM_STOP_SPOT", 4, self.spot_stop, True, None),
            ("EC2_VM_STATUS_SPOT", 4, self.spot_status, False, None),
            ("EC2_VM_STATUS_ALL_SPOT", 3, self.spot_status_all, True, None),
            ("EC2_BULK_START", 11, self.bulk_start, True, "NEED_CHECK_BULK_START"),
            ("EC2_BULK_STOP", 4, self.bulk_stop, True, "NEED_CHECK_BULK_STOP"),
            ("EC2_BULK_QUERY", 3, self.bulk_query, True, None),
        ]
        commands = [
            Command(
                name,
                params,
                _reporting(handler, transport),
                self.options.accept_limit,
                variadic=variadic,
                on_error=lambda reason: ("1", "E_INTERNAL", reason),
            )
            for name, params, handler, variadic, transport in table
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
            return ("0", *await self._aws(START, request.target, calls.run_instances, request))
        async with self._lock((request.target, token)):
            fetch = functools.partial(self._find_tokens, request.target)
            existing = await self._tokens.find(request.target, token, fetch)
            if existing:
                log.info("client token %s already started %s", token, " ".join(existing))
                return ("0", *existing)
            return ("0", *await self._aws(START, request.target, calls.run_instances, request))

    async def _find_tokens(self, target: Target, tokens: Sequence[str]) -> Mapping[str, list[str]]:
        return await self._aws(LOOKUP, target, calls.find_by_tokens, tokens)

    async def vm_stop(self, call: Call) -> Sequence[str]:
        """EC2_VM_STOP: TerminateInstances."""
        ids = [arg for arg in call.args[3:] if arg.upper() != "NULL"]
        await self._aws(STOP, target_of(call.args), calls.terminate, ids)
        return ("0",)

    async def vm_status(self, call: Call) -> Sequence[str]:
        """EC2_VM_STATUS (deprecated): one instance, by a filtered DescribeInstances."""
        instance_id = call.args[3]
        filters = [{"Name": "instance-id", "Values": [instance_id]}]
        found = await self._aws(STATUS, target_of(call.args), calls.describe_instances, filters)
        return ("0", *status_fields(found, instance_id))

    async def vm_status_all(self, call: Call) -> Sequence[str]:
        """EC2_VM_STATUS_ALL: every instance, from one DescribeInstances."""
        filters = status_filters(call.args)
        found = await self._aws(STATUS, target_of(call.args), calls.describe_instances, filters)
        return ("0", *status_all_fields(found))

    async def server_type(self, call: Call) -> Sequence[str]:
        """EC2_VM_SERVER_TYPE (the grid manager's ping)."""
        return ("0", await self._aws(STATUS, target_of(call.args), calls.query_server_type))

    async def create_keypair(self, call: Call) -> Sequence[str]:
        """EC2_VM_CREATE_KEYPAIR: CreateKeyPair, private key written to a file."""
        name, output = call.args[3], call.args[4]
        await self._aws(START, target_of(call.args), calls.create_key_pair, name, output)
        return ("0",)

    async def destroy_keypair(self, call: Call) -> Sequence[str]:
        """EC2_VM_DESTROY_KEYPAIR: DeleteKeyPair."""
        await self._aws(STOP, target_of(call.args), calls.delete_key_pair, call.args[3])
        return ("0",)

    async def associate_address(self, call: Call) -> Sequence[str]:
        """EC2_VM_ASSOCIATE_ADDRESS: AssociateAddress."""
        args = call.args
        await self._aws(STOP, target_of(args), calls.associate_address, args[3], args[4])
        return ("0",)

    async def attach_volume(self, call: Call) -> Sequence[str]:
        """EC2_VM_ATTACH_VOLUME: AttachVolume."""
        args = call.args
        await self._aws(STOP, target_of(args), calls.attach_volume, args[3], args[4], args[5])
        return ("0",)

    async def create_tags(self, call: Call) -> Sequence[str]:
        """EC2_VM_CREATE_TAGS: CreateTags on one resource."""
        args = call.args
        tags = parse_tags(args[4:])
        await self._aws(STOP, target_of(args), calls.create_tags, args[3], tags)
        return ("0",)

    # ---- spot instances -------------------------------------------------------------------------

    async def spot_start(self, call: Call) -> Sequence[str]:
        """EC2_VM_START_SPOT: RequestSpotInstances, unless the token has a live request."""
        request = parse_spot_start(call.args)
        token = request.client_token
        if token is None:
            return ("0", await self._aws(START, request.target, calls.request_spot, request))
        async with self._lock((request.target, "spot " + token)):
            existing = await self._aws(LOOKUP, request.target, calls.find_spot_request, token)
            if existing is not None:
                return ("0", existing)
            return ("0", await self._aws(START, request.target, calls.request_spot, request))

    async def spot_stop(self, call: Call) -> Sequence[str]:
        """EC2_VM_STOP_SPOT: CancelSpotInstanceRequests."""
        await self._aws(STOP, target_of(call.args), calls.cancel_spot, call.args[3])
        return ("0",)

    async def spot_status(self, call: Call) -> Sequence[str]:
        """EC2_VM_STATUS_SPOT (deprecated): one spot instance request."""
        found = await self._aws(STATUS, target_of(call.args), calls.describe_spot, call.args[3])
        return ("0", *spot_fields(found))

    async def spot_status_all(self, call: Call) -> Sequence[str]:
        """EC2_VM_STATUS_ALL_SPOT: every spot instance request, from one call."""
        found = await self._aws(STATUS, target_of(call.args), calls.describe_spot)
        return ("0", *spot_fields(found))

    # ---- spot fleets ----------------------------------------------------------------------------

    async def bulk_start(self, call: Call) -> Sequence[str]:
        """EC2_BULK_START: RequestSpotFleet."""
        request = parse_bulk_start(call.args)
        return ("0", await self._aws(START, request.target, calls.request_fleet, request))

    async def bulk_stop(self, call: Call) -> Sequence[str]:
        """EC2_BULK_STOP: CancelSpotFleetRequests, terminating its instances."""
        await self._aws(STOP, target_of(call.args), calls.cancel_fleet, call.args[3])
        return ("0",)

    async def bulk_query(self, call: Call) -> Sequence[str]:
        """EC2_BULK_QUERY: DescribeSpotFleetRequests."""
        found = await self._aws(STATUS, target_of(call.args), calls.describe_fleets)
        return ("0", *bulk_query_fields(found))


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
