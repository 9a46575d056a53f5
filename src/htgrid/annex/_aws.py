"""The annex on AWS: a user's calls (create, add, extend, shutdown, describe).

The cloud is the only record: an annex is its lease rule (`htgrid-annex-NAME`, whose
target's input holds the lease end), its SSM parameters under /htgrid/annex/NAME/ (the
lease end for the instances, the launch settings `add` reuses), its token (a SecureString
under /htgrid/annex-token/OWNER/), its instances' role and profile (`instance_role`) and
what is tagged `htgrid:AnnexName = NAME` (instances, spot-fleet requests). OWNER, its
owner, is the IAM user who made it, or, for a principal that is no IAM user (single
sign-on), HTGRID_ANNEX_OWNER: the value of the principal tag `htgrid annex setup
--principal-tag` named. Everything the annex makes is tagged with it (OWNER_TAG), and
the users' policy (`_policy`) lets only the owner change or end it. So a crash of this
tool at any moment leaves nothing the lease function will not end: the rule is made
first, then its target, then the role, the parameters, then the instances are requested.

boto3 finds credentials and endpoints its usual way (AWS_PROFILE, AWS_ENDPOINT_URL, ...).
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from htgrid.annex._aws_describe import instance_of, spot_prices
from htgrid.annex._errors import AnnexCloudError, AnnexNotFound, AnnexUsageError, SetupMissing
from htgrid.annex._policy import FLEET_ROLE, REGION_TAG, instance_policy_arn, trust
from htgrid.annex._spec import (
    AnnexSpec,
    CloudAnnex,
    Instance,
    lease_parameter,
    token_parameter,
)
from htgrid.annex.lease_function import (
    ANNEX_TAG,
    LEASE_TAG,
    OWNER_TAG,
    PARAMETER_ROOT,
    ROLE_PATH,
    RULE_PREFIX,
    SWEEPER_RULE,
    enforce,
    instance_role,
    lease_input,
    rule_name,
)

__all__ = ["AwsAnnexes", "CloudAnnex", "Instance", "config_parameter"]

#: condor_annex's tag, so its users' tools still find the instances.
HTCONDOR_TAG: Final = "htcondor:AnnexName"
#: The annexes' owner for a principal with no IAM user name (the principal tag's value).
OWNER_ENV: Final = "HTGRID_ANNEX_OWNER"
# What an owner may be: it is in SSM parameter names (the token's path) and tags.
_OWNER: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: The key of the launch settings naming the annex's owner in the cloud (OWNER_TAG's
#: value; the settings' "owner" is the pool's user its slots run jobs of).
CLOUD_OWNER: Final = "cloud_owner"
#: On a request made to replace instances the cloud ended: their ids, space-separated.
REPLACES_TAG: Final = "htgrid:Replaces"
#: How many ids one REPLACES_TAG holds (a tag's value is at most 256 characters).
REPLACE_BATCH: Final = 12
_TARGET_ID: Final = "lease"
# The smallest lease worth starting: instances take minutes to boot.
MIN_LEASE: Final = 60.0
# How long a new instance profile may take to be usable by EC2 (IAM is eventually
# consistent: "Invalid IAM Instance Profile name" for some seconds after it is made).
_PROFILE_WAIT: Final = 60.0
_PROFILE_POLL: Final = 2.0
_EC2_TRUST: Final = trust("ec2.amazonaws.com")


def config_parameter(name: str) -> str:
    """The SSM String holding the annex's launch settings (what `add` launches again)."""
    return f"{PARAMETER_ROOT}/{name}/config"


class AwsAnnexes:
    """One account and region's annexes. `clients(service)` gives a boto3 client (tests
    may give their own); `calls` counts the cloud calls made (a status refresh makes
    the same few, whatever the number of instances). `owner`: whose annexes these are
    (default HTGRID_ANNEX_OWNER, else the caller's IAM user name)."""

    def __init__(self, region: str, *, clients: Callable[[str], Any] | None = None,
                 clock: Callable[[], float] = time.time, owner: str | None = None) -> None:  # fmt: skip
        self.region = region
        self._owner = owner or os.environ.get(OWNER_ENV) or None
        self.clock = clock
        self.calls = 0
        self._made: dict[str, Any] = {}
        self._factory = clients
        self._identity: dict[str, str] = {}
        self._owners: dict[str, str] = {}  # annex -> the IAM user its token is under
        self.sleep: Callable[[float], None] = time.sleep

    def client(self, service: str) -> Any:
        if service not in self._made:
            if self._factory is not None:
                self._made[service] = self._factory(service)
            else:
                import boto3  # type: ignore[import-untyped]

                self._made[service] = boto3.session.Session(region_name=self.region).client(service)
        return self._made[service]

    def call(self, service: str, operation: str, **kwargs: Any) -> Any:
        """One cloud call; its error as AnnexCloudError naming it."""
        from botocore.exceptions import (  # type: ignore[import-untyped]
            BotoCoreError,
            ClientError,
        )

        self.calls += 1
        try:
            return getattr(self.client(service), operation)(**kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise AnnexCloudError(
                f"{service} {operation} in {self.region}: {error.get('Code', '?')}: "
                f"{error.get('Message', exc)}"
            ) from None
        except BotoCoreError as exc:
            raise AnnexCloudError(f"{service} {operation} in {self.region}: {exc}") from None

    def call_or_none(self, service: str, operation: str, codes: Sequence[str], **kw: Any) -> Any:
        """The call's answer, or None when it fails with one of `codes`."""
        from botocore.exceptions import ClientError

        self.calls += 1
        try:
            return getattr(self.client(service), operation)(**kw)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in codes:
                return None
            error = exc.response.get("Error", {})
            raise AnnexCloudError(
                f"{service} {operation} in {self.region}: {error.get('Code', '?')}: "
                f"{error.get('Message', exc)}"
            ) from None

    def pages(self, service: str, operation: str, key: str, **kwargs: Any) -> Iterator[Any]:
        """Every item of a paginated answer (a call per page)."""
        while True:
            page = self.call(service, operation, **kwargs)
            yield from page.get(key, [])
            token = page.get("NextToken")
            if not token:
                return
            kwargs["NextToken"] = token

    # ---- the annex commands' calls (the `Cloud` protocol) ---------------------------

    kind = "ec2"
    scope = ""

    def check_setup(self) -> None:
        self.lease_function_arn()

    def start_lease(self, name: str, owner: str, expiration: float) -> None:
        # Tagged with its owner in the cloud (`owner()`), not the pool's (`owner`), which
        # the settings keep: the policy lets the one who made it end it.
        self.install_lease(name, self.owner(), expiration, self.lease_function_arn())
        # After the rule: whatever is made from here on, the lease function deletes.
        self.make_instance_role(name)

    def move_lease(self, name: str, expiration: float) -> None:
        self.set_lease_target(name, expiration, self.lease_function_arn())
        self.set_lease_tag(name, expiration)

    def put(self, name: str, what: str, value: str, *, secure: bool = False,
            expires: float | None = None) -> None:  # fmt: skip
        """The SSM parameter PARAMETER_ROOT/NAME/WHAT; the token a SecureString under its
        owner's TOKEN_ROOT, which SSM itself deletes at `expires` (the lease's end)."""
        if what == "token":
            self.put_parameter(self.token_path(name), value, secure=True, expires=expires)
            return
        if what == "config":
            value = _with_owner(value, self.owner())
        self.put_parameter(f"{PARAMETER_ROOT}/{name}/{what}", value, secure=secure,
                           tags={OWNER_TAG: self.owner()})  # fmt: skip

    def get(self, name: str, what: str) -> str | None:
        if what == "token":
            return self.get_parameter(self.token_path(name))
        return self.get_parameter(f"{PARAMETER_ROOT}/{name}/{what}")

    def boot_settings(self, name: str) -> dict[str, Any]:
        return {
            "cloud": "ec2",
            "region": self.region,
            "token_parameter": self.token_path(name),
            "lease_parameter": lease_parameter(name),
        }

    # ---- the token, readable by its owner and its annex's instances only ------------

    def _caller(self) -> dict[str, str]:
        if not self._identity:
            answer = self.call("sts", "get_caller_identity")
            self._identity = {"account": str(answer["Account"]), "arn": str(answer["Arn"])}
        return self._identity

    def owner(self) -> str:
        """Whose annexes these are: the one configured, else the caller's IAM user name
        (`${aws:username}`: the last part of its ARN)."""
        if self._owner is None:
            arn = self._caller()["arn"]
            if ":user/" not in arn:
                raise AnnexUsageError(
                    f"you are signed in as {arn}, which is no IAM user (single sign-on, a "
                    f"role): set {OWNER_ENV} to the value of the principal tag your "
                    "administrator's `htgrid annex setup --principal-tag KEY` names"
                )
            self._owner = arn.rpartition("/")[2]
        if not _OWNER.fullmatch(self._owner):
            raise AnnexUsageError(
                f"annex owner {self._owner!r} (your IAM user name, or {OWNER_ENV}) cannot "
                "name SSM parameters: letters, digits, '.', '_' and '-' only (ask your "
                "administrator for a principal tag that has such a value)"
            )
        return self._owner

    def token_path(self, name: str) -> str:
        """The annex's token: under its owner's (its role's tag), else the caller's."""
        if name not in self._owners:
            role = self.call_or_none(
                "iam", "get_role", ["NoSuchEntity"], RoleName=instance_role(name, self.region)
            )
            tags = (role or {}).get("Role", {}).get("Tags")
            self._owners[name] = _tag(tags, OWNER_TAG) or self.owner()
        return token_parameter(name, self._owners[name])

    def make_instance_role(self, name: str) -> str:
        """The annex's instance role and profile (`instance_role`), tagged with the
        annex, its owner (the caller) and region: INSTANCE_POLICY lets them read the
        token these tags name, nothing else."""
        role = instance_role(name, self.region)
        owner = self.owner()
        policy = instance_policy_arn(self._caller()["account"])
        tags = [
            {"Key": ANNEX_TAG, "Value": name},
            {"Key": OWNER_TAG, "Value": owner},
            {"Key": REGION_TAG, "Value": self.region},
        ]
        self.call_or_none(
            "iam", "create_role", ["EntityAlreadyExists"], RoleName=role, Path=ROLE_PATH,
            AssumeRolePolicyDocument=_EC2_TRUST, PermissionsBoundary=policy, Tags=tags,
            Description=f"htgrid annex {name} in {self.region}: its instances",
        )  # fmt: skip
        self.call("iam", "attach_role_policy", RoleName=role, PolicyArn=policy)
        if self.call_or_none(
            "iam", "create_instance_profile", ["EntityAlreadyExists"],
            InstanceProfileName=role, Path=ROLE_PATH, Tags=tags,
        ) is not None:  # fmt: skip
            self.call("iam", "add_role_to_instance_profile", InstanceProfileName=role,
                      RoleName=role)  # fmt: skip
        self._owners[name] = owner
        return role

    def _launch(self, operation: str, **kwargs: Any) -> Any:
        """`operation`, retried while EC2 does not know the new instance profile yet."""
        for _ in range(int(_PROFILE_WAIT / _PROFILE_POLL)):
            try:
                return self.call("ec2", operation, **kwargs)
            except AnnexCloudError as exc:
                if "instance profile" not in str(exc).lower():
                    raise
            self.sleep(_PROFILE_POLL)
        return self.call("ec2", operation, **kwargs)

    # ---- the lease ------------------------------------------------------------------

    def lease_function_arn(self) -> str:
        """The lease function setup installed (SetupMissing if none)."""
        targets = self.call_or_none(
            "events", "list_targets_by_rule", ["ResourceNotFoundException"], Rule=SWEEPER_RULE
        )
        for target in (targets or {}).get("Targets", []):
            return str(target["Arn"])
        raise SetupMissing(
            f"no annex lease function in {self.region}: the account's administrator runs "
            f"`htgrid annex setup --region {self.region}` once"
        )

    def lease_of(self, name: str) -> float | None:
        """When `name`'s lease ends (None: no such annex, or only half made)."""
        targets = self.call_or_none(
            "events", "list_targets_by_rule", ["ResourceNotFoundException"], Rule=rule_name(name)
        )
        for target in (targets or {}).get("Targets", []):
            try:
                return float(json.loads(target["Input"])["LeaseExpiration"])
            except (KeyError, ValueError, TypeError):
                continue
        return None

    def install_lease(self, name: str, owner: str, expiration: float, function: str) -> None:
        """The rule, then its target: from here on the annex ends by `expiration`."""
        self.call(
            "events",
            "put_rule",
            Name=rule_name(name),
            ScheduleExpression="rate(1 minute)",
            State="ENABLED",
            Description=f"htgrid annex {name}: ends it at its lease's end",
            Tags=[
                {"Key": ANNEX_TAG, "Value": name},
                {"Key": LEASE_TAG, "Value": str(int(expiration))},
                {"Key": OWNER_TAG, "Value": owner},
            ],
        )
        self.set_lease_target(name, expiration, function)

    def set_lease_tag(self, name: str, expiration: float) -> None:
        """The rule's lease tag, which the sweeper reads for a rule left without a target."""
        rule = rule_name(name)
        arn = next(
            (r["Arn"] for r in self.pages("events", "list_rules", "Rules", NamePrefix=rule)
             if r.get("Name") == rule),
            None,
        )  # fmt: skip
        if arn is None:
            raise AnnexNotFound(f"no annex {name!r} in {self.region}")
        self.call(
            "events",
            "tag_resource",
            ResourceARN=arn,
            Tags=[{"Key": LEASE_TAG, "Value": str(int(expiration))}],
        )

    def set_lease_target(self, name: str, expiration: float, function: str) -> None:
        self.set_lease_target_raw(rule_name(name), function, lease_input(name, expiration))

    def set_lease_target_raw(self, rule: str, function: str, event: str) -> None:
        """`rule` invokes `function` with `event` (replacing what it invoked before)."""
        answer = self.call(
            "events",
            "put_targets",
            Rule=rule,
            Targets=[{"Id": _TARGET_ID, "Arn": function, "Input": event}],
        )
        if answer.get("FailedEntryCount"):
            raise AnnexCloudError(
                f"events put_targets in {self.region}: {answer.get('FailedEntries')}"
            )

    def put_parameter(self, name: str, value: str, *, secure: bool = False,
                      expires: float | None = None, tags: Mapping[str, str] | None = None) -> None:  # fmt: skip
        """`name` set to `value`; made with `tags` if new (SSM takes tags only on a
        parameter it makes: one there already is overwritten)."""
        args: dict[str, Any] = {"Name": name, "Value": value, "Overwrite": True}
        args["Type"] = "SecureString" if secure else "String"
        if tags:
            new = {**args, "Overwrite": False, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}  # fmt: skip
            if self.call_or_none("ssm", "put_parameter", ["ParameterAlreadyExists"], **new):
                return
        if expires is not None:
            # SSM deletes it then, the lease function or not (an advanced parameter's).
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(expires))
            args["Tier"] = "Advanced"
            args["Policies"] = json.dumps(
                [{"Type": "Expiration", "Version": "1.0", "Attributes": {"Timestamp": stamp}}]
            )
        self.call("ssm", "put_parameter", **args)

    def get_parameter(self, name: str) -> str | None:
        answer = self.call_or_none("ssm", "get_parameter", ["ParameterNotFound"], Name=name)
        return None if answer is None else str(answer["Parameter"]["Value"])

    # ---- requests -------------------------------------------------------------------

    def account(self) -> str:
        return self._caller()["account"]

    def request(self, spec: AnnexSpec, user_data: str, expiration: float,
                replaces: Sequence[str] = ()) -> list[str]:  # fmt: skip
        """Ask for the spec's instances (or fleet); the ids of instances or requests.
        `replaces`: the instances the cloud ended that these replace (at most
        REPLACE_BATCH), named on the request so that no refresh replaces them again."""
        tags = [
            {"Key": ANNEX_TAG, "Value": spec.name},
            {"Key": HTCONDOR_TAG, "Value": spec.name},
            {"Key": OWNER_TAG, "Value": self.owner()},
            *({"Key": k, "Value": v} for k, v in spec.tags),
        ]
        if replaces:
            tags.append({"Key": REPLACES_TAG, "Value": " ".join(replaces[:REPLACE_BATCH])})
        if spec.project_id:
            tags.append({"Key": "htgrid:ProjectId", "Value": spec.project_id})
        token = f"{spec.name}_{uuid.uuid4().hex}"  # condor_annex's ClientToken
        if spec.slots:
            return [self._fleet(spec, user_data, expiration, tags, token)]
        if not spec.count:
            return []
        args: dict[str, Any] = {
            "ImageId": spec.image_for(0),
            "InstanceType": spec.instance_types[0].partition(":")[0],
            "MinCount": spec.count,
            "MaxCount": spec.count,
            "ClientToken": token,
            "UserData": user_data,
            "InstanceInitiatedShutdownBehavior": "terminate",
            "IamInstanceProfile": {"Name": instance_role(spec.name, self.region)},
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tags},
                {"ResourceType": "volume", "Tags": tags},
            ],
        }
        args.update(self._placement(spec))
        answer = self._launch("run_instances", **args)
        return [i["InstanceId"] for i in answer.get("Instances", [])]

    @staticmethod
    def _placement(spec: AnnexSpec) -> dict[str, Any]:
        args: dict[str, Any] = {}
        if spec.keypair:
            args["KeyName"] = spec.keypair
        if spec.subnet:
            args["SubnetId"] = spec.subnet
        if spec.security_groups:
            args["SecurityGroupIds"] = list(spec.security_groups)
        return args

    def _fleet(self, spec: AnnexSpec, user_data: str, expiration: float,
               tags: list[dict[str, str]], token: str) -> str:  # fmt: skip
        encoded = base64.b64encode(user_data.encode()).decode()
        specs = []
        for index, entry in enumerate(spec.instance_types):
            kind, _, weight = entry.partition(":")
            launch: dict[str, Any] = {
                "ImageId": spec.image_for(index),
                "InstanceType": kind,
                "WeightedCapacity": float(weight or 1),
                "UserData": encoded,
                "IamInstanceProfile": {"Name": instance_role(spec.name, self.region)},
                "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
            }
            placement = self._placement(spec)
            if "SecurityGroupIds" in placement:
                launch["SecurityGroups"] = [
                    {"GroupId": g} for g in placement.pop("SecurityGroupIds")
                ]
            launch.update(placement)
            specs.append(launch)
        config: dict[str, Any] = {
            "ClientToken": token,
            "IamFleetRole": f"arn:aws:iam::{self.account()}:role/{FLEET_ROLE}",
            "TargetCapacity": spec.slots,
            # "request": an instance gone (idle, reclaimed) is not replaced, so idle
            # shutdown works; AWS itself ends the fleet at the lease's end too.
            "Type": "request",
            "AllocationStrategy": "lowestPrice",
            "LaunchSpecifications": specs,
            "ValidUntil": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expiration)),
            "TerminateInstancesWithExpiration": True,
            "TagSpecifications": [{"ResourceType": "spot-fleet-request", "Tags": tags}],
        }
        if spec.spot_price is not None:
            config["SpotPrice"] = spec.spot_price
        answer = self._launch("request_spot_fleet", SpotFleetRequestConfig=config)
        return str(answer["SpotFleetRequestId"])

    # ---- ending ---------------------------------------------------------------------

    def end(self, name: str) -> dict[str, Any]:
        """Shut `name` down now: what the lease function does at the lease's end
        (pending fleet requests cancelled, instances terminated, secrets and rule gone)."""
        token = self.token_path(name)
        self.calls += 1
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return enforce(self.client, name, float("-inf"), self.clock(), token, self.owner())
        except (ClientError, BotoCoreError) as exc:
            raise AnnexCloudError(f"shutting down annex {name} in {self.region}: {exc}") from None

    # ---- what there is --------------------------------------------------------------

    def names(self) -> list[str]:
        """Every annex with a lease rule in this region."""
        return sorted(
            r["Name"][len(RULE_PREFIX) :]
            for r in self.pages("events", "list_rules", "Rules", NamePrefix=RULE_PREFIX)
        )

    def describe(self, only: str | None = None) -> list[CloudAnnex]:
        """The annexes (or `only`), each with its instances and fleets: one listing of
        rules, one of parameters, one of instances and one of fleets, however many."""
        names = [only] if only is not None else self.names()
        if only is not None and self.lease_of(only) is None:
            raise AnnexNotFound(f"no annex {only!r} in {self.region}")
        params: dict[str, str] = {
            p["Name"]: p["Value"]
            for p in self.pages(
                "ssm", "get_parameters_by_path", "Parameters", Path=PARAMETER_ROOT, Recursive=True
            )
        }
        settings_of = {n: _settings(params.get(config_parameter(n))) for n in names}
        # An annex's are what is tagged with its name AND its owner (the one its settings
        # record, which only the owner may write): another user may tag its own with the
        # name, but they are not the annex's to count, nor to spend on.
        owners = {n: s.get(CLOUD_OWNER) for n, s in settings_of.items()}

        def mine(annex: str, tags: Any) -> bool:
            owner = owners.get(annex)
            return not isinstance(owner, str) or _tag(tags, OWNER_TAG) == owner

        instances: dict[str, list[Instance]] = {}
        replaced: dict[str, set[str]] = {}
        filters = [{"Name": "tag-key", "Values": [ANNEX_TAG]}]
        if only is not None:
            filters = [{"Name": f"tag:{ANNEX_TAG}", "Values": [only]}]
        for reservation in self.pages(
            "ec2", "describe_instances", "Reservations", Filters=filters, MaxResults=1000
        ):
            for i in reservation.get("Instances", []):
                annex = _tag(i.get("Tags"), ANNEX_TAG)
                if annex is not None and mine(annex, i.get("Tags")):
                    instances.setdefault(annex, []).append(instance_of(i))
                    replaced.setdefault(annex, set()).update(_replaces(i.get("Tags")))
        fleets: dict[str, list[tuple[str, str]]] = {}
        for config in self.pages("ec2", "describe_spot_fleet_requests", "SpotFleetRequestConfigs"):
            annex = _tag(config.get("Tags"), ANNEX_TAG)
            if annex is not None and mine(annex, config.get("Tags")):
                fleets.setdefault(annex, []).append(
                    (config["SpotFleetRequestId"], config.get("SpotFleetRequestState", "?"))
                )
                replaced.setdefault(annex, set()).update(_replaces(config.get("Tags")))
        prices = spot_prices(self.pages, [i for n in names for i in instances.get(n, ())])
        out = []
        for name in names:
            settings = settings_of[name]
            lease = params.get(lease_parameter(name))
            out.append(
                CloudAnnex(
                    name=name,
                    owner=str(settings.get("owner", "")),
                    lease_end=float(lease) if lease else float(self.lease_of(name) or 0),
                    requested=int(settings.get("requested", 0)),
                    instances=tuple(instances.get(name, ())),
                    fleets=tuple(fleets.get(name, ())),
                    settings=settings,
                    replaced=frozenset(replaced.get(name, ())),
                    spot_prices={
                        k: v
                        for k, v in prices.items()
                        if any(f"{i.instance_type} {i.zone}" == k for i in instances.get(name, ()))
                    },
                )
            )
        return out

    def has_token(self, name: str) -> bool:
        return self.get_parameter(self.token_path(name)) is not None


def _tag(tags: Any, key: str) -> str | None:
    return next((t.get("Value") for t in tags or () if t.get("Key") == key), None)


def _with_owner(config: str, owner: str) -> str:
    """The launch settings `config` (JSON), recording the annex's owner in the cloud."""
    try:
        settings = json.loads(config)
    except ValueError:
        return config
    if not isinstance(settings, dict):
        return config
    return json.dumps({**settings, CLOUD_OWNER: owner}, sort_keys=True)


def _settings(text: str | None) -> dict[str, Any]:
    try:
        settings = json.loads(text or "{}")
    except ValueError:
        return {}
    return settings if isinstance(settings, dict) else {}


def _replaces(tags: Any) -> list[str]:
    return (_tag(tags, REPLACES_TAG) or "").split()


def check_lease_left(expiration: float, now: float) -> None:
    """AnnexUsageError when the lease would end before instances could boot."""
    if expiration - now < MIN_LEASE:
        raise AnnexUsageError(
            f"the lease ends in {max(0, int(expiration - now))} s: at least {int(MIN_LEASE)} s "
            "are needed for instances to boot"
        )
