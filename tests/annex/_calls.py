"""What IAM authorizes for each boto3 call the annex makes, as IAM would see it: the
action, the resource's ARN and the request's context (the caller's principal keys, the
tags in the request, the tags the resource has in moto, and the service's own keys).

moto checks a call's action only (../shared/reference/moto-for-annex.md); `Checked`
clients evaluate each call with `_iam` against the policy a user holds, before moto runs
it: recording a refusal, or refusing it as AWS would (AccessDenied, nothing done)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import boto3
from botocore.exceptions import ClientError

from htgrid.annex import lease_function as lf

from ._iam import allowed
from .conftest import REGION, boto

ACCOUNT = "123456789012"
SSM = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter"
ROLES = f"arn:aws:iam::{ACCOUNT}:role{lf.ROLE_PATH}"
EC2 = f"arn:aws:ec2:{REGION}:{ACCOUNT}"
RULES = f"arn:aws:events:{REGION}:{ACCOUNT}:rule/"

Request = tuple[str, str, dict[str, Any]]


def as_user(user: str) -> Callable[[str], Any]:
    """boto3 clients with `user`'s own keys (an IAM user made for it)."""
    iam = boto("iam")
    iam.create_user(UserName=user)  # type: ignore[attr-defined]
    key = iam.create_access_key(UserName=user)["AccessKey"]  # type: ignore[attr-defined]
    session = boto3.session.Session(
        region_name=REGION,
        aws_access_key_id=key["AccessKeyId"],
        aws_secret_access_key=key["SecretAccessKey"],
    )
    return session.client


@functools.cache
def admin(service: str) -> Any:
    """One client for the checks' own look-ups (a client is slow to make)."""
    return boto(service)


def _tags(raw: Any, prefix: str) -> dict[str, str]:
    return {f"{prefix}/{t['Key']}": t["Value"] for t in raw or ()}


def _request_tags(tags: Any) -> dict[str, Any]:
    ctx: dict[str, Any] = _tags(tags, "aws:RequestTag")
    if tags:
        ctx["aws:TagKeys"] = [t["Key"] for t in tags]
    return ctx


def _parameter_tags(name: str) -> dict[str, str]:
    try:
        raw = admin("ssm").list_tags_for_resource(ResourceType="Parameter", ResourceId=name)
    except ClientError:
        return {}  # none yet
    tags = raw.get("TagList")
    return {**_tags(tags, "aws:ResourceTag"), **_tags(tags, "ssm:resourceTag")}


def _rule_tags(arn: str) -> dict[str, str]:
    try:
        raw = admin("events").list_tags_for_resource(ResourceARN=arn)
    except ClientError:
        return {}
    return _tags(raw.get("Tags"), "aws:ResourceTag")


def _ec2_tags(raw: Any) -> dict[str, str]:
    return {**_tags(raw, "ec2:ResourceTag"), **_tags(raw, "aws:ResourceTag")}


def _instance_tags(instance: str) -> dict[str, str]:
    pages = admin("ec2").describe_instances(InstanceIds=[instance])["Reservations"]
    return _ec2_tags(pages[0]["Instances"][0].get("Tags"))


def _fleet_tags(fleet: str) -> dict[str, str]:
    (config,) = admin("ec2").describe_spot_fleet_requests(SpotFleetRequestIds=[fleet])[
        "SpotFleetRequestConfigs"
    ]
    return _ec2_tags(config.get("Tags"))


def _of_type(specs: Any, kind: str) -> Any:
    return next((s["Tags"] for s in specs or () if s["ResourceType"] == kind), None)


def requests(service: str, operation: str, kw: Mapping[str, Any], me: Mapping[str, str]) -> list[Request]:  # fmt: skip
    """What IAM authorizes for one call by the principal `me` (its context keys)."""
    action = f"{service}:{''.join(w.title() for w in operation.split('_'))}"
    if service == "ssm":
        return _ssm(action, kw, me)
    if service == "events":
        return _events(action, operation, kw, me)
    if service == "iam":
        return _iam_calls(action, operation, kw, me)
    if service == "ec2":
        return _ec2(action, operation, kw, me)
    return [(action, "*", dict(me))]


def _ssm(action: str, kw: Mapping[str, Any], me: Mapping[str, str]) -> list[Request]:
    if "Path" in kw:
        return [(action, f"{SSM}{kw['Path']}", dict(me))]
    out = []
    for name in kw.get("Names") or [kw["Name"]]:
        ctx = {**me, **_parameter_tags(name), **_request_tags(kw.get("Tags"))}
        out.append((action, f"{SSM}{name}", ctx))
        if kw.get("Tags"):
            out.append(("ssm:AddTagsToResource", f"{SSM}{name}", ctx))
    return out


def _events(action: str, operation: str, kw: Mapping[str, Any], me: Mapping[str, str]) -> list[Request]:  # fmt: skip
    rule = kw.get("Rule") or kw.get("Name")
    arn = kw.get("ResourceARN") or (f"{RULES}{rule}" if rule else None)
    if arn is None:
        return [(action, "*", dict(me))]
    ctx = {**me, **_rule_tags(arn), **_request_tags(kw.get("Tags"))}
    if operation == "put_targets":
        return [(action, arn, {**ctx, "events:TargetArn": t["Arn"]}) for t in kw["Targets"]]
    out = [(action, arn, ctx)]
    if operation == "put_rule" and kw.get("Tags"):
        out.append(("events:TagResource", arn, ctx))
    return out


def _ec2(action: str, operation: str, kw: Mapping[str, Any], me: Mapping[str, str]) -> list[Request]:  # fmt: skip
    if operation == "terminate_instances":
        return [
            (action, f"{EC2}:instance/{i}", {**me, **_instance_tags(i)}) for i in kw["InstanceIds"]
        ]
    if operation == "cancel_spot_fleet_requests":
        return [
            (action, f"{EC2}:spot-fleet-request/{f}", {**me, **_fleet_tags(f)})
            for f in kw["SpotFleetRequestIds"]
        ]
    if operation == "create_tags":
        return [
            (
                action,
                f"{EC2}:instance/{i}",
                {**me, **_instance_tags(i), **_request_tags(kw["Tags"])},
            )
            for i in kw["Resources"]
        ]
    if operation == "run_instances":
        out: list[Request] = [
            (action, f"arn:aws:ec2:{REGION}::image/{kw['ImageId']}", dict(me)),
            (action, f"{EC2}:network-interface/*", dict(me)),
            (action, f"{EC2}:security-group/*", dict(me)),
            (action, f"{EC2}:subnet/*", dict(me)),
        ]
        for kind in ("instance", "volume"):
            tags = _of_type(kw.get("TagSpecifications"), kind)
            ctx = {**me, **_request_tags(tags)}
            out.append((action, f"{EC2}:{kind}/*", ctx))
            if tags:
                made = {**ctx, "ec2:CreateAction": "RunInstances"}
                out.append(("ec2:CreateTags", f"{EC2}:{kind}/*", made))
        return out + _pass(kw["IamInstanceProfile"]["Name"], me)
    if operation == "request_spot_fleet":
        config = kw["SpotFleetRequestConfig"]
        tags = _of_type(config.get("TagSpecifications"), "spot-fleet-request")
        ctx = {**me, **_request_tags(tags)}
        fleet = f"{EC2}:spot-fleet-request/*"
        out = [(action, fleet, ctx)]
        if tags:
            out.append(("ec2:CreateTags", fleet, {**ctx, "ec2:CreateAction": "RequestSpotFleet"}))
        role = {**me, "iam:PassedToService": "spotfleet.amazonaws.com"}
        out.append(("iam:PassRole", config["IamFleetRole"], role))
        for spec in config["LaunchSpecifications"]:
            out += _pass(spec["IamInstanceProfile"]["Name"], me)
        return out
    return [(action, "*", dict(me))]


def _role_tags(role: str) -> dict[str, str]:
    try:
        found = admin("iam").get_role(RoleName=role)["Role"]
    except ClientError:
        return {}
    return _tags(found.get("Tags"), "iam:ResourceTag")


def _profile_tags(profile: str) -> dict[str, str]:
    try:
        found = admin("iam").get_instance_profile(InstanceProfileName=profile)
    except ClientError:
        return {}
    return _tags(found["InstanceProfile"].get("Tags"), "aws:ResourceTag")


def _boundary_of(role: str) -> str:
    try:
        found = admin("iam").get_role(RoleName=role)["Role"]
    except ClientError:
        return ""
    return str(found.get("PermissionsBoundary", {}).get("PermissionsBoundaryArn", ""))


def _iam_calls(action: str, operation: str, kw: Mapping[str, Any], me: Mapping[str, str]) -> list[Request]:  # fmt: skip
    role = kw.get("RoleName") or kw.get("InstanceProfileName")
    ctx: dict[str, Any] = {**me, **_role_tags(role)}
    ctx["iam:PermissionsBoundary"] = kw.get("PermissionsBoundary") or _boundary_of(role)
    if "PolicyArn" in kw:
        ctx["iam:PolicyARN"] = kw["PolicyArn"]
    for tag in kw.get("Tags", []):
        ctx[f"aws:RequestTag/{tag['Key']}"] = tag["Value"]
    kind = "instance-profile" if "InstanceProfile" in action else "role"
    if kind == "instance-profile":
        ctx.update(_profile_tags(kw["InstanceProfileName"]))
    out = [(action, f"arn:aws:iam::{ACCOUNT}:{kind}{lf.ROLE_PATH}{role}", ctx)]
    if operation == "create_role" and kw.get("Tags"):
        out.append(("iam:TagRole", out[0][1], ctx))
    if operation == "create_instance_profile" and kw.get("Tags"):
        out.append(("iam:TagInstanceProfile", out[0][1], ctx))
    if operation == "add_role_to_instance_profile":
        out += _pass(kw["RoleName"], me)
    return out


def _pass(role: str, me: Mapping[str, str]) -> list[Request]:
    ctx = {**me, "iam:PassedToService": "ec2.amazonaws.com", **_role_tags(role)}
    return [("iam:PassRole", f"{ROLES}{role}", ctx)]


class Checked:
    """A boto3 client whose every call is first judged by IAM's rules (`requests`,
    `allowed`) against `policy`, for the principal `me`. Refusals are recorded in
    `refused`; with `enforce`, a refused call raises AccessDenied and does nothing, as
    AWS would. `seen` records every action checked."""

    def __init__(self, client: Any, service: str, policy: Sequence[Mapping[str, Any]],
                 me: Mapping[str, str], *, enforce: bool = False) -> None:  # fmt: skip
        self.client, self.service, self.policy, self.me = client, service, policy, me
        self.enforce = enforce
        self.refused: list[str] = []
        self.seen: list[str] = []

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.client, name)
        if name == "meta":
            return call

        def checked(**kwargs: Any) -> Any:
            denied = []
            for action, resource, ctx in requests(self.service, name, kwargs, self.me):
                self.seen.append(action)
                if not allowed(self.policy, action, resource, ctx):
                    denied.append(f"{action} on {resource}")
            self.refused += denied
            if denied and self.enforce:
                raise ClientError(
                    {"Error": {"Code": "AccessDenied", "Message": "; ".join(denied)}}, name
                )
            return call(**kwargs)

        return checked


def checked_clients(user_clients: Callable[[str], Any], policy: Sequence[Mapping[str, Any]],
                    me: Mapping[str, str], *, enforce: bool = False) -> tuple[Callable[[str], Any], list[str], list[str]]:  # fmt: skip
    """A client factory of `Checked` clients (one each service), and its refusals and
    actions seen, shared by them all."""
    made: dict[str, Checked] = {}
    refused: list[str] = []
    seen: list[str] = []

    def client(service: str) -> Any:
        if service not in made:
            made[service] = Checked(user_clients(service), service, policy, me, enforce=enforce)
            made[service].refused = refused
            made[service].seen = seen
        return made[service]

    return client, refused, seen
