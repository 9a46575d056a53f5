"""`htgrid annex setup`: the one privileged step, once per AWS account and region.

It installs the lease function (lease_function.py, zipped) with its role, the sweeper
rule that runs it every minute, the instances' policy, the spot-fleet role, and a
security group; and prints the policy an ordinary user needs to create, extend and shut
down annexes. Running it again updates the function's code and the instances' policy.

Each annex's token is readable by its owner and its instances only:

* a user's policy reads and writes the tokens under TOKEN_ROOT/${aws:username}/ alone;
* each annex's instances have a role of their own (`instance_role`, made by `create`,
  deleted with the annex) tagged with the annex's name, owner and region, whose only
  policy, INSTANCE_POLICY, reads the token those tags name: an instance of another annex
  (another role, other tags) cannot. INSTANCE_POLICY is also the permissions boundary
  every such role must have, and the only policy a user may attach to it; a user may tag
  one only as its own, and pass only the roles tagged as its own to EC2: no user can
  make a role that may do more, nor lend another's annex role to an instance of theirs.
"""

from __future__ import annotations

import io
import json
import zipfile
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

from htgrid.annex._errors import AnnexCloudError
from htgrid.annex.lease_function import (
    ANNEX_TAG,
    FUNCTION_TIMEOUT,
    PARAMETER_ROOT,
    ROLE_PATH,
    RULE_PREFIX,
    SWEEPER_RULE,
    TOKEN_ROOT,
)

if TYPE_CHECKING:
    from htgrid.annex._aws import AwsAnnexes

__all__ = [
    "FLEET_ROLE",
    "FUNCTION_NAME",
    "INSTANCE_POLICY",
    "LEASE_ROLE",
    "OWNER_TAG",
    "REGION_TAG",
    "SECURITY_GROUP",
    "instance_policy",
    "instance_policy_arn",
    "lease_function_zip",
    "setup",
    "user_policy",
]

FUNCTION_NAME: Final = "htgrid-annex-lease"
LEASE_ROLE: Final = "htgrid-annex-lease"
#: The managed policy (under ROLE_PATH) of every annex's instance role, and its boundary.
INSTANCE_POLICY: Final = "htgrid-annex-instance"
FLEET_ROLE: Final = "htgrid-annex-fleet"
SECURITY_GROUP: Final = "htgrid-annex"
#: The tags of an annex's instance role, which its policy's resources name.
OWNER_TAG: Final = "htgrid:AnnexOwner"
REGION_TAG: Final = "htgrid:AnnexRegion"
_ME: Final = "${aws:username}"


def _trust(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
            ],
        }
    )


def _policy(*statements: tuple[list[str], str | list[str]]) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": actions, "Resource": resource}
            for actions, resource in statements
        ],
    }


def _params(region: str, account: str) -> list[str]:
    """The annexes' parameters that are not secret (the lease, the launch settings), and
    their path (GetParametersByPath names the path): not TOKEN_ROOT's."""
    root = f"arn:aws:ssm:{region}:{account}:parameter{PARAMETER_ROOT}"
    return [root, f"{root}/*"]


def _tokens(region: str, account: str, owner: str = "*") -> list[str]:
    root = f"arn:aws:ssm:{region}:{account}:parameter{TOKEN_ROOT}"
    return [f"{root}/{owner}/*"] if owner != "*" else [root, f"{root}/*"]


def instance_policy_arn(account: str) -> str:
    return f"arn:aws:iam::{account}:policy{ROLE_PATH}{INSTANCE_POLICY}"


def _annex_roles(account: str) -> list[str]:
    return [
        f"arn:aws:iam::{account}:role{ROLE_PATH}*",
        f"arn:aws:iam::{account}:instance-profile{ROLE_PATH}*",
    ]


def _lease_policy(region: str, account: str) -> dict[str, Any]:
    rules = f"arn:aws:events:{region}:{account}:rule/{RULE_PREFIX}*"
    params = _params(region, account) + _tokens(region, account)
    return _policy(
        (
            [
                "ec2:DescribeInstances",
                "ec2:TerminateInstances",
                "ec2:DescribeSpotFleetRequests",
                "ec2:CancelSpotFleetRequests",
                "events:ListRules",
            ],
            "*",
        ),
        (
            [
                "events:ListTargetsByRule",
                "events:ListTagsForResource",
                "events:RemoveTargets",
                "events:DeleteRule",
            ],
            rules,
        ),
        (["ssm:GetParametersByPath", "ssm:DeleteParameters"], params),
        (
            [
                "iam:GetInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
                "iam:ListAttachedRolePolicies",
                "iam:DetachRolePolicy",
                "iam:DeleteRole",
            ],
            _annex_roles(account),
        ),
        (["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"], "*"),
    )


def instance_policy(account: str) -> dict[str, Any]:
    """What an annex's instances may do: read their own annex's token and lease, which
    their role's tags name (a role without them reads nothing); no EC2, no other secret."""
    region, owner, annex = (
        f"${{aws:PrincipalTag/{tag}}}" for tag in (REGION_TAG, OWNER_TAG, ANNEX_TAG)
    )
    ssm = f"arn:aws:ssm:{region}:{account}:parameter"
    return _policy(
        (
            ["ssm:GetParameter"],
            [f"{ssm}{TOKEN_ROOT}/{owner}/{annex}", f"{ssm}{PARAMETER_ROOT}/{annex}/lease"],
        )
    )


def user_policy(region: str, account: str) -> dict[str, Any]:
    """What an ordinary user needs for `htgrid annex create|add|extend|status|shutdown`."""
    rules = f"arn:aws:events:{region}:{account}:rule/{RULE_PREFIX}*"
    sweeper = f"arn:aws:events:{region}:{account}:rule/{SWEEPER_RULE}"
    policy = _policy(
        (
            [
                "ec2:RunInstances",
                "ec2:CreateTags",
                "ec2:DescribeInstances",
                "ec2:TerminateInstances",
                "ec2:RequestSpotFleet",
                "ec2:DescribeSpotFleetRequests",
                "ec2:CancelSpotFleetRequests",
                "ec2:DescribeSpotPriceHistory",
                "events:ListRules",
                "sts:GetCallerIdentity",
            ],
            "*",
        ),
        (
            [
                "events:PutRule",
                "events:PutTargets",
                "events:TagResource",
                "events:ListTargetsByRule",
                "events:ListTagsForResource",
                "events:RemoveTargets",
                "events:DeleteRule",
            ],
            rules,
        ),
        (["events:ListTargetsByRule"], sweeper),
        (
            [
                "ssm:PutParameter",
                "ssm:GetParameter",
                "ssm:GetParametersByPath",
                "ssm:DeleteParameters",
            ],
            _params(region, account),
        ),
        # Its own tokens only: no other user's annex's.
        (
            [
                "ssm:PutParameter",
                "ssm:GetParameter",
                "ssm:DeleteParameter",
                "ssm:DeleteParameters",
            ],
            _tokens(region, account, _ME),
        ),
        (["iam:PassRole"], f"arn:aws:iam::{account}:role/{FLEET_ROLE}"),
        (["iam:GetRole"], _annex_roles(account)[0]),
    )
    policy["Statement"] += _role_statements(account)
    return policy


def _role_statements(account: str) -> list[dict[str, Any]]:
    """A user's rights on its annexes' instance roles: made with INSTANCE_POLICY as
    their boundary and their only policy, tagged as the user's, passed (to EC2) and
    deleted only if tagged so."""
    role, profile = _annex_roles(account)
    boundary = instance_policy_arn(account)
    mine = {"iam:ResourceTag/" + OWNER_TAG: _ME}
    tagged_mine = {"aws:RequestTag/" + OWNER_TAG: _ME}

    def allow(actions: list[str], resource: str, **conditions: dict[str, str]) -> dict[str, Any]:
        statement: dict[str, Any] = {"Effect": "Allow", "Action": actions, "Resource": resource}
        if conditions:
            statement["Condition"] = conditions
        return statement

    return [
        allow(["iam:CreateRole"], role,
              StringEquals={"iam:PermissionsBoundary": boundary, **tagged_mine}),
        allow(["iam:TagRole"], role, StringEquals=tagged_mine),
        allow(["iam:AttachRolePolicy"], role,
              StringEquals={"iam:PermissionsBoundary": boundary, **mine},
              ArnEquals={"iam:PolicyARN": boundary}),
        allow(["iam:PassRole"], role,
              StringEquals={"iam:PassedToService": "ec2.amazonaws.com", **mine}),
        allow(["iam:DetachRolePolicy", "iam:DeleteRole"], role, StringEquals=mine),
        allow(["iam:ListAttachedRolePolicies"], role),
        allow(
            [
                "iam:CreateInstanceProfile",
                "iam:GetInstanceProfile",
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            profile,
        ),
    ]  # fmt: skip


def lease_function_zip() -> bytes:
    """The lease function's deployment package: lease_function.py alone."""
    source = resources.files("htgrid.annex").joinpath("lease_function.py").read_bytes()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        info = zipfile.ZipInfo("lease_function.py", date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        archive.writestr(info, source)
    return buffer.getvalue()


def _role(aws: AwsAnnexes, name: str, service: str, policy: dict[str, Any]) -> str:
    made = aws.call_or_none(
        "iam",
        "create_role",
        ["EntityAlreadyExists"],
        RoleName=name,
        AssumeRolePolicyDocument=_trust(service),
        Description="htgrid annex",
    )
    if made is None:
        arn = str(aws.call("iam", "get_role", RoleName=name)["Role"]["Arn"])
    else:
        arn = str(made["Role"]["Arn"])
    aws.call(
        "iam", "put_role_policy", RoleName=name, PolicyName=name, PolicyDocument=json.dumps(policy)
    )
    return arn


def _managed_policy(aws: AwsAnnexes, account: str) -> None:
    """INSTANCE_POLICY, made or brought up to date (its oldest version dropped when it
    has IAM's five)."""
    arn = instance_policy_arn(account)
    document = json.dumps(instance_policy(account))
    made = aws.call_or_none(
        "iam", "create_policy", ["EntityAlreadyExists"], PolicyName=INSTANCE_POLICY,
        Path=ROLE_PATH, PolicyDocument=document, Description="htgrid annex instances",
    )  # fmt: skip
    if made is not None:
        return
    versions = aws.call("iam", "list_policy_versions", PolicyArn=arn)["Versions"]
    old = sorted((v for v in versions if not v["IsDefaultVersion"]), key=lambda v: v["CreateDate"])
    if len(versions) >= 5 and old:
        aws.call("iam", "delete_policy_version", PolicyArn=arn, VersionId=old[0]["VersionId"])
    aws.call("iam", "create_policy_version", PolicyArn=arn, PolicyDocument=document,
             SetAsDefault=True)  # fmt: skip


def _updated(aws: AwsAnnexes) -> None:
    """Wait until the function's configuration update is done (AWS refuses a code update
    while one is in progress)."""
    from botocore.exceptions import BotoCoreError  # type: ignore[import-untyped]

    try:
        aws.client("lambda").get_waiter("function_updated").wait(FunctionName=FUNCTION_NAME)
    except BotoCoreError as exc:
        raise AnnexCloudError(f"lambda update of {FUNCTION_NAME} in {aws.region}: {exc}") from None


def setup(aws: AwsAnnexes, *, vpc: str | None = None, cidr: str = "0.0.0.0/0") -> dict[str, Any]:
    """Install everything; what was made (and the users' policy), as a dict."""
    account = aws.account()
    region = aws.region
    lease_role = _role(aws, LEASE_ROLE, "lambda.amazonaws.com", _lease_policy(region, account))
    _managed_policy(aws, account)
    fleet_policy = _policy(
        (["ec2:RunInstances", "ec2:CreateTags", "ec2:TerminateInstances"], "*"),
        # The fleet passes the annexes' instance roles only.
        (["iam:PassRole"], _annex_roles(account)[0]),
        (["ec2:Describe*"], "*"),
    )
    _role(aws, FLEET_ROLE, "spotfleet.amazonaws.com", fleet_policy)
    code = lease_function_zip()
    made = aws.call_or_none(
        "lambda",
        "create_function",
        ["ResourceConflictException"],
        FunctionName=FUNCTION_NAME,
        Runtime="python3.12",
        Role=lease_role,
        Handler="lease_function.handler",
        Code={"ZipFile": code},
        Timeout=FUNCTION_TIMEOUT,
        Description="htgrid annex: ends annexes at their lease's end",
    )
    if made is None:
        # A function of an older setup: its timeout too (it waits for a lease's end).
        aws.call(
            "lambda",
            "update_function_configuration",
            FunctionName=FUNCTION_NAME,
            Timeout=FUNCTION_TIMEOUT,
        )
        _updated(aws)
        made = aws.call("lambda", "update_function_code", FunctionName=FUNCTION_NAME, ZipFile=code)
    function = str(made["FunctionArn"])
    aws.call_or_none(
        "lambda",
        "add_permission",
        ["ResourceConflictException"],
        FunctionName=FUNCTION_NAME,
        StatementId="htgrid-annex-rules",
        Action="lambda:InvokeFunction",
        Principal="events.amazonaws.com",
        SourceArn=f"arn:aws:events:{region}:{account}:rule/htgrid-annex*",
    )
    aws.call(
        "events",
        "put_rule",
        Name=SWEEPER_RULE,
        ScheduleExpression="rate(1 minute)",
        State="ENABLED",
        Description="htgrid annex: every annex's lease, and anything no lease rules",
    )
    aws.set_lease_target_raw(SWEEPER_RULE, function, json.dumps({"htgrid": "annex-sweep"}))
    group = _security_group(aws, vpc, cidr)
    return {
        "region": region,
        "account": account,
        "function": function,
        "sweeper": SWEEPER_RULE,
        "instance_policy": instance_policy_arn(account),
        "security_group": group,
        "user_policy": user_policy(region, account),
    }


def _security_group(aws: AwsAnnexes, vpc: str | None, cidr: str) -> str:
    filters = [{"Name": "group-name", "Values": [SECURITY_GROUP]}]
    if vpc:
        filters.append({"Name": "vpc-id", "Values": [vpc]})
    found = aws.call("ec2", "describe_security_groups", Filters=filters)["SecurityGroups"]
    if found:
        return str(found[0]["GroupId"])
    args: dict[str, Any] = {"GroupName": SECURITY_GROUP, "Description": "htgrid annex nodes"}
    if vpc:
        args["VpcId"] = vpc
    group = str(aws.call("ec2", "create_security_group", **args)["GroupId"])
    # The pool's schedds call each node's API over TLS, on a port the node picks.
    aws.call(
        "ec2",
        "authorize_security_group_ingress",
        GroupId=group,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 1024, "ToPort": 65535, "IpRanges": [{"CidrIp": cidr}]}
        ],
    )
    return group
