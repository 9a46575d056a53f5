"""Each annex's token is readable by its owner and by its own instances only.

moto checks a call's action, not its resource or conditions (and not iam:PassRole:
../shared/reference/moto-for-annex.md), so the annexes are made in moto by two IAM users
and the policies IAM would judge them by are evaluated here (`_iam`), against the ARNs,
tags and roles the code made there: the user's printed policy, and each annex's
instance role's policies and permissions boundary as moto holds them."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from htgrid.annex import AnnexSpec, AwsAnnexes, instance_policy, settings_of, user_policy
from htgrid.annex import lease_function as lf

from ._calls import ACCOUNT, ROLES, SSM, as_user, checked_clients
from ._iam import allowed
from .conftest import IMAGE, REGION, annexes, boto


@pytest.fixture
def made(aws: str, home: Path) -> dict[str, AwsAnnexes]:
    """Alice's annexes x and y, Bob's annex b; each user's cloud."""
    clouds = {user: AwsAnnexes(REGION, clients=as_user(user)) for user in ("alice", "bob")}
    for user, names in (("alice", ("x", "y")), ("bob", ("b",))):
        ann = annexes(home)
        ann.aws = clouds[user]
        for name in names:
            ann.create(AnnexSpec(name, count=1, lifetime=3600, image_ids=(IMAGE,)))
    return clouds


def _token_arn(name: str) -> str:
    (found,) = (
        p["ARN"]
        for p in boto("ssm").get_parameters_by_path(Path=lf.TOKEN_ROOT, Recursive=True)[  # type: ignore[attr-defined]
            "Parameters"
        ]
        if p["Name"].endswith(f"/{name}")
    )
    return str(found)


def test_a_user_cannot_read_another_users_annex_token(made: dict[str, AwsAnnexes]) -> None:
    policy = [user_policy(REGION, ACCOUNT)]
    alice, bob = {"aws:username": "alice"}, {"aws:username": "bob"}
    x, b = _token_arn("x"), _token_arn("b")
    assert x == f"{SSM}{lf.TOKEN_ROOT}/alice/x" and b == f"{SSM}{lf.TOKEN_ROOT}/bob/b"
    for action in ("ssm:GetParameter", "ssm:PutParameter", "ssm:DeleteParameters"):
        assert allowed(policy, action, x, alice) and allowed(policy, action, b, bob)
        assert not allowed(policy, action, x, bob), action
        assert not allowed(policy, action, b, alice), action
    # Nor by listing: the tokens' path is no one's, the annexes' other values are all's.
    for path in (lf.TOKEN_ROOT, f"{lf.TOKEN_ROOT}/alice", "/htgrid"):
        assert not allowed(policy, "ssm:GetParametersByPath", f"{SSM}{path}", bob), path
    assert allowed(policy, "ssm:GetParametersByPath", f"{SSM}{lf.PARAMETER_ROOT}", bob)
    # What the old policy allowed (every parameter under /htgrid/annex/) holds no token.
    assert not any(
        p["Name"].startswith(lf.TOKEN_ROOT)
        for p in boto("ssm").get_parameters_by_path(Path=lf.PARAMETER_ROOT, Recursive=True)[  # type: ignore[attr-defined]
            "Parameters"
        ]
    )
    # A principal that is no IAM user (no aws:username) reads no token at all.
    assert not allowed(policy, "ssm:GetParameter", x, {})


def _instance(name: str) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, str]]:
    """The policies, boundary and principal tags of annex `name`'s instances, as the
    instance profile on its instance names them in moto."""
    ec2, iam = boto("ec2"), boto("iam")
    (instance,) = (
        i
        for r in ec2.describe_instances(  # type: ignore[attr-defined]
            Filters=[{"Name": f"tag:{lf.ANNEX_TAG}", "Values": [name]}]
        )["Reservations"]
        for i in r["Instances"]
    )
    profile_name = instance["IamInstanceProfile"]["Arn"].rpartition("/")[2]
    (role,) = iam.get_instance_profile(InstanceProfileName=profile_name)["InstanceProfile"]["Roles"]  # type: ignore[attr-defined]
    role = iam.get_role(RoleName=role["RoleName"])["Role"]  # type: ignore[attr-defined]

    def document(arn: str) -> dict[str, Any]:
        version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]  # type: ignore[attr-defined]
        doc = iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]["Document"]  # type: ignore[attr-defined]
        return doc if isinstance(doc, dict) else json.loads(doc)

    attached = iam.list_attached_role_policies(RoleName=role["RoleName"])["AttachedPolicies"]  # type: ignore[attr-defined]
    assert not iam.list_role_policies(RoleName=role["RoleName"])["PolicyNames"]  # type: ignore[attr-defined]
    tags = {f"aws:PrincipalTag/{t['Key']}": t["Value"] for t in role["Tags"]}
    boundary = document(role["PermissionsBoundary"]["PermissionsBoundaryArn"])
    return [document(p["PolicyArn"]) for p in attached], boundary, tags


def test_an_instance_of_one_annex_cannot_read_another_annexs_token(
    made: dict[str, AwsAnnexes],
) -> None:
    x, y, b = _token_arn("x"), _token_arn("y"), _token_arn("b")
    policies, boundary, tags = _instance("x")
    assert policies == [boundary] == [instance_policy(ACCOUNT)]
    assert allowed(policies, "ssm:GetParameter", x, tags, boundary)
    assert allowed(
        policies, "ssm:GetParameter", f"{SSM}{lf.PARAMETER_ROOT}/x/lease", tags, boundary
    )
    for other in (y, b, f"{SSM}{lf.TOKEN_ROOT}/bob/x", f"{SSM}{lf.PARAMETER_ROOT}/y/lease"):
        assert not allowed(policies, "ssm:GetParameter", other, tags, boundary), other
    assert not allowed(policies, "ssm:GetParametersByPath", f"{SSM}{lf.TOKEN_ROOT}", tags, boundary)
    assert not allowed(policies, "ec2:DescribeInstances", "*", tags, boundary)
    # Y's instances read Y's, and the boot script of X's names X's.
    y_policies, y_boundary, y_tags = _instance("y")
    assert allowed(y_policies, "ssm:GetParameter", y, y_tags, y_boundary)
    assert not allowed(y_policies, "ssm:GetParameter", x, y_tags, y_boundary)
    (reservation,) = boto("ec2").describe_instances(  # type: ignore[attr-defined]
        Filters=[{"Name": f"tag:{lf.ANNEX_TAG}", "Values": ["x"]}]
    )["Reservations"]
    iid = reservation["Instances"][0]["InstanceId"]
    raw = boto("ec2").describe_instance_attribute(InstanceId=iid, Attribute="userData")  # type: ignore[attr-defined]
    settings = settings_of(base64.b64decode(raw["UserData"]["Value"]).decode())
    assert f"{SSM}{settings['token_parameter']}" == x


def test_no_user_may_lend_another_users_annex_role_nor_make_a_broader_one(
    made: dict[str, AwsAnnexes],
) -> None:
    policy = [user_policy(REGION, ACCOUNT)]
    boundary = f"arn:aws:iam::{ACCOUNT}:policy{lf.ROLE_PATH}htgrid-annex-instance"
    alices = f"{ROLES}{lf.instance_role('x', REGION)}"
    bob = {"aws:username": "bob", "iam:PassedToService": "ec2.amazonaws.com"}
    # Bob may pass his own annex's role to EC2, not Alice's (his instance would read hers).
    assert allowed(policy, "iam:PassRole", f"{ROLES}{lf.instance_role('b', REGION)}",
                   {**bob, "iam:ResourceTag/htgrid:AnnexOwner": "bob"})  # fmt: skip
    assert not allowed(policy, "iam:PassRole", alices,
                       {**bob, "iam:ResourceTag/htgrid:AnnexOwner": "alice"})  # fmt: skip
    assert not allowed(policy, "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/admin", bob)
    # A role of his own: only with the instances' policy as its boundary, tagged his.
    made_as = {"aws:username": "bob", "aws:RequestTag/htgrid:AnnexOwner": "bob"}
    role = f"{ROLES}mine"
    assert allowed(policy, "iam:CreateRole", role, {**made_as, "iam:PermissionsBoundary": boundary})
    assert not allowed(policy, "iam:CreateRole", role, made_as)
    assert not allowed(
        policy, "iam:CreateRole", role,
        {**made_as, "aws:RequestTag/htgrid:AnnexOwner": "alice", "iam:PermissionsBoundary": boundary},
    )  # fmt: skip
    assert not allowed(policy, "iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/mine",
                       {**made_as, "iam:PermissionsBoundary": boundary})  # fmt: skip
    # ...and no policy but that one on it, no inline one, no other boundary.
    mine = {"aws:username": "bob", "iam:ResourceTag/htgrid:AnnexOwner": "bob",
            "iam:PermissionsBoundary": boundary}  # fmt: skip
    assert allowed(policy, "iam:AttachRolePolicy", role, {**mine, "iam:PolicyARN": boundary})
    admin = "arn:aws:iam::aws:policy/AdministratorAccess"
    assert not allowed(policy, "iam:AttachRolePolicy", role, {**mine, "iam:PolicyARN": admin})
    for action in ("iam:PutRolePolicy", "iam:DeleteRolePermissionsBoundary",
                   "iam:PutRolePermissionsBoundary", "iam:UpdateAssumeRolePolicy"):  # fmt: skip
        assert not allowed(policy, action, role, mine), action
    # Nor delete Alice's.
    assert not allowed(policy, "iam:DeleteRole", alices,
                       {"aws:username": "bob", "iam:ResourceTag/htgrid:AnnexOwner": "alice"})  # fmt: skip


def test_the_token_ends_with_the_lease_in_ssm_and_the_role_with_the_annex(
    made: dict[str, AwsAnnexes],
) -> None:
    (x,) = boto("ssm").describe_parameters(  # type: ignore[attr-defined]
        ParameterFilters=[{"Key": "Name", "Values": [f"{lf.TOKEN_ROOT}/alice/x"]}]
    )["Parameters"]
    (policy,) = x["Policies"]
    lease = made["alice"].lease_of("x")
    assert lease is not None
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(lease))
    text = policy["PolicyText"]
    doc = json.loads(text) if isinstance(text, str) else text
    assert doc == {"Type": "Expiration", "Version": "1.0", "Attributes": {"Timestamp": stamp}}
    assert x["Tier"] == "Advanced"
    done = lf.enforce(made["alice"].client, "x", lease, lease)
    assert done["parameters"][-1] == f"{lf.TOKEN_ROOT}/alice/x" and done["role"] is True
    roles = [r["RoleName"] for r in boto("iam").list_roles(PathPrefix=lf.ROLE_PATH)["Roles"]]  # type: ignore[attr-defined]
    assert sorted(roles) == sorted(lf.instance_role(n, REGION) for n in ("y", "b"))


def test_create_waits_for_its_new_instance_profile_to_reach_ec2(aws: str, home: Path) -> None:
    """IAM is eventually consistent: EC2 may not know a profile made a moment ago."""
    from botocore.exceptions import ClientError

    refusals = [2]

    class Late:
        def __init__(self, service: str) -> None:
            self.client = boto(service)

        def __getattr__(self, name: str) -> Any:
            call = getattr(self.client, name)
            if name != "run_instances":
                return call

            def run(**kwargs: Any) -> Any:
                if refusals[0]:
                    refusals[0] -= 1
                    message = "Value (w1) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name"
                    raise ClientError(
                        {"Error": {"Code": "InvalidParameterValue", "Message": message}},
                        "RunInstances",
                    )
                return call(**kwargs)

            return run

    cloud = AwsAnnexes(REGION, clients=Late)
    slept: list[float] = []
    cloud.sleep = slept.append
    ann = annexes(home)
    ann.aws = cloud
    made = ann.create(AnnexSpec("w1", count=1, lifetime=3600, image_ids=(IMAGE,)))
    assert len(made.ids) == 1 and slept == [2.0, 2.0]


@pytest.mark.parametrize("tag", [None, "htgrid-user"], ids=["iam-user", "principal-tag"])
def test_every_call_of_a_users_annex_is_one_the_printed_policy_allows(
    aws: str, home: Path, tag: str | None
) -> None:
    """moto checks the actions (test_privileges); here each call's resources and
    conditions, as IAM would: create, add, extend, status and shutdown, on-demand and
    spot fleet, by a user holding only the printed policy: an IAM user (`aws:username`),
    or a principal with no user name whose principal tag `tag` names its annexes (the
    session's tag, which the client cannot read: HTGRID_ANNEX_OWNER says it)."""
    policy = [user_policy(REGION, ACCOUNT, tag)]
    me = {"aws:username": "carol"} if tag is None else {f"aws:PrincipalTag/{tag}": "c.sso"}
    clients, refused, seen = checked_clients(as_user("carol"), policy, me)
    ann = annexes(home)
    ann.aws = AwsAnnexes(REGION, clients=clients, owner=None if tag is None else "c.sso")
    ann.create(AnnexSpec("c1", count=1, lifetime=3600, image_ids=(IMAGE,)))
    ann.create(AnnexSpec("c2", slots=2, lifetime=3600, image_ids=(IMAGE,)))
    ann.add("c1", count=1)
    ann.extend("c1", lifetime=7200)
    ann.describe()
    ann.shutdown("c1")
    ann.shutdown("c2")
    assert refused == []
    for action in ("iam:CreateRole", "iam:PassRole", "iam:DeleteRole", "ssm:PutParameter",
                   "ssm:DeleteParameters", "ec2:RunInstances", "ec2:RequestSpotFleet",
                   "ec2:CreateTags", "ec2:TerminateInstances", "ec2:CancelSpotFleetRequests",
                   "events:PutRule", "events:PutTargets", "events:TagResource",
                   "events:DeleteRule"):  # fmt: skip
        assert action in seen, action
    # And what the lease function would leave: nothing.
    assert not boto("iam").list_roles(PathPrefix=lf.ROLE_PATH)["Roles"]  # type: ignore[attr-defined]
    assert not boto("ssm").get_parameters_by_path(Path=lf.TOKEN_ROOT, Recursive=True)["Parameters"]  # type: ignore[attr-defined]


def test_the_lease_function_deletes_a_role_a_killed_create_left_half_made() -> None:
    """A create killed between making the profile and adding the role to it."""
    from moto import mock_aws

    with mock_aws():
        iam = boto3.client("iam", region_name=REGION)
        name = lf.instance_role("k1", REGION)
        iam.create_role(RoleName=name, Path=lf.ROLE_PATH, AssumeRolePolicyDocument="{}")
        iam.create_instance_profile(InstanceProfileName=name, Path=lf.ROLE_PATH)
        done = lf.enforce(lambda s: boto3.client(s, region_name=REGION), "k1", 0, 1)
        assert done["role"] is True
        assert (
            not iam.list_roles()["Roles"] and not iam.list_instance_profiles()["InstanceProfiles"]
        )
