"""What a user asks of an annex: its name, size, lease and where it runs; and the names
every piece of it has in the cloud."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from htgrid.annex._errors import AnnexUsageError
from htgrid.annex.lease_function import PARAMETER_ROOT, RULE_PREFIX, TOKEN_ROOT

__all__ = [
    "DEFAULT_IDLE",
    "AnnexSpec",
    "Cloud",
    "CloudAnnex",
    "Instance",
    "annex_identity",
    "check_name",
    "lease_parameter",
    "node_hostname",
    "parse_duration",
    "parse_expiry",
    "parse_tags",
    "token_parameter",
]

#: condor_annex's ANNEX_DEFAULT_UNCLAIMED_TIMEOUT: an instance idle this long shuts down.
DEFAULT_IDLE: Final = 900.0
# An EventBridge rule's name is at most 64 characters, and starts with RULE_PREFIX.
_NAME: Final = re.compile(rf"[A-Za-z0-9][A-Za-z0-9-]{{0,{63 - len(RULE_PREFIX)}}}")
_UNIT: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART: Final = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def check_name(name: str) -> str:
    """`name`, if it may name an annex (letters, digits and `-`, at most 51 long)."""
    if not _NAME.fullmatch(name):
        raise AnnexUsageError(
            f"{name!r} cannot name an annex: use letters, digits and '-', starting with a "
            f"letter or digit, at most {64 - len(RULE_PREFIX)} characters"
        )
    return name


def parse_duration(text: str, what: str) -> float:
    """Seconds from `3600`, `90m`, `2h`, `1d` or `1h30m`."""
    word = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", word):
        seconds = float(word)
    elif word and _PART.sub("", word) == "":
        seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(word))
    else:
        raise AnnexUsageError(
            f"{what} {text!r} is not a duration (seconds, or e.g. 90m, 2h, 1d, 1h30m)"
        )
    if seconds <= 0:
        raise AnnexUsageError(f"{what} must be longer than 0 s")
    return seconds


def parse_expiry(text: str) -> float:
    """Seconds since 1970 of `YYYY-MM-DD HH:MM` in this host's time zone."""
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d %H:%M").timestamp()
    except ValueError:
        raise AnnexUsageError(f'--expiry {text!r} is not "YYYY-MM-DD HH:MM"') from None


def parse_tags(items: list[str]) -> tuple[tuple[str, str], ...]:
    """`k=v` pairs, in order."""
    tags: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AnnexUsageError(f"--tag {item!r} is not KEY=VALUE")
        if key.startswith(("aws:", "htgrid:")):
            raise AnnexUsageError(f"--tag {key!r}: the prefixes aws: and htgrid: are reserved")
        tags.append((key.strip(), value))
    return tuple(tags)


def token_parameter(name: str, owner: str) -> str:
    """The SSM SecureString holding the annex's token: under its owner's (the IAM user
    who made the annex), which that user's policy alone may read."""
    return f"{TOKEN_ROOT}/{owner}/{name}"


def lease_parameter(name: str) -> str:
    """The SSM String holding the annex's lease end (which `extend` moves)."""
    return f"{PARAMETER_ROOT}/{name}/lease"


def annex_identity(name: str, trust_domain: str) -> str:
    """The subject of the annex's token: the collector lets it advertise the machines
    named under `NAME.annex` only (`node_hostname`)."""
    return f"{name}.annex@{trust_domain}"


def node_hostname(name: str, instance_id: str) -> str:
    """An annex instance's NETWORK_HOSTNAME: its slots are slotN@<this>."""
    return f"{instance_id}.{name}.annex"


@dataclass(frozen=True, slots=True)
class AnnexSpec:
    """One `htgrid annex create` (or `add`): what to request."""

    name: str
    count: int = 0  # on-demand instances
    slots: int = 0  # spot fleet: the target capacity, in weights
    lifetime: float | None = None  # seconds from now; or expiry
    expiry: float | None = None
    idle: float = DEFAULT_IDLE
    region: str = "us-east-1"
    instance_types: tuple[str, ...] = ("m5.large",)
    image_ids: tuple[str, ...] = ()
    spot_price: str | None = None
    keypair: str | None = None
    subnet: str | None = None
    vpc: str | None = None
    security_groups: tuple[str, ...] = ()
    project_id: str | None = None
    tags: tuple[tuple[str, str], ...] = ()
    owners: tuple[str, ...] = ()
    user_data: str | None = None
    join: bool = True
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.count < 0 or self.slots < 0:
            raise AnnexUsageError("--count and --slots must not be negative")
        if self.count and self.slots:
            raise AnnexUsageError("--count (on-demand) and --slots (spot fleet): one of them")
        if self.spot_price is not None and self.slots == 0:
            raise AnnexUsageError("--spot-price needs --slots (a spot fleet)")
        if not self.image_ids:
            raise AnnexUsageError("--image-ids: which image (AMI) the instances boot")
        if len(self.image_ids) not in (1, len(self.instance_types)):
            raise AnnexUsageError(
                "--image-ids: one image, or one for each of --instance-types, in order"
            )

    def expiration(self, now: float) -> float:
        """When the lease ends: --expiry, else now + --lifetime."""
        if self.expiry is not None:
            if self.expiry <= now:
                raise AnnexUsageError("--expiry is in the past")
            return self.expiry
        if self.lifetime is None:
            raise AnnexUsageError("--lifetime or --expiry: how long the annex may run")
        return now + self.lifetime

    def image_for(self, index: int) -> str:
        return self.image_ids[index if len(self.image_ids) > 1 else 0]


@dataclass(frozen=True, slots=True)
class Instance:
    """One instance of an annex, as the cloud describes it (EC2's words for its state)."""

    instance_id: str
    state: str
    instance_type: str
    launched: float
    lifecycle: str  # "on-demand" or "spot"
    address: str | None
    reason: str = ""  # why it stopped (EC2's StateReason code: Server.SpotInstanceTermination)
    zone: str = ""  # its availability zone


@dataclass(frozen=True, slots=True)
class CloudAnnex:
    """An annex as the cloud holds it (one refresh)."""

    name: str
    owner: str
    lease_end: float
    requested: int  # on-demand instances plus fleet capacity asked for
    instances: tuple[Instance, ...]
    fleets: tuple[tuple[str, str], ...]  # (request id, state): spot fleets, scale sets
    settings: Mapping[str, Any]
    replaced: frozenset[str] = frozenset()  # instances the cloud ended, since replaced
    # Instances the cloud ended that it no longer lists (Azure deletes an evicted Spot
    # VM), and how many of those were asked for again: counts, as no id is left.
    evicted: int = 0
    restored: int = 0
    # "TYPE ZONE" -> ((since, USD an hour), ...) in time order: the spot price history of
    # the annex's spot instances (from the cloud, for their spend)
    spot_prices: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)


class Cloud(Protocol):
    """One cloud's side of the annexes of one account and region (`AwsAnnexes`,
    `AzureAnnexes`): the lease, the annex's values (its token, lease end and launch
    settings, by `what`), its instances."""

    kind: str  # "ec2" or "azure", as the ad's Cloud says
    region: str
    scope: str  # where in the account: Azure's resource group ("" on AWS)
    clock: Callable[[], float]

    @property
    def calls(self) -> int: ...  # the cloud calls made so far

    def check_setup(self) -> None: ...
    def lease_of(self, name: str) -> float | None: ...
    def start_lease(self, name: str, owner: str, expiration: float) -> None: ...
    def move_lease(self, name: str, expiration: float) -> None: ...
    def put(self, name: str, what: str, value: str, *, secure: bool = False,
            expires: float | None = None) -> None: ...  # fmt: skip
    def get(self, name: str, what: str) -> str | None: ...
    def boot_settings(self, name: str) -> dict[str, Any]: ...
    def request(self, spec: AnnexSpec, user_data: str, expiration: float) -> list[str]: ...
    def end(self, name: str) -> dict[str, Any]: ...
    def names(self) -> list[str]: ...
    def describe(self, only: str | None = None) -> list[CloudAnnex]: ...
