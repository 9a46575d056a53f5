"""The annex's IAM policy documents on AWS: the users', the lease function's, the
instances' and the spot fleet's (`htgrid annex setup` installs or prints them).

Every annex belongs to its owner: the IAM user who made it (`${aws:username}`), or, for
principals with no user name (single sign-on, roles), the value of a principal tag the
administrator names (`${aws:PrincipalTag/KEY}`, `htgrid annex setup --principal-tag`).
Whatever an annex makes carries OWNER_TAG = its owner from its creation on, and the
users' policy lets a user change or end only what is tagged its own:

* EC2: instances, their volumes and spot-fleet requests may be made only tagged as the
  user's (`aws:RequestTag`); tags may be written only by those creating calls
  (`ec2:CreateAction`), never onto what exists; TerminateInstances and
  CancelSpotFleetRequests need `ec2:ResourceTag` = the user. No user may modify a fleet
  nor touch launch templates (the annex uses none).
* EventBridge: a user's lease rules (`htgrid-annex-NAME`) are made tagged as its own and
  only its own may be put again, targeted (at the lease function only), tagged,
  emptied or deleted (`aws:ResourceTag`). Rule names do not carry the owner: an
  annex's name is the region's (its instances, parameters and role are named by it).
* SSM: an annex's lease and launch settings (PARAMETER_ROOT/NAME/...) are made tagged as
  the user's and only then overwritten or deleted by it; its token is under
  TOKEN_ROOT/OWNER/ (the path, not a tag, scopes it: reading one must not depend on a
  tag anyone could set first).
* IAM: the annex's instance role and profile (`_role_statements`).

Read-only calls cannot be scoped this way on AWS (DescribeInstances,
DescribeSpotFleetRequests, DescribeSpotPriceHistory, ListRules allow no resource-level
permission), and `annex status` lists every user's annexes anyway: they stay on "*".
The users may not change the lease function nor its permissions (no lambda: action).
"""

from __future__ import annotations

import json
from typing import Any, Final

from htgrid.annex.lease_function import (
    ANNEX_TAG,
    LEASE_TAG,
    OWNER_TAG,
    PARAMETER_ROOT,
    ROLE_PATH,
    RULE_PREFIX,
    SWEEPER_RULE,
    TOKEN_ROOT,
)

__all__ = [
    "FLEET_ROLE",
    "FUNCTION_NAME",
    "INSTANCE_POLICY",
    "OWNER_TAG",
    "REGION_TAG",
    "fleet_policy",
    "function_arn",
    "instance_policy",
    "instance_policy_arn",
    "lease_policy",
    "owner_variable",
    "trust",
    "user_policy",
]

FUNCTION_NAME: Final = "htgrid-annex-lease"
#: The managed policy (under ROLE_PATH) of every annex's instance role, and its boundary.
INSTANCE_POLICY: Final = "htgrid-annex-instance"
FLEET_ROLE: Final = "htgrid-annex-fleet"
#: The tag of an annex's instance role naming its region (which its policy's resources name).
REGION_TAG: Final = "htgrid:AnnexRegion"
# What the users may make an annex's instances launch with, untagged (all but the
# instances and volumes, which must be tagged theirs): images, subnets, groups, keys...
_EC2_TAGGED: Final = ("instance", "volume")


def owner_variable(principal_tag: str | None = None) -> str:
    """The policy variable naming an annex's owner: `${aws:username}`, or the principal
    tag's `${aws:PrincipalTag/KEY}`."""
    return "${aws:PrincipalTag/" + principal_tag + "}" if principal_tag else "${aws:username}"


def trust(service: str) -> str:
    """A role's trust policy: `service` may assume it."""
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
        "Statement": [_allow(actions, resource) for actions, resource in statements],
    }


def _allow(actions: list[str], resource: str | list[str], **conditions: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    statement: dict[str, Any] = {"Effect": "Allow", "Action": actions, "Resource": resource}
    if conditions:
        statement["Condition"] = conditions
    return statement


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


def function_arn(region: str, account: str) -> str:
    """The lease function's ARN (the only target a user's lease rule may have)."""
    return f"arn:aws:lambda:{region}:{account}:function:{FUNCTION_NAME}"


def _annex_roles(account: str) -> list[str]:
    return [
        f"arn:aws:iam::{account}:role{ROLE_PATH}*",
        f"arn:aws:iam::{account}:instance-profile{ROLE_PATH}*",
    ]


def lease_policy(region: str, account: str) -> dict[str, Any]:
    """The lease function's: it ends every annex, whoever's."""
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


def fleet_policy(account: str) -> dict[str, Any]:
    """The spot-fleet role's: it launches (and tags, as the request says) and ends a
    fleet's instances, passing the annexes' instance roles only."""
    return _policy(
        (["ec2:RunInstances", "ec2:CreateTags", "ec2:TerminateInstances"], "*"),
        (["iam:PassRole"], _annex_roles(account)[0]),
        (["ec2:Describe*"], "*"),
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


def user_policy(region: str, account: str, principal_tag: str | None = None) -> dict[str, Any]:
    """What an ordinary user needs for `htgrid annex create|add|extend|status|shutdown`,
    on its own annexes only (the owner: its IAM user name, else `principal_tag`'s value)."""
    me = owner_variable(principal_tag)
    policy = _policy(
        (
            [
                "ec2:DescribeInstances",
                "ec2:DescribeSpotFleetRequests",
                "ec2:DescribeSpotPriceHistory",
                "events:ListRules",
                "sts:GetCallerIdentity",
            ],
            "*",
        ),
        (
            ["events:ListTargetsByRule", "events:ListTagsForResource"],
            [_rules(region, account), f"arn:aws:events:{region}:{account}:rule/{SWEEPER_RULE}"],
        ),
        (["ssm:GetParameter", "ssm:GetParametersByPath"], _params(region, account)),
        # Its own tokens only: no other user's annex's.
        (
            [
                "ssm:PutParameter",
                "ssm:GetParameter",
                "ssm:DeleteParameter",
                "ssm:DeleteParameters",
            ],
            _tokens(region, account, me),
        ),
        (["iam:PassRole"], f"arn:aws:iam::{account}:role/{FLEET_ROLE}"),
        (["iam:GetRole"], _annex_roles(account)[0]),
    )
    policy["Statement"] += (
        _ec2_statements(region, account, me)
        + _rule_statements(region, account, me)
        + _parameter_statements(region, account, me)
        + _role_statements(account, me)
    )
    return policy


def _rules(region: str, account: str) -> str:
    return f"arn:aws:events:{region}:{account}:rule/{RULE_PREFIX}*"


def _ec2_statements(region: str, account: str, me: str) -> list[dict[str, Any]]:
    """Instances, volumes and fleets made tagged as the user's; only those ended."""
    ec2 = f"arn:aws:ec2:{region}:{account}"
    tagged = [f"{ec2}:{kind}/*" for kind in _EC2_TAGGED]
    fleets = f"{ec2}:spot-fleet-request/*"
    made_mine = {"aws:RequestTag/" + OWNER_TAG: me}
    mine = {"ec2:ResourceTag/" + OWNER_TAG: me}
    # What an instance is launched from and with (images, subnets, groups, keys,
    # interfaces...): NotResource, so that no kind of these is left out; not instances
    # nor volumes of any region (another region's would have no lease).
    anywhere = [f"arn:aws:ec2:*:*:{kind}/*" for kind in _EC2_TAGGED]
    untagged = {"Effect": "Allow", "Action": ["ec2:RunInstances"], "NotResource": anywhere}
    return [
        _allow(["ec2:RunInstances"], tagged, StringEquals=made_mine),
        untagged,
        _allow(["ec2:RequestSpotFleet"], fleets, StringEquals=made_mine),
        _allow(["ec2:CreateTags"], [*tagged, fleets],
               StringEquals={"ec2:CreateAction": ["RunInstances", "RequestSpotFleet"]}),
        _allow(["ec2:TerminateInstances"], tagged[0], StringEquals=mine),
        _allow(["ec2:CancelSpotFleetRequests"], fleets, StringEquals=mine),
    ]  # fmt: skip


def _rule_statements(region: str, account: str, me: str) -> list[dict[str, Any]]:
    """Lease rules made tagged as the user's (or put again if already its own), pointed
    at the lease function only; only its own changed or deleted."""
    rules = _rules(region, account)
    mine = {"aws:ResourceTag/" + OWNER_TAG: me}
    mine_or_new = {**mine, "aws:RequestTag/" + OWNER_TAG: me}
    return [
        _allow(["events:PutRule"], rules, StringEqualsIfExists=mine,
               StringEquals={"aws:RequestTag/" + OWNER_TAG: me}),
        _allow(["events:TagResource"], rules, StringEqualsIfExists=mine_or_new,
               **{"ForAllValues:StringEquals": {"aws:TagKeys": [ANNEX_TAG, LEASE_TAG, OWNER_TAG]}}),
        _allow(["events:PutTargets"], rules, StringEquals=mine,
               ArnEquals={"events:TargetArn": function_arn(region, account)}),
        _allow(["events:RemoveTargets", "events:DeleteRule"], rules, StringEquals=mine),
    ]  # fmt: skip


def _parameter_statements(region: str, account: str, me: str) -> list[dict[str, Any]]:
    """An annex's lease and settings parameters: made tagged as the user's, then
    overwritten and deleted by it only."""
    params = _params(region, account)[1]
    # SSM names a parameter's tags by both keys (its own older one, and IAM's).
    keys = ("aws:ResourceTag/" + OWNER_TAG, "ssm:resourceTag/" + OWNER_TAG)
    return [
        _allow(["ssm:PutParameter", "ssm:AddTagsToResource"], params,
               StringEquals={"aws:RequestTag/" + OWNER_TAG: me},
               StringEqualsIfExists=dict.fromkeys(keys, me)),
        *(_allow(["ssm:PutParameter", "ssm:DeleteParameter", "ssm:DeleteParameters"], params,
                 StringEquals={key: me}) for key in keys),
    ]  # fmt: skip


def _role_statements(account: str, me: str) -> list[dict[str, Any]]:
    """A user's rights on its annexes' instance roles: made with INSTANCE_POLICY as
    their boundary and their only policy, tagged as the user's, passed (to EC2) and
    deleted only if tagged so."""
    role, profile = _annex_roles(account)
    boundary = instance_policy_arn(account)
    mine = {"iam:ResourceTag/" + OWNER_TAG: me}
    tagged_mine = {"aws:RequestTag/" + OWNER_TAG: me}
    return [
        _allow(["iam:CreateRole"], role,
               StringEquals={"iam:PermissionsBoundary": boundary, **tagged_mine}),
        _allow(["iam:TagRole"], role, StringEquals=tagged_mine),
        _allow(["iam:AttachRolePolicy"], role,
               StringEquals={"iam:PermissionsBoundary": boundary, **mine},
               ArnEquals={"iam:PolicyARN": boundary}),
        _allow(["iam:PassRole"], role,
               StringEquals={"iam:PassedToService": "ec2.amazonaws.com", **mine}),
        _allow(["iam:DetachRolePolicy", "iam:DeleteRole"], role, StringEquals=mine),
        _allow(["iam:ListAttachedRolePolicies", "iam:GetInstanceProfile"], [role, profile]),
        # Its profile too: made tagged as its own, and only its own changed or deleted
        # (another's instances would lose their role, or get the user's).
        _allow(["iam:CreateInstanceProfile", "iam:TagInstanceProfile"], profile,
               StringEquals={"aws:RequestTag/" + OWNER_TAG: me}),
        _allow(
            [
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            profile,
            StringEquals={"aws:ResourceTag/" + OWNER_TAG: me},
        ),
    ]  # fmt: skip
