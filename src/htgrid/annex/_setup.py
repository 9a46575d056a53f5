"""`htgrid annex setup`: the one privileged step, once per AWS account and region.

It installs the lease function (lease_function.py, zipped) with its role, the sweeper
rule that runs it every minute, the instances' policy, the spot-fleet role, and a
security group; and prints the policy an ordinary user needs to create, extend and shut
down annexes. Running it again updates the function's code and the instances' policy.

Each annex's token is readable by its owner and its instances only:

* a user's policy reads and writes the tokens under TOKEN_ROOT/OWNER/ alone (OWNER:
  `${aws:username}`, or a principal tag's value: `_policy`, which also keeps each
  user's instances, fleets, rules and parameters its own);
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
from htgrid.annex._policy import (
    FLEET_ROLE,
    FUNCTION_NAME,
    INSTANCE_POLICY,
    OWNER_TAG,
    REGION_TAG,
    fleet_policy,
    instance_policy,
    instance_policy_arn,
    lease_policy,
    trust,
    user_policy,
)
from htgrid.annex.lease_function import FUNCTION_TIMEOUT, ROLE_PATH, SWEEPER_RULE

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

LEASE_ROLE: Final = "htgrid-annex-lease"
SECURITY_GROUP: Final = "htgrid-annex"


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
        AssumeRolePolicyDocument=trust(service),
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


def setup(aws: AwsAnnexes, *, vpc: str | None = None, cidr: str = "0.0.0.0/0",
          principal_tag: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Install everything; what was made (and the users' policy, its owners named by
    `principal_tag` if given, else their IAM user names), as a dict."""
    account = aws.account()
    region = aws.region
    lease_role = _role(aws, LEASE_ROLE, "lambda.amazonaws.com", lease_policy(region, account))
    _managed_policy(aws, account)
    _role(aws, FLEET_ROLE, "spotfleet.amazonaws.com", fleet_policy(account))
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
        "user_policy": user_policy(region, account, principal_tag),
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
