"""boto3 clients, the worker threads they run in, and the counters STATISTICS reports.

boto3 blocks, so every call runs in a thread of one pool. Commands are grouped (starts,
stops, status questions...) and each group has its own limit, so a burst of starts never
holds up the status poll. Clients are made once per Account (endpoint, region, keys):
making one costs tens of milliseconds and they are thread-safe once made.

Hooks on each client:

* raw query parameters: EC2_VM_START passes ec2_parameter_* to RunInstances as query
  parameters, as HTCondor does. They travel in the call's arguments under EXTRA_QUERY,
  are taken out before validation and added to the serialized body for keys the call
  did not set itself (the GAHP's own arguments win, as in HTCondor).
* the raw DescribeKeyPairs answer, which EC2_VM_SERVER_TYPE inspects (HTTP headers and
  XML prolog), is added to the parsed response.
* counters: API calls, HTTP attempts (retries included) and throttled answers.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import functools
import re
import threading
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]

from htgrid.backends.ec2._account import Account
from htgrid.backends.ec2._errors import THROTTLING_CODES
from htgrid.backends.ec2._requests import EXTRA_QUERY
from htgrid.backends.ec2._results import RAW_BODY
from htgrid.gahp import Clock

__all__ = ["ClientPool", "ClientSettings", "Counters", "Spacer", "Workers", "merge_query"]

_T = TypeVar("_T")

_CONTEXT_KEY = "htgrid_extra_query"
_TAG_SPEC = re.compile(r"TagSpecification\.(\d+)\.(.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How boto3 clients are made."""

    #: HTTP attempts per call, the first included (botocore's "standard" retry mode:
    #: throttling, 5xx and dropped connections are retried with jittered back-off).
    max_attempts: int = 5
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    #: HTTP connections kept per client.
    pool_connections: int = 20
    #: Clients kept (least recently used ones are dropped).
    max_clients: int = 64


class Counters:
    """What STATISTICS reports, HTCondor's four numbers. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = collections.Counter[str]()

    def add(self, name: str, amount: int = 1) -> None:
        """Count `amount` more of `name`."""
        with self._lock:
            self._values[name] += amount

    def get(self, name: str) -> int:
        """The count of `name` so far."""
        with self._lock:
            return self._values[name]

    def statistics(self) -> list[str]:
        """NumRequests NumDistinctRequests NumRequestsExceedingLimit NumExpiredSignatures."""
        with self._lock:
            values = self._values
            return [
                str(values["attempts"]),
                str(values["calls"]),
                str(values["throttled"]),
                # SigV4 signatures are made per attempt by botocore: none can expire.
                "0",
            ]


class ClientPool:
    """boto3 EC2 clients by Account, made on first use. Thread-safe."""

    def __init__(self, settings: ClientSettings, counters: Counters) -> None:
        self.settings = settings
        self._counters = counters
        self._lock = threading.Lock()
        self._session = boto3.session.Session()
        self._clients: collections.OrderedDict[Account, Any] = collections.OrderedDict()

    def get(self, account: Account) -> Any:
        """The client for `account` (boto3 clients are untyped here: Any at the boundary)."""
        with self._lock:
            client = self._clients.get(account)
            if client is not None:
                self._clients.move_to_end(account)
                return client
            # Making clients from one session is not thread-safe: keep it under the lock.
            client = self._make(account)
            self._clients[account] = client
            while len(self._clients) > self.settings.max_clients:
                self._clients.popitem(last=False)
            return client

    def _make(self, account: Account) -> Any:
        settings = self.settings
        config = Config(
            region_name=account.region,
            retries={"mode": "standard", "total_max_attempts": settings.max_attempts},
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            max_pool_connections=settings.pool_connections,
            user_agent_extra="htgrid-ec2-gahp",
        )
        client = self._session.client(
            "ec2",
            endpoint_url=account.endpoint_url,
            region_name=account.region,
            aws_access_key_id=account.access_key,
            aws_secret_access_key=account.secret_key,
            config=config,
        )
        events = client.meta.events
        events.register("before-parameter-build.ec2", _take_extra_query)
        events.register("before-call.ec2", self._before_call)
        events.register("before-send.ec2", self._before_send)
        events.register("needs-retry.ec2", self._needs_retry)
        events.register("after-call.ec2.DescribeKeyPairs", _keep_raw_body)
        return client

    def _before_call(self, params: Any, context: Any, **_: Any) -> None:
        self._counters.add("calls")
        extra = context.pop(_CONTEXT_KEY, None) if isinstance(context, dict) else None
        if extra and isinstance(params.get("body"), dict):
            merge_query(params["body"], extra)

    def _before_send(self, **_: Any) -> None:
        self._counters.add("attempts")

    def _needs_retry(self, response: Any = None, **_: Any) -> None:
        if response is None:
            return
        code = (response[1].get("Error") or {}).get("Code")
        if code in THROTTLING_CODES:
            self._counters.add("throttled")


def _take_extra_query(params: Any, context: Any, **_: Any) -> None:
    extra = params.pop(EXTRA_QUERY, None)
    if extra:
        context[_CONTEXT_KEY] = extra


def _keep_raw_body(http_response: Any, parsed: Any, **_: Any) -> None:
    parsed[RAW_BODY] = bytes(http_response.content or b"")


def merge_query(body: dict[str, Any], extra: Mapping[str, str]) -> None:
    """Add raw query parameters to a serialized EC2 query body.

    Keys the body already has stay (the GAHP's own arguments win). Our TagSpecification
    entries move past the caller's, so a user's TagSpecification.1 and ours both survive.
    """
    user_specs = [int(m.group(1)) for key in extra if (m := _TAG_SPEC.fullmatch(key))]
    if user_specs:
        offset = max(user_specs)
        for key in [key for key in body if _TAG_SPEC.fullmatch(key)]:
            match = _TAG_SPEC.fullmatch(key)
            assert match is not None  # filtered just above
            value = body.pop(key)
            body[f"TagSpecification.{int(match.group(1)) + offset}.{match.group(2)}"] = value
    for key, value in extra.items():
        body.setdefault(key, value)


class Workers:
    """Runs blocking calls in threads: one pool, at most `limits[group]` per group at once."""

    def __init__(self, limits: Mapping[str, int]) -> None:
        self._limits = dict(limits)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=sum(self._limits.values()), thread_name_prefix="ec2-gahp"
        )
        self._gates: dict[str, asyncio.Semaphore] = {}

    async def run(self, group: str, fn: Callable[..., _T], *args: Any) -> _T:
        """fn(*args) in a worker thread of `group`."""
        gate = self._gates.get(group)
        if gate is None:
            gate = self._gates[group] = asyncio.Semaphore(self._limits[group])
        async with gate:
            loop = asyncio.get_running_loop()
            call = functools.partial(contextvars.copy_context().run, fn, *args)
            return await loop.run_in_executor(self._executor, call)

    def close(self) -> None:
        """Stop taking work; calls already in AWS finish (their results are dropped)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class Spacer:
    """Spaces the start of calls to one account at least `interval` seconds apart.

    HTCondor's EC2 GAHP waits EC2_GAHP_RATE_LIMIT (100 ms) between requests; here it is
    off (0) unless asked for, and botocore's retries handle throttling.
    """

    def __init__(self, interval: float, clock: Clock) -> None:
        self._interval = interval
        self._clock = clock
        self._next: dict[Hashable, float] = {}

    async def wait(self, *key: Hashable) -> None:
        """Return when a call to the service and key named by `key` may start."""
        if self._interval <= 0:
            return
        now = self._clock.monotonic()
        slot = max(now, self._next.get(key, now))
        self._next[key] = slot + self._interval
        if slot > now:
            await self._clock.sleep(slot - now)
