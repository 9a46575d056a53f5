"""The ec2 resource (one per `ec2 <service-url>`) and what EC2_VM_STATUS_ALL tells it.

Ping: EC2_VM_SERVER_TYPE (ec2resource.cpp's DoPing), with the key files of one of the
resource's jobs. A transport failure (E_CURL_IO) or a server error makes the resource
down; any other answer means the service is there (a job whose keys are refused learns
it from its own start).

Status: ONE EC2_VM_STATUS_ALL per set of key files per poll interval, shared by every
job that wants one (jobs normally share their keys, so one request per poll). Its
answer lists every instance of the account as 8-tuples; each is handed to the job that
owns it, by instance id, else, for a job that has only a client token (recovery), by
client token (the GAHP also tags instances with it, where a server drops ClientToken).
A job whose instance is not in the answer is told so (`None`): HTCondor's "not-found".

Spot requests the same way: ONE EC2_VM_STATUS_ALL_SPOT per set of key files per poll,
for every job whose spot request is not yet fulfilled; each 5-tuple goes to its job by
request id, else by launch group (the client token, for a job that lost its request id).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from htgrid.gahp import GahpError, GahpRequestRefused, unnull
from htgrid.grid._errors import GahpUnavailable
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._resource import Resource
from htgrid.grid._task import Services
from htgrid.grid.ec2._ids import Ec2ResourceName

if TYPE_CHECKING:
    from htgrid.grid.ec2._job import Ec2Job

__all__ = [
    "MAX_PENDING",
    "SPOT_STATUS_ALL",
    "STATUS_ALL",
    "Ec2Resource",
    "Ec2Status",
    "GahpFailure",
    "SpotStatus",
    "parse_spot_status_all",
    "parse_status_all",
]

_T = TypeVar("_T")

STATUS_ALL = "EC2_VM_STATUS_ALL"
SPOT_STATUS_ALL = "EC2_VM_STATUS_ALL_SPOT"
#: Requests in flight to the EC2 GAHP: its --accept-limit. The GAHP bounds the AWS calls
#: itself (its worker pools) and looks up the client tokens of the starts it holds in one
#: DescribeInstances; holding starts back here (GRIDMANAGER_MAX_PENDING_REQUESTS, 50) only
#: splits that lookup into one per handful of starts, which doubled the time of 500 starts.
MAX_PENDING = 1000
#: Codes that say the service could not be reached (the request may not have run).
TRANSPORT_CODES = frozenset({"E_CURL_IO", "E_HTTP_RESPONSE_NOT_200", "NEED_CHECK_VM_START"})


@dataclass(frozen=True, slots=True)
class Ec2Status:
    """One instance in an EC2_VM_STATUS_ALL answer (None for NULL fields)."""

    instance_id: str
    state: str
    client_token: str | None
    keypair: str | None
    reason: str | None
    public_dns: str | None
    #: When the poll was sent (time.time()): an answer predating an action says nothing of it.
    asked: float


@dataclass(frozen=True, slots=True)
class SpotStatus:
    """One spot instance request in an EC2_VM_STATUS_ALL_SPOT answer."""

    request_id: str
    #: open, active, closed, cancelled, failed (lower case).
    state: str
    launch_group: str | None
    instance_id: str | None
    #: The request's status code: pending-evaluation, fulfilled, price-too-low, ...
    code: str | None
    asked: float


@dataclass(frozen=True, slots=True)
class GahpFailure:
    """A `1 <code> <message>` result of the EC2 GAHP."""

    code: str
    message: str

    @property
    def transient(self) -> bool:
        """The GAHP marks errors a retry may cure (capacity, throttling, 5xx)."""
        return "(transient" in self.message or self.code in TRANSPORT_CODES

    @classmethod
    def of(cls, fields: Sequence[str], command: str) -> GahpFailure:
        code = fields[1] if len(fields) > 1 else "E_UNKNOWN"
        message = fields[2] if len(fields) > 2 else f"{command} failed with no message"
        return cls(code, message)


def parse_status_all(fields: Sequence[str], asked: float) -> list[Ec2Status]:
    """The 8-tuples after the `0` of an EC2_VM_STATUS_ALL result; ValueError if ragged."""
    body = fields[1:]
    if len(body) % 8:
        raise ValueError(f"{STATUS_ALL} answered {len(body)} fields, not a multiple of 8")
    out = []
    for start in range(0, len(body), 8):
        iid, state, token, keypair, reason, dns = body[start : start + 6]
        out.append(
            Ec2Status(
                instance_id=iid,
                state=(unnull(state) or "").lower(),
                client_token=unnull(token),
                keypair=unnull(keypair),
                reason=unnull(reason),
                public_dns=unnull(dns),
                asked=asked,
            )
        )
    return out


def parse_spot_status_all(fields: Sequence[str], asked: float) -> list[SpotStatus]:
    """The 5-tuples after the `0` of an EC2_VM_STATUS_ALL_SPOT result; ValueError if ragged."""
    body = fields[1:]
    if len(body) % 5:
        raise ValueError(f"{SPOT_STATUS_ALL} answered {len(body)} fields, not a multiple of 5")
    out = []
    for start in range(0, len(body), 5):
        sir, state, group, iid, code = body[start : start + 5]
        out.append(
            SpotStatus(
                request_id=sir,
                state=(unnull(state) or "").lower(),
                launch_group=unnull(group) or None,
                instance_id=unnull(iid) or None,
                code=unnull(code) or None,
                asked=asked,
            )
        )
    return out


class Ec2Resource(Resource["Ec2Job", Ec2ResourceName]):
    """`ec2 <service-url>`: pinged with EC2_VM_SERVER_TYPE, polled with EC2_VM_STATUS_ALL."""

    def __init__(self, where: Ec2ResourceName, gahp: GahpHandle, services: Services) -> None:
        super().__init__(where, gahp, services, max_pending=MAX_PENDING)
        self.service_url = where.service_url
        #: What EC2_VM_SERVER_TYPE said (Amazon, OpenStack, ...); "" until it answered.
        self.server_type = ""
        #: EC2_VM_STATUS_ALL_SPOT requests sent (also counted in stats.status_commands).
        self.spot_status_commands = 0

    def _credentials(self) -> tuple[str, str] | None:
        for job in self.jobs.values():
            access, secret = job.credentials
            if access and secret:
                return access, secret
        return None

    async def ping(self) -> str | None:
        keys = self._credentials()
        if keys is None:
            return None  # no job can be run here anyway: each is held for its keys
        try:
            fields = await self.call("EC2_VM_SERVER_TYPE", self.service_url, *keys)
        except GahpRequestRefused as err:
            return str(err)
        if fields[:1] == ("0",):
            self.server_type = fields[1] if len(fields) > 1 else "Unknown"
            return None
        failure = GahpFailure.of(fields, "EC2_VM_SERVER_TYPE")
        if failure.transient:
            return failure.message
        return None  # the service answered: whatever it refused is a job's business

    async def poll(self, jobs: list[Ec2Job]) -> None:
        groups: dict[tuple[str, str], list[Ec2Job]] = {}
        for job in jobs:
            groups.setdefault(job.credentials, []).append(job)
        for keys, members in groups.items():
            spot = [job for job in members if job.wants_spot_status()]
            if spot:
                await self._poll_spot(keys, spot)
            if len(spot) < len(members):
                await self._poll_group(keys, [job for job in members if job not in spot])

    async def _poll_spot(self, keys: tuple[str, str], members: list[Ec2Job]) -> None:
        self.spot_status_commands += 1
        answer = await self._ask(SPOT_STATUS_ALL, keys, parse_spot_status_all)
        if answer is None:
            return
        found, asked = answer
        by_id = {status.request_id: status for status in found}
        by_group: dict[str, SpotStatus] = {}
        for status in found:
            # A cancelled or failed request of a token, then a live one: the live one counts.
            if status.launch_group and (
                status.launch_group not in by_group or status.state in ("open", "active")
            ):
                by_group[status.launch_group] = status
        for job in members:
            if job.spot_request_id is not None:
                job.spot_status(by_id.get(job.spot_request_id), asked)
            elif job.client_token is not None:
                job.spot_status(by_group.get(job.client_token), asked)

    async def _poll_group(self, keys: tuple[str, str], members: list[Ec2Job]) -> None:
        answer = await self._ask(STATUS_ALL, keys, parse_status_all)
        if answer is None:
            return
        found, asked = answer
        by_id = {status.instance_id: status for status in found}
        by_token: dict[str, Ec2Status] = {}
        for status in found:
            # Several instances of one token (a server ignoring ClientToken, before the
            # GAHP tagged them): the live one is the job's.
            if status.client_token and (
                status.client_token not in by_token or status.state != "terminated"
            ):
                by_token[status.client_token] = status
        for job in members:
            if job.instance_id is not None:
                job.remote_status(by_id.get(job.instance_id), asked)
            elif job.client_token is not None:
                job.remote_status(by_token.get(job.client_token), asked)

    async def _ask(
        self, command: str, keys: tuple[str, str], parse: Callable[[Sequence[str], float], list[_T]]
    ) -> tuple[list[_T], float] | None:
        """One status command for all that `keys` reach, its answer read, and when it was
        asked; None (the poll counted as failed) if it failed."""
        self.stats.status_commands += 1
        asked = self.clock.time()
        try:
            fields = await self.call(command, self.service_url, *keys)
            if fields[:1] != ("0",):
                raise ValueError(GahpFailure.of(fields, command).message)
            return parse(fields, asked), asked
        except (GahpError, GahpUnavailable, ValueError) as err:
            self.poll_failed(str(err))
            return None
