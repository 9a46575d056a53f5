"""Each annex is its owner's: another user holding the same printed policy can neither
end, extend nor add to it, and no rule of theirs makes the lease function end it early;
the lease function (the administrator's role) still ends every annex at its end.

moto checks a call's action only, so every user's call is judged here as IAM would judge
it (`_calls.Checked`, enforcing: a refused call does nothing), against the tags moto
holds on the instances, fleets, rules and parameters the annexes made."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from htgrid.annex import (
    AnnexCloudError,
    Annexes,
    AnnexSpec,
    AnnexUsageError,
    AwsAnnexes,
    user_policy,
)
from htgrid.annex import lease_function as lf
from htgrid.testing import run_cli

from ._calls import ACCOUNT, EC2, RULES, SSM, admin, as_user, checked_clients
from ._iam import allowed
from .conftest import IMAGE, REGION, annexes, boto

FUNCTION = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:htgrid-annex-lease"
OWNER_TAG = "htgrid:AnnexOwner"


def _user(name: str) -> Callable[[str], Any]:
    """`name`'s clients: its own keys, each call judged by the printed policy first."""
    me = {"aws:username": name}
    clients, _, _ = checked_clients(as_user(name), [user_policy(REGION, ACCOUNT)], me, enforce=True)
    return clients


def _live() -> dict[str, list[str]]:
    """Each annex's live instances, then fleets (by its name tag)."""
    out: dict[str, list[str]] = {}
    for r in boto("ec2").describe_instances()["Reservations"]:  # type: ignore[attr-defined]
        for i in r["Instances"]:
            tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
            if i["State"]["Name"] in ("pending", "running") and lf.ANNEX_TAG in tags:
                out.setdefault(tags[lf.ANNEX_TAG], []).append(i["InstanceId"])
    for f in boto("ec2").describe_spot_fleet_requests()["SpotFleetRequestConfigs"]:  # type: ignore[attr-defined]
        tags = {t["Key"]: t["Value"] for t in f.get("Tags", [])}
        if f["SpotFleetRequestState"] == "active":
            out.setdefault(tags[lf.ANNEX_TAG], []).append(f["SpotFleetRequestId"])
    return {k: sorted(v, key=lambda i: (i.startswith("sfr-"), i)) for k, v in out.items()}


@pytest.fixture
def alices(aws: str, home: Path) -> AwsAnnexes:
    """Alice's annexes: x (on-demand) and f (a spot fleet); her cloud."""
    ann = annexes(home)
    ann.aws = AwsAnnexes(REGION, clients=_user("alice"))
    ann.create(AnnexSpec("x", count=2, lifetime=3600, image_ids=(IMAGE,)))
    ann.create(AnnexSpec("f", slots=2, lifetime=3600, image_ids=(IMAGE,)))
    return ann.aws  # type: ignore[no-any-return]


def test_another_user_cannot_end_extend_or_add_to_an_annex_not_theirs(
    alices: AwsAnnexes, home: Path
) -> None:
    before = _live()
    assert len(before["x"]) == 2 and len(before["f"]) == 3  # f: 2 instances and its request
    assert before["f"][-1].startswith("sfr-")
    lease = alices.lease_of("x")
    bob = annexes(home)
    bob.aws = AwsAnnexes(REGION, clients=_user("bob"))
    for attempt in (
        lambda: bob.shutdown("x"),
        lambda: bob.shutdown("f"),
        lambda: bob.extend("x", lifetime=7200),
        lambda: bob.extend("f", lifetime=60),
        lambda: bob.add("x", count=1),
    ):
        with pytest.raises(AnnexCloudError, match="AccessDenied"):
            attempt()
        assert _live() == before  # refused before anything of hers was ended
    # Nor call by call, as a user of the API would.
    ec2, events, ssm, iam = (bob.aws.client(s) for s in ("ec2", "events", "ssm", "iam"))
    x_rule, x_role = lf.rule_name("x"), lf.instance_role("x", REGION)
    early = lf.lease_input("x", 0)
    for call, kwargs in (
        (ec2.terminate_instances, {"InstanceIds": before["x"]}),
        (ec2.cancel_spot_fleet_requests,
         {"SpotFleetRequestIds": before["f"][-1:], "TerminateInstances": True}),
        (ec2.create_tags,
         {"Resources": before["x"][:1], "Tags": [{"Key": OWNER_TAG, "Value": "bob"}]}),
        (events.put_rule, {"Name": x_rule, "ScheduleExpression": "rate(1 minute)",
                           "State": "DISABLED", "Tags": [{"Key": OWNER_TAG, "Value": "bob"}]}),
        (events.put_targets,
         {"Rule": x_rule, "Targets": [{"Id": "lease", "Arn": FUNCTION, "Input": early}]}),
        (events.remove_targets, {"Rule": x_rule, "Ids": ["lease"]}),
        (events.delete_rule, {"Name": x_rule}),
        (events.tag_resource,
         {"ResourceARN": f"{RULES}{x_rule}", "Tags": [{"Key": lf.LEASE_TAG, "Value": "0"}]}),
        (ssm.put_parameter, {"Name": f"{lf.PARAMETER_ROOT}/x/lease", "Value": "0",
                             "Type": "String", "Overwrite": True}),
        (ssm.delete_parameters, {"Names": [f"{lf.PARAMETER_ROOT}/x/config"]}),
        (iam.remove_role_from_instance_profile,
         {"InstanceProfileName": x_role, "RoleName": x_role}),
        (iam.delete_instance_profile, {"InstanceProfileName": x_role}),
        (iam.delete_role, {"RoleName": x_role}),
    ):  # fmt: skip
        with pytest.raises(ClientError, match="AccessDenied"):
            call(**kwargs)
    # Everything of Alice's is as it was.
    assert _live() == before and alices.lease_of("x") == lease
    value = boto("ssm").get_parameter(Name=f"{lf.PARAMETER_ROOT}/x/lease")["Parameter"]["Value"]  # type: ignore[attr-defined]
    assert value == str(int(lease or 0))
    (role,) = boto("iam").get_instance_profile(InstanceProfileName=x_role)["InstanceProfile"][
        "Roles"
    ]  # type: ignore[attr-defined]
    assert role["RoleName"] == x_role
    # Her own calls end hers.
    assert sorted(alices.end("x")["terminated"]) == before["x"]


def test_no_users_rule_makes_the_lease_function_end_another_users_annex_early(
    alices: AwsAnnexes, home: Path
) -> None:
    bob = annexes(home)
    bob.aws = AwsAnnexes(REGION, clients=_user("bob"))
    bob.create(AnnexSpec("b", count=1, lifetime=3600, image_ids=(IMAGE,)))
    events = bob.aws.client("events")
    # His own rules, which the policy lets him write: one aimed at the lease function
    # with an event naming Alice's annex, one with no target tagged as hers, long past.
    early = lf.lease_input("x", 0)
    events.put_targets(
        Rule=lf.rule_name("b"), Targets=[{"Id": "lease", "Arn": FUNCTION, "Input": early}]
    )
    tags = {OWNER_TAG: "bob", lf.ANNEX_TAG: "x", lf.LEASE_TAG: "0"}
    events.put_rule(
        Name=lf.rule_name("b2"), ScheduleExpression="rate(1 minute)", State="ENABLED",
        Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
    )  # fmt: skip
    now = time.time()
    lf.handler(json.loads(early), None, clock=lambda: now, clients=admin)
    lf.handler({"htgrid": "annex-sweep"}, None, clock=lambda: now, clients=admin)
    live = _live()
    assert len(live["x"]) == 2 and len(live["f"]) == 3
    assert "b" not in live  # his own rule said his annex's lease was over: his to say
    # At the leases' end the function ends every annex, whoever's.
    later = now + 3600 + 60
    lf.handler({"htgrid": "annex-sweep"}, None, clock=lambda: later, clients=admin)
    assert _live() == {}
    assert boto("events").list_rules(NamePrefix=lf.RULE_PREFIX)["Rules"] == []  # type: ignore[attr-defined]


def test_a_principal_tag_names_the_owner_for_users_with_no_iam_user_name() -> None:
    """Single sign-on sessions have no aws:username: the policy `setup --principal-tag`
    prints keys every owner check on the session's tag instead."""
    policy = [user_policy(REGION, ACCOUNT, "htgrid-user")]
    assert "aws:username" not in json.dumps(policy)
    alice, bob = ({"aws:PrincipalTag/htgrid-user": who} for who in ("alice", "bob"))
    instance = f"{EC2}:instance/i-1"
    hers = {f"ec2:ResourceTag/{OWNER_TAG}": "alice"}
    assert allowed(policy, "ec2:TerminateInstances", instance, {**alice, **hers})
    assert not allowed(policy, "ec2:TerminateInstances", instance, {**bob, **hers})
    # An IAM user (no such tag) owns nothing under this policy, even named alice.
    assert not allowed(policy, "ec2:TerminateInstances", instance, {"aws:username": "alice", **hers})  # fmt: skip
    token = f"{SSM}{lf.TOKEN_ROOT}/alice/x"
    assert allowed(policy, "ssm:GetParameter", token, alice)
    assert not allowed(policy, "ssm:GetParameter", token, bob)
    made = {"aws:RequestTag/" + OWNER_TAG: "alice"}
    assert allowed(policy, "ec2:RunInstances", f"{EC2}:instance/*", {**alice, **made})
    assert not allowed(policy, "ec2:RunInstances", f"{EC2}:instance/*", {**bob, **made})


def test_a_user_tags_only_its_own_rules_and_with_the_annex_keys_only() -> None:
    policy = [user_policy(REGION, ACCOUNT)]
    rule = f"{RULES}{lf.rule_name('b')}"
    bob = {"aws:username": "bob", "aws:ResourceTag/" + OWNER_TAG: "bob"}
    lease = {"aws:TagKeys": [lf.LEASE_TAG], "aws:RequestTag/" + lf.LEASE_TAG: "1"}
    assert allowed(policy, "events:TagResource", rule, {**bob, **lease})
    # Not another's rule, not to give his away, no other key.
    alices = {**bob, "aws:ResourceTag/" + OWNER_TAG: "alice"}
    assert not allowed(policy, "events:TagResource", rule, {**alices, **lease})
    away = {"aws:TagKeys": [OWNER_TAG], "aws:RequestTag/" + OWNER_TAG: "alice"}
    assert not allowed(policy, "events:TagResource", rule, {**bob, **away})
    other = {"aws:TagKeys": ["cost-center"], "aws:RequestTag/cost-center": "x"}
    assert not allowed(policy, "events:TagResource", rule, {**bob, **other})
    # A rule is put again only by its owner; a new one only tagged as the user's.
    made = {"aws:username": "bob", "aws:RequestTag/" + OWNER_TAG: "bob"}
    assert allowed(policy, "events:PutRule", rule, made)
    assert not allowed(policy, "events:PutRule", rule, {**made, "aws:ResourceTag/" + OWNER_TAG: "alice"})  # fmt: skip
    assert not allowed(policy, "events:PutRule", rule, {"aws:username": "bob"})


def test_a_user_launches_only_instances_tagged_its_own_and_in_the_setups_region() -> None:
    policy = [user_policy(REGION, ACCOUNT)]
    bob = {"aws:username": "bob"}
    made = {**bob, "aws:RequestTag/" + OWNER_TAG: "bob"}
    for kind in ("instance", "volume"):
        assert allowed(policy, "ec2:RunInstances", f"{EC2}:{kind}/*", made)
        assert not allowed(policy, "ec2:RunInstances", f"{EC2}:{kind}/*", bob)
        assert not allowed(policy, "ec2:RunInstances", f"{EC2}:{kind}/*",
                           {**bob, "aws:RequestTag/" + OWNER_TAG: "alice"})  # fmt: skip
        elsewhere = f"arn:aws:ec2:eu-west-1:{ACCOUNT}:{kind}/*"
        assert not allowed(policy, "ec2:RunInstances", elsewhere, made), elsewhere
    # What it launches from needs no tag: an image, a subnet.
    assert allowed(policy, "ec2:RunInstances", f"arn:aws:ec2:{REGION}::image/{IMAGE}", bob)
    assert allowed(policy, "ec2:RunInstances", f"{EC2}:subnet/subnet-1", bob)
    # Tags are written only by the calls that make what they tag.
    instance = f"{EC2}:instance/i-1"
    assert allowed(policy, "ec2:CreateTags", instance, {**made, "ec2:CreateAction": "RunInstances"})
    assert not allowed(policy, "ec2:CreateTags", instance, made)


class _Sts:
    def __init__(self, arn: str) -> None:
        self.arn = arn

    def get_caller_identity(self) -> dict[str, str]:
        return {"Account": ACCOUNT, "Arn": self.arn}


def test_the_client_takes_its_owner_from_its_iam_user_or_htgrid_annex_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HTGRID_ANNEX_OWNER", raising=False)
    sso = f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_Annex_0a1b/alice@example.org"
    with pytest.raises(AnnexUsageError, match="HTGRID_ANNEX_OWNER"):
        AwsAnnexes(REGION, clients=lambda _: _Sts(sso)).owner()
    monkeypatch.setenv("HTGRID_ANNEX_OWNER", "alice")
    assert AwsAnnexes(REGION, clients=lambda _: _Sts(sso)).owner() == "alice"
    monkeypatch.delenv("HTGRID_ANNEX_OWNER")
    user = f"arn:aws:iam::{ACCOUNT}:user/staff/carol"
    assert AwsAnnexes(REGION, clients=lambda _: _Sts(user)).owner() == "carol"
    # A name SSM's paths cannot hold is named, not sent.
    odd = f"arn:aws:iam::{ACCOUNT}:user/carol@example.org"
    with pytest.raises(AnnexUsageError, match=r"carol@example\.org"):
        AwsAnnexes(REGION, clients=lambda _: _Sts(odd)).owner()


def test_setup_prints_the_policy_keyed_on_the_principal_tag(aws: str, home: Path) -> None:
    status, out, err = run_cli(home, "annex", "setup", "--principal-tag", "htgrid-user")
    assert status == 0, err
    printed = out[out.index("{") : out.rindex("}") + 1]
    assert json.loads(printed) == user_policy(REGION, ACCOUNT, "htgrid-user")
    assert "HTGRID_ANNEX_OWNER" in out


def test_what_another_user_tags_with_an_annexs_name_is_not_the_annexs(
    alices: AwsAnnexes, home: Path
) -> None:
    """Bob tags his own instance and fleet with Alice's annex's name: her status, ad and
    spend count only hers, and her lease's end ends only hers (the sweeper then ends his,
    as it ends anything tagged with the name of an annex no lease holds)."""
    mine = _live()["x"]
    later = time.time() + 2 * 3600
    ann = Annexes(alices, home, pool="127.0.0.1:9618", clock=lambda: later)
    (before,) = ann.ads("x", publish=False)
    tags = [{"Key": lf.ANNEX_TAG, "Value": "x"}, {"Key": OWNER_TAG, "Value": "bob"}]
    (his,) = boto("ec2").run_instances(  # type: ignore[attr-defined]
        ImageId=IMAGE, InstanceType="m5.2xlarge", MinCount=1, MaxCount=1,
        TagSpecifications=[{"ResourceType": t, "Tags": tags} for t in ("instance", "volume")],
    )["Instances"]  # fmt: skip
    fleet = boto("ec2").request_spot_fleet(  # type: ignore[attr-defined]
        SpotFleetRequestConfig={
            "IamFleetRole": f"arn:aws:iam::{ACCOUNT}:role/bobs-fleet",
            "TargetCapacity": 1,
            "Type": "request",
            "AllocationStrategy": "lowestPrice",
            "LaunchSpecifications": [
                {
                    "ImageId": IMAGE,
                    "InstanceType": "m5.large",
                    "WeightedCapacity": 1.0,
                    "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
                }
            ],
            "TagSpecifications": [{"ResourceType": "spot-fleet-request", "Tags": tags}],
        }
    )["SpotFleetRequestId"]
    bobs = [i for i in _live()["x"] if i not in mine]
    assert his["InstanceId"] in bobs and fleet in bobs and len(bobs) == 3  # and its instance
    (x,) = alices.describe("x")
    assert sorted(i.instance_id for i in x.instances) == mine and x.fleets == ()
    (after,) = ann.ads("x", publish=False)
    for key in ("InstanceIds", "InstanceStates", "Spend", "Pending", "Booting"):
        assert after[key] == before[key], key
    assert {a.name: len(a.instances) for a in alices.describe()} == {"x": 2, "f": 2}
    # Her lease's end (her rule's own event) ends hers, not his.
    event = json.loads(lf.lease_input("x", alices.lease_of("x") or 0))
    done = lf.handler(event, None, clock=lambda: later, clients=admin)
    assert sorted(done["terminated"]) == mine and done["cancelled"] == []
    assert _live()["x"] == bobs
    # The sweeper ends what no lease holds: his, tagged with an ended annex's name.
    swept = lf.handler({"htgrid": "annex-sweep"}, None, clock=lambda: time.time(), clients=admin)
    assert sorted([*swept["terminated"], *swept["cancelled"]]) == sorted(bobs)
    assert "x" not in _live()
