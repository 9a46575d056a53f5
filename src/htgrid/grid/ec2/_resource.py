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

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from htgrid.gahp import GahpError, GahpRequestRefused
from htgrid.gahp.commands import Spec, ec2
from htgrid.grid._errors import GahpUnavailable
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._gridids import OneWordResource
from htgrid.grid._resource import Resource
from htgrid.grid._task import Services

if TYPE_CHECKING:
    from htgrid.grid.ec2._job import Ec2Job

__all__ = ["MAX_PENDING", "Ec2Resource"]

#: Requests in flight to the EC2 GAHP: its --accept-limit. The GAHP bounds the AWS calls
#: itself (its worker pools) and looks up the client tokens of the starts it holds in one
#: DescribeInstances; holding starts back here (GRIDMANAGER_MAX_PENDING_REQUESTS, 50) only
#: splits that lookup into one per handful of starts, which doubled the time of 500 starts.
MAX_PENDING = 1000

_T = TypeVar("_T", bound="ec2.InstanceStatus | ec2.SpotStatus")


class Ec2Resource(Resource["Ec2Job", OneWordResource]):
    """`ec2 <service-url>`: pinged with EC2_VM_SERVER_TYPE, polled with EC2_VM_STATUS_ALL."""

    def __init__(self, where: OneWordResource, gahp: GahpHandle, services: Services) -> None:
        super().__init__(where, gahp, services, max_pending=MAX_PENDING)
        self.service_url = where.word
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
            fields = await self.call(ec2.VM_SERVER_TYPE, self.service_url, *keys)
        except GahpRequestRefused as err:
            return str(err)
        answer = ec2.Done.of(fields, ec2.VM_SERVER_TYPE)
        if isinstance(answer, ec2.Done):
            self.server_type = answer.value or "Unknown"
            return None
        if answer.transient:
            return answer.message
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
        answer = await self._ask(ec2.VM_STATUS_ALL_SPOT, keys, ec2.spot_requests)
        for job, status, asked in _matched(answer, members, lambda job: job.spot_request_id):
            job.spot_status(status, asked)

    async def _poll_group(self, keys: tuple[str, str], members: list[Ec2Job]) -> None:
        answer = await self._ask(ec2.VM_STATUS_ALL, keys, ec2.instances)
        for job, status, asked in _matched(answer, members, lambda job: job.instance_id):
            job.remote_status(status, asked)

    async def _ask(
        self,
        command: Spec,
        keys: tuple[str, str],
        read: Callable[[Sequence[str]], ec2.Listing[_T] | ec2.Failure],
    ) -> tuple[tuple[_T, ...], float] | None:
        """One status command for all that `keys` reach, its statuses, and when it was
        asked; None (the poll counted as failed) if it failed."""
        self.stats.status_commands += 1
        asked = self.clock.time()
        try:
            answer = await self.ask(read, command, self.service_url, *keys)
        except (GahpError, GahpUnavailable) as err:
            self.poll_failed(str(err))
            return None
        if isinstance(answer, ec2.Failure):
            self.poll_failed(answer.message)
            return None
        return answer.statuses, asked


def _matched(
    answer: tuple[tuple[_T, ...], float] | None,
    jobs: list[Ec2Job],
    own: Callable[[Ec2Job], str | None],
) -> Iterator[tuple[Ec2Job, _T | None, float]]:
    """Each job and its status in a listing (None: not listed), and when it was asked: by
    the job's `own` id, else, for a job that has only its client token (recovery), by the
    token. Several of one token (a server ignoring ClientToken, before the GAHP tagged
    them; a spot request cancelled or failed, then a live one): the live one is the job's.
    Nothing when the poll failed."""
    if answer is None:
        return
    found, asked = answer
    by_id = {status.key: status for status in found}
    by_token: dict[str, _T] = {}
    for status in found:
        if status.token and (status.token not in by_token or status.live):
            by_token[status.token] = status
    for job in jobs:
        key = own(job)
        if key is not None:
            yield job, by_id.get(key), asked
        elif job.client_token is not None:
            yield job, by_token.get(job.client_token), asked
