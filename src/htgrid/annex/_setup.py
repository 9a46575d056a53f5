"""`htgrid annex setup`: the one privileged step, once per AWS account and region.

It installs the lease function (lease_function.py, zipped) with its role, the sweeper
rule that runs it every minute, the instances' role and profile (they may read their
annex's SSM parameters, nothing else), the spot-fleet role, and a security group; and
prints the policy an ordinary user needs to create, extend and shut down annexes.
Running it again updates the function's code and changes nothing else.
"""

from __future__ import annotations

import io
import json
import zipfile
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

from htgrid.annex._errors import AnnexCloudError
from htgrid.annex.lease_function import (
    FUNCTION_TIMEOUT,
    PARAMETER_ROOT,
    RULE_PREFIX,
    SWEEPER_RULE,
)

if TYPE_CHECKING:
    from htgrid.annex._aws import AwsAnnexes

__all__ = [
    "FLEET_ROLE",
    "FUNCTION_NAME",
    "INSTANCE_PROFILE",
    "INSTANCE_ROLE",
    "LEASE_ROLE",
    "SECURITY_GROUP",
    "lease_function_zip",
    "setup",
    "user_policy",
]

FUNCTION_NAME: Final = "htgrid-annex-lease"
LEASE_ROLE: Final = "htgrid-annex-lease"
INSTANCE_ROLE: Final = "htgrid-annex-instance"
INSTANCE_PROFILE: Final = "htgrid-annex-instance"
FLEET_ROLE: Final = "htgrid-annex-fleet"
SECURITY_GROUP: Final = "htgrid-annex"


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


def _lease_policy(region: str, account: str) -> dict[str, Any]:
    rules = f"arn:aws:events:{region}:{account}:rule/{RULE_PREFIX}*"
    params = f"arn:aws:ssm:{region}:{account}:parameter{PARAMETER_ROOT}/*"
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
        (["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"], "*"),
    )


def _instance_policy(region: str, account: str) -> dict[str, Any]:
    # An instance reads its annex's token and lease: no EC2, no other secret.
    params = f"arn:aws:ssm:{region}:{account}:parameter{PARAMETER_ROOT}/*"
    return _policy((["ssm:GetParameter"], params))


def user_policy(region: str, account: str) -> dict[str, Any]:
    """What an ordinary user needs for `htgrid annex create|add|extend|status|shutdown`."""
    rules = f"arn:aws:events:{region}:{account}:rule/{RULE_PREFIX}*"
    sweeper = f"arn:aws:events:{region}:{account}:rule/{SWEEPER_RULE}"
    params = f"arn:aws:ssm:{region}:{account}:parameter{PARAMETER_ROOT}/*"
    roles = [
        f"arn:aws:iam::{account}:role/{INSTANCE_ROLE}",
        f"arn:aws:iam::{account}:role/{FLEET_ROLE}",
    ]
    return _policy(
        (
            [
                "ec2:RunInstances",
                "ec2:CreateTags",
                "ec2:DescribeInstances",
                "ec2:TerminateInstances",
                "ec2:RequestSpotFleet",
                "ec2:DescribeSpotFleetRequests",
                "ec2:CancelSpotFleetRequests",
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
            params,
        ),
        (["iam:PassRole"], roles),
    )


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
    _role(aws, INSTANCE_ROLE, "ec2.amazonaws.com", _instance_policy(region, account))
    fleet_policy = _policy(
        (["ec2:RunInstances", "ec2:CreateTags", "ec2:TerminateInstances", "iam:PassRole"], "*"),
        (["ec2:Describe*"], "*"),
    )
    _role(aws, FLEET_ROLE, "spotfleet.amazonaws.com", fleet_policy)
    if aws.call_or_none(
        "iam",
        "create_instance_profile",
        ["EntityAlreadyExists"],
        InstanceProfileName=INSTANCE_PROFILE,
    ):
        aws.call(
            "iam",
            "add_role_to_instance_profile",
            InstanceProfileName=INSTANCE_PROFILE,
            RoleName=INSTANCE_ROLE,
        )
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
        "instance_profile": INSTANCE_PROFILE,
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
