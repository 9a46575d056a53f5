"""The EC2 GAHP's commands (HTCondor's `amazonCommands.cpp` and `ec2-gahp-client.cpp`), as
the grid manager sends them and the EC2 GAHP server answers them.

Every request is `CMD <id> <service-url> <access-key-file> <secret-key-file> ...`
(`Target`); every result is `<id> 0 ...` or `<id> 1 <error-code> <error-message>`
(`Failure`). `NULL` (any case) is an absent value and ends a list.

    EC2_VM_START <16 fixed args> <sg-name>* NULL <sg-id>* NULL (<param> <value>)* NULL
                                                  -> 0 <instance-id>+        (VmStart)
    EC2_VM_STOP <instance-id>+                    -> 0
    EC2_VM_STATUS <instance-id>                   -> 0 [<id> <state> <ami> <reason> ...]
    EC2_VM_STATUS_ALL [<filter-name> <value>]     -> 0 (<id> <state> <client-token> <keypair>
                                                     <reason> <dns> <fleet-id> <annex>)*
    EC2_VM_SERVER_TYPE                            -> 0 Amazon|OpenStack|Nimbus|Eucalyptus|Unknown
    EC2_VM_CREATE_KEYPAIR <name> <private-key-file>  -> 0
    EC2_VM_DESTROY_KEYPAIR <name>                 -> 0
    EC2_VM_ASSOCIATE_ADDRESS <instance-id> <ip[:allocation-id]>  -> 0
    EC2_VM_ATTACH_VOLUME <volume-id> <instance-id> <device>      -> 0
    EC2_VM_CREATE_TAGS <resource-id> <name>=<value>* NULL        -> 0   (CreateTags)
    EC2_VM_START_SPOT <13 fixed args> <sg-name>* NULL <sg-id>* NULL  -> 0 <spot-request-id>
    EC2_VM_STOP_SPOT <spot-request-id>            -> 0
    EC2_VM_STATUS_SPOT <spot-request-id>          -> 0 (<sir> <state> <launch-group>
    EC2_VM_STATUS_ALL_SPOT                        -> 0  <instance-id> <status-code>)*
    EC2_BULK_START <token> <price> <capacity> <role> <strategy> <valid-until> <json>+ NULL
                                                  -> 0 <spot-fleet-request-id>
    EC2_BULK_STOP <spot-fleet-request-id>         -> 0
    EC2_BULK_QUERY                                -> 0 (<fleet-id> <create-time> <token>)*

The arguments of EC2_VM_START and EC2_VM_START_SPOT, after the request id:

    EC2_VM_START  0 url 1 access-file 2 secret-file 3 ami 4 keypair 5 user-data
                  6 user-data-file 7 instance-type 8 zone 9 subnet 10 private-ip
                  11 client-token 12 block-device-mapping 13 iam-arn 14 iam-name
                  15 max-count 16... sg-name* NULL sg-id* NULL (param-name value)* NULL
    EC2_VM_START_SPOT  0-2 as above, 3 ami 4 spot-price 5 keypair 6 user-data
                  7 user-data-file 8 instance-type 9 zone 10 subnet 11 private-ip
                  12 client-token 13 iam-arn 14 iam-name 15... sg-name* NULL sg-id* NULL

Error codes the grid manager compares are constants here: a transport failure
(E_CURL_IO: the request may or may not have run), NEED_CHECK_VM_START (a start that may
have happened), and a message ending "(transient, N attempts)" for an error a retry
later may cure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final, Generic, Protocol, TypeVar

from htgrid.gahp._codec import null, unnull
from htgrid.gahp._errors import GahpProtocolError
from htgrid.gahp.commands import Spec

__all__ = [
    "BULK_QUERY",
    "BULK_START",
    "BULK_STOP",
    "E_CURL_IO",
    "E_HTTP_RESPONSE_NOT_200",
    "NEED_CHECK_VM_START",
    "TRANSPORT_CODES",
    "VM_ASSOCIATE_ADDRESS",
    "VM_ATTACH_VOLUME",
    "VM_CREATE_KEYPAIR",
    "VM_CREATE_TAGS",
    "VM_DESTROY_KEYPAIR",
    "VM_SERVER_TYPE",
    "VM_START",
    "VM_START_SPOT",
    "VM_STATUS",
    "VM_STATUS_ALL",
    "VM_STATUS_ALL_SPOT",
    "VM_STATUS_SPOT",
    "VM_STOP",
    "VM_STOP_SPOT",
    "CreateTags",
    "Done",
    "Failure",
    "InstanceStatus",
    "LaunchSpec",
    "Listing",
    "SpotStart",
    "SpotStatus",
    "Target",
    "VmStart",
    "instances",
    "spot_requests",
    "tag_pairs",
    "transient_message",
]

VM_START = Spec("EC2_VM_START", 19, variadic=True)
VM_STOP = Spec("EC2_VM_STOP", 4, variadic=True)
VM_STATUS = Spec("EC2_VM_STATUS", 4)
VM_STATUS_ALL = Spec("EC2_VM_STATUS_ALL", 3, variadic=True)
VM_SERVER_TYPE = Spec("EC2_VM_SERVER_TYPE", 3)
VM_CREATE_KEYPAIR = Spec("EC2_VM_CREATE_KEYPAIR", 5)
VM_DESTROY_KEYPAIR = Spec("EC2_VM_DESTROY_KEYPAIR", 4)
VM_ASSOCIATE_ADDRESS = Spec("EC2_VM_ASSOCIATE_ADDRESS", 5)
VM_ATTACH_VOLUME = Spec("EC2_VM_ATTACH_VOLUME", 6)
VM_CREATE_TAGS = Spec("EC2_VM_CREATE_TAGS", 5, variadic=True)
VM_START_SPOT = Spec("EC2_VM_START_SPOT", 17, variadic=True)
VM_STOP_SPOT = Spec("EC2_VM_STOP_SPOT", 4, variadic=True)
VM_STATUS_SPOT = Spec("EC2_VM_STATUS_SPOT", 4)
VM_STATUS_ALL_SPOT = Spec("EC2_VM_STATUS_ALL_SPOT", 3, variadic=True)
BULK_START = Spec("EC2_BULK_START", 11, variadic=True)
BULK_STOP = Spec("EC2_BULK_STOP", 4, variadic=True)
BULK_QUERY = Spec("EC2_BULK_QUERY", 3, variadic=True)

#: A transport failure: no usable answer came (the request may or may not have run).
E_CURL_IO: Final = "E_CURL_IO"
#: A server answering something that is not EC2's.
E_HTTP_RESPONSE_NOT_200: Final = "E_HTTP_RESPONSE_NOT_200"
#: A start's transport failure: it may have happened; its client token says.
NEED_CHECK_VM_START: Final = "NEED_CHECK_VM_START"
#: Codes that say the service could not be reached (the request may not have run).
TRANSPORT_CODES: Final = frozenset({E_CURL_IO, E_HTTP_RESPONSE_NOT_200, NEED_CHECK_VM_START})
_TRANSIENT: Final = "(transient"
_NULL = "NULL"
_OK = "0"
_FAILED = "1"
# StringTokenIterator's default separators.
_TOKENS = re.compile(r"[^,\s]+")


def transient_message(text: str, attempts: int) -> str:
    """An error message marked as one a retry later may cure (the grid manager reads it)."""
    plural = "" if attempts == 1 else "s"
    return f"{text} {_TRANSIENT}, {attempts} attempt{plural})"


@dataclass(frozen=True, slots=True)
class Failure:
    """`1 <code> <message>`: a request that failed. The message starts with the code (the
    grid manager searches it, and shows it as HoldReason)."""

    code: str
    message: str

    @property
    def transient(self) -> bool:
        """Whether a retry later may work (capacity, throttling, 5xx, no answer)."""
        return _TRANSIENT in self.message or self.code in TRANSPORT_CODES

    def fields(self) -> tuple[str, ...]:
        return (_FAILED, self.code, self.message)

    @classmethod
    def of(cls, fields: Sequence[str], command: Spec) -> Failure:
        code = fields[1] if len(fields) > 1 else "E_UNKNOWN"
        message = fields[2] if len(fields) > 2 else f"{command.name} failed with no message"
        return cls(code, message)


@dataclass(frozen=True, slots=True)
class Done:
    """`0 <values>...`: a request that worked (what the values are depends on the command:
    an instance id for EC2_VM_START, a request id for EC2_VM_START_SPOT, the server's
    type for EC2_VM_SERVER_TYPE, nothing for the others)."""

    values: tuple[str, ...] = ()

    @property
    def value(self) -> str | None:
        """The first value (an EC2_VM_START's first instance id...)."""
        return self.values[0] if self.values else None

    def fields(self) -> tuple[str, ...]:
        return (_OK, *self.values)

    @classmethod
    def of(cls, fields: Sequence[str], command: Spec, *, values: int = 0) -> Done | Failure:
        """The result; a Failure unless it is `0` and at least `values` values."""
        if fields[:1] != (_OK,) or len(fields) <= values:
            return Failure.of(fields, command)
        return cls(tuple(fields[1:]))


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    """One instance in an EC2_VM_STATUS_ALL answer (None for NULL fields; the state read
    in lower case, "" when none was given)."""

    instance_id: str
    state: str
    client_token: str | None = None
    keypair: str | None = None
    reason: str | None = None
    public_dns: str | None = None
    fleet_id: str | None = None
    annex: str | None = None

    @property
    def key(self) -> str:
        return self.instance_id

    @property
    def token(self) -> str | None:
        return self.client_token

    @property
    def live(self) -> bool:
        """Not terminated."""
        return self.state != "terminated"

    def fields(self) -> tuple[str, ...]:
        return (
            self.instance_id,
            null(self.state),
            null(self.client_token),
            null(self.keypair),
            null(self.reason),
            null(self.public_dns),
            null(self.fleet_id),
            null(self.annex),
        )

    @classmethod
    def of(cls, fields: Sequence[str]) -> InstanceStatus:
        iid, state, token, keypair, reason, dns, fleet, annex = fields
        return cls(
            iid,
            (unnull(state) or "").lower(),
            unnull(token),
            unnull(keypair),
            unnull(reason),
            unnull(dns),
            unnull(fleet),
            unnull(annex),
        )


@dataclass(frozen=True, slots=True)
class SpotStatus:
    """One spot instance request in an EC2_VM_STATUS[_ALL]_SPOT answer: its state (open,
    active, closed, cancelled, failed; read in lower case) and status code (fulfilled,
    price-too-low, ...). The server writes the state as EC2 gives it, "" when none."""

    request_id: str
    state: str
    launch_group: str | None = None
    instance_id: str | None = None
    code: str | None = None

    @property
    def key(self) -> str:
        return self.request_id

    @property
    def token(self) -> str | None:
        """The launch group: the client token, for the requests htgrid and HTCondor make."""
        return self.launch_group

    @property
    def live(self) -> bool:
        """Open or active: it may still be fulfilled, or was."""
        return self.state in ("open", "active")

    def fields(self) -> tuple[str, ...]:
        return (
            self.request_id,
            self.state,
            null(self.launch_group),
            null(self.instance_id),
            null(self.code),
        )

    @classmethod
    def of(cls, fields: Sequence[str]) -> SpotStatus:
        sir, state, group, iid, code = fields
        return cls(
            sir,
            (unnull(state) or "").lower(),
            unnull(group) or None,
            unnull(iid) or None,
            unnull(code) or None,
        )


class _Row(Protocol):
    def fields(self) -> tuple[str, ...]: ...


_R = TypeVar("_R", bound=_Row)


@dataclass(frozen=True, slots=True)
class Listing(Generic[_R]):
    """A status-all result: EC2_VM_STATUS_ALL's instances (`instances` reads it) or
    EC2_VM_STATUS_ALL_SPOT's spot requests (`spot_requests`), in the order listed."""

    statuses: tuple[_R, ...] = ()

    def fields(self) -> tuple[str, ...]:
        return (_OK, *(field for status in self.statuses for field in status.fields()))


def _listing(
    fields: Sequence[str], command: Spec, width: int, row: Callable[[Sequence[str]], _R]
) -> Listing[_R] | Failure:
    if fields[:1] != (_OK,):
        return Failure.of(fields, command)
    body = fields[1:]
    if len(body) % width:
        raise GahpProtocolError(
            f"{command.name} answered {len(body)} fields, not a multiple of {width}"
        )
    return Listing(tuple(row(body[start : start + width]) for start in range(0, len(body), width)))


def instances(fields: Sequence[str]) -> Listing[InstanceStatus] | Failure:
    """EC2_VM_STATUS_ALL's result; GahpProtocolError if its 8-tuples are ragged."""
    return _listing(fields, VM_STATUS_ALL, 8, InstanceStatus.of)


def spot_requests(fields: Sequence[str]) -> Listing[SpotStatus] | Failure:
    """EC2_VM_STATUS_ALL_SPOT's result; GahpProtocolError if its 5-tuples are ragged."""
    return _listing(fields, VM_STATUS_ALL_SPOT, 5, SpotStatus.of)


# ---- requests ------------------------------------------------------------------------------


def _opt(args: Sequence[str], index: int) -> str | None:
    return unnull(args[index]) if index < len(args) else None


@dataclass(frozen=True, slots=True)
class Target:
    """The three arguments every request starts with."""

    service_url: str
    access_key_file: str
    secret_key_file: str

    def args(self) -> tuple[str, str, str]:
        return (self.service_url, self.access_key_file, self.secret_key_file)

    @classmethod
    def of(cls, args: Sequence[str]) -> Target:
        """The first three arguments (the server has checked there are three)."""
        return cls(args[0], args[1], args[2])


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What an instance is started from: shared by on-demand and spot requests."""

    ami: str
    keypair: str | None = None
    user_data: str | None = None
    user_data_file: str | None = None
    instance_type: str | None = None
    availability_zone: str | None = None
    subnet: str | None = None
    private_ip: str | None = None
    iam_profile_arn: str | None = None
    iam_profile_name: str | None = None
    security_groups: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()

    def _placement(self) -> tuple[str, ...]:
        # What follows the AMI (and the spot price) in both starts, up to the client token.
        return (
            null(self.keypair),
            null(self.user_data),
            null(self.user_data_file),
            null(self.instance_type),
            null(self.availability_zone),
            null(self.subnet),
            null(self.private_ip),
        )

    def _groups(self) -> tuple[str, ...]:
        return (*self.security_groups, _NULL, *self.security_group_ids, _NULL)


@dataclass(frozen=True, slots=True)
class VmStart:
    """EC2_VM_START."""

    target: Target
    spec: LaunchSpec
    client_token: str | None = None
    #: `virtual:device` pairs, as the job gave them (`block_devices` reads them).
    block_device_mapping: str | None = None
    max_count: int = 1
    #: Raw RunInstances query parameters (ec2_parameter_*), in order.
    parameters: tuple[tuple[str, str], ...] = ()

    @property
    def block_devices(self) -> tuple[tuple[str, str], ...]:
        """(virtual name, device name) pairs; a malformed item is skipped, as HTCondor does."""
        pairs = []
        for item in _TOKENS.findall(self.block_device_mapping or ""):
            parts = item.split(":")
            if len(parts) == 2 and all(parts):
                pairs.append((parts[0], parts[1]))
        return tuple(pairs)

    def args(self) -> tuple[str, ...]:
        spec = self.spec
        return (
            *self.target.args(),
            spec.ami,
            *spec._placement(),
            null(self.client_token),
            null(self.block_device_mapping),
            null(spec.iam_profile_arn),
            null(spec.iam_profile_name),
            str(self.max_count),
            *spec._groups(),
            *(word for pair in self.parameters for word in pair),
            _NULL,
        )

    @classmethod
    def of(cls, args: Sequence[str]) -> VmStart:
        """The arguments (at least 19); ValueError for a bad max count."""
        spec = _spec(args, ami=3, keypair=4, user_data=5, instance_type=7, arn=13)
        max_count = 1
        count_arg = _opt(args, 15)
        if count_arg is not None:
            if not count_arg.isdigit() or int(count_arg) < 1:
                raise ValueError(f"Bad max count {count_arg!r}")
            max_count = int(count_arg)
        groups, group_ids, parameters = _start_lists(args[16:])
        spec = replace(spec, security_groups=tuple(groups), security_group_ids=tuple(group_ids))
        return cls(
            target=Target.of(args),
            spec=spec,
            client_token=_opt(args, 11),
            block_device_mapping=_opt(args, 12),
            max_count=max_count,
            parameters=tuple(parameters),
        )


@dataclass(frozen=True, slots=True)
class SpotStart:
    """EC2_VM_START_SPOT. The client token rides as the request's launch group:
    RequestSpotInstances has no ClientToken, and HTCondor finds a request again by it."""

    target: Target
    spec: LaunchSpec
    spot_price: str
    client_token: str | None = None

    def args(self) -> tuple[str, ...]:
        spec = self.spec
        iam = (null(spec.iam_profile_arn), null(spec.iam_profile_name))
        return (
            *self.target.args(),
            spec.ami,
            self.spot_price,
            *spec._placement(),
            null(self.client_token),
            *iam,
            *spec._groups(),
        )

    @classmethod
    def of(cls, args: Sequence[str]) -> SpotStart:
        """The arguments (at least 17)."""
        groups, group_ids = _lists(args[15:], 2)
        spec = _spec(args, ami=3, keypair=5, user_data=6, instance_type=8, arn=13)
        spec = replace(spec, security_groups=tuple(groups), security_group_ids=tuple(group_ids))
        return cls(Target.of(args), spec, spot_price=args[4], client_token=_opt(args, 12))


def _spec(
    args: Sequence[str], *, ami: int, keypair: int, user_data: int, instance_type: int, arn: int
) -> LaunchSpec:
    """The launch arguments where each of the two starts puts them."""
    return LaunchSpec(
        ami=args[ami],
        keypair=_opt(args, keypair),
        user_data=_opt(args, user_data),
        user_data_file=_opt(args, user_data + 1),
        instance_type=_opt(args, instance_type),
        availability_zone=_opt(args, instance_type + 1),
        subnet=_opt(args, instance_type + 2),
        private_ip=_opt(args, instance_type + 3),
        iam_profile_arn=_opt(args, arn),
        iam_profile_name=_opt(args, arn + 1),
    )


def _lists(args: Sequence[str], count: int) -> list[list[str]]:
    """`count` NULL-terminated lists; extra NULLs at the end are ignored."""
    lists: list[list[str]] = [[] for _ in range(count)]
    which = 0
    for arg in args:
        if arg.upper() == _NULL:
            which += 1
        elif which < count:
            lists[which].append(arg)
    return lists


def _start_lists(
    args: Sequence[str],
) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """Security group names, ids and (name, value) parameters, as HTCondor reads them.

    In the parameter list a value is taken as is, even the word NULL; a name without a
    value is dropped.
    """
    groups: list[str] = []
    group_ids: list[str] = []
    parameters: list[tuple[str, str]] = []
    which = 0
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.upper() == _NULL:
            which += 1
        elif which == 0:
            groups.append(arg)
        elif which == 1:
            group_ids.append(arg)
        elif which == 2 and i + 1 < len(args):
            parameters.append((arg, args[i + 1]))
            i += 1
        i += 1
    return groups, group_ids, parameters


def tag_pairs(args: Iterable[str]) -> list[tuple[str, str]]:
    """`name=value` arguments up to a NULL; a name without `=` gets an empty value."""
    tags = []
    for arg in args:
        if arg.upper() == _NULL:
            break
        name, _, value = arg.partition("=")
        tags.append((name, value))
    return tags


@dataclass(frozen=True, slots=True)
class CreateTags:
    """EC2_VM_CREATE_TAGS: tags for one resource."""

    target: Target
    resource_id: str
    tags: tuple[tuple[str, str], ...]

    def args(self) -> tuple[str, ...]:
        pairs = (f"{name}={value}" for name, value in self.tags)
        return (*self.target.args(), self.resource_id, *pairs, _NULL)

    @classmethod
    def of(cls, args: Sequence[str]) -> CreateTags:
        return cls(Target.of(args), args[3], tuple(tag_pairs(args[4:])))
