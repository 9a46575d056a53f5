"""The lease: installed in the cloud before any instance is requested, and the lease
function (run in-process, with the event its rule would send and an injected clock)
ends everything of the annex at its end: instances, spot fleets, secrets, its rule."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest

from htgrid.annex import (
    INSTANCE_POLICY,
    Annexes,
    AnnexNotFound,
    AnnexSpec,
    AnnexUsageError,
    AwsAnnexes,
    SetupMissing,
    lease_function_zip,
    settings_of,
    setup,
    token_parameter,
)
from htgrid.annex import lease_function as lf
from htgrid.client import StoredToken
from htgrid.queue import NotAuthorized
from htgrid.testing import run_cli

from .conftest import IMAGE, OWNER, REGION, annexes, boto, kill_creates_at_random

SRC = Path(__file__).resolve().parents[2] / "src"


def _clients(service: str) -> Any:
    return boto(service)


#: What `_leftovers` finds when nothing of any annex is left.
NOTHING: dict[str, list[str]] = {
    "instances": [],
    "fleets": [],
    "rules": [],
    "parameters": [],
    "roles": [],
}


def _live_instances() -> list[dict[str, Any]]:
    pages = boto("ec2").describe_instances()["Reservations"]  # type: ignore[attr-defined]
    return [
        i
        for r in pages
        for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]


def _leftovers() -> dict[str, list[str]]:
    """What could still spend or hold a secret: live instances, fleets, rules, parameters,
    the annexes' instance roles and profiles."""
    ec2, events, ssm = boto("ec2"), boto("events"), boto("ssm")
    fleets = [
        f["SpotFleetRequestId"]
        for f in ec2.describe_spot_fleet_requests()["SpotFleetRequestConfigs"]  # type: ignore[attr-defined]
        if f["SpotFleetRequestState"] in ("submitted", "active", "modifying")
    ]
    rules = [r["Name"] for r in events.list_rules(NamePrefix=lf.RULE_PREFIX)["Rules"]]  # type: ignore[attr-defined]
    params = [
        p["Name"]
        for root in (lf.PARAMETER_ROOT, lf.TOKEN_ROOT)
        for p in ssm.get_parameters_by_path(Path=root, Recursive=True)["Parameters"]  # type: ignore[attr-defined]
    ]
    iam = boto("iam")
    roles = [r["RoleName"] for r in iam.list_roles(PathPrefix=lf.ROLE_PATH)["Roles"]]  # type: ignore[attr-defined]
    profiles = iam.list_instance_profiles(PathPrefix=lf.ROLE_PATH)["InstanceProfiles"]  # type: ignore[attr-defined]
    return {
        "instances": [i["InstanceId"] for i in _live_instances()],
        "fleets": fleets,
        "rules": rules,
        "parameters": params,
        "roles": roles + [f"profile {p['InstanceProfileName']}" for p in profiles],
    }


def _rule_events() -> list[dict[str, Any]]:
    """The event each annex rule's target would send (its constant input)."""
    events = boto("events")
    rules = events.list_rules(NamePrefix=lf.RULE_PREFIX)["Rules"]  # type: ignore[attr-defined]
    return [
        json.loads(target["Input"])
        for rule in rules
        for target in events.list_targets_by_rule(Rule=rule["Name"])["Targets"]  # type: ignore[attr-defined]
    ]


def _sweeper_event() -> dict[str, Any]:
    target = boto("events").list_targets_by_rule(Rule=lf.SWEEPER_RULE)["Targets"][0]  # type: ignore[attr-defined]
    return json.loads(target["Input"])


def _create(home: Path, *args: str) -> tuple[int, str, str]:
    return run_cli(home, "annex", "create", *args, "--image-ids", IMAGE)


def test_setup_installs_the_function_its_rule_and_roles(aws: str) -> None:
    fn = boto("lambda").get_function_configuration(FunctionName="htgrid-annex-lease")  # type: ignore[attr-defined]
    assert fn["Handler"] == "lease_function.handler" and fn["Runtime"] == "python3.12"
    rule = boto("events").describe_rule(Name=lf.SWEEPER_RULE)  # type: ignore[attr-defined]
    assert rule["ScheduleExpression"] == "rate(1 minute)" and rule["State"] == "ENABLED"
    assert _sweeper_event() == {"htgrid": "annex-sweep"}
    # The instances' policy, every annex's instance role's (made by `create`).
    arn = f"arn:aws:iam::123456789012:policy{lf.ROLE_PATH}{INSTANCE_POLICY}"
    assert boto("iam").get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"] == "v1"  # type: ignore[attr-defined]
    # The function's code is this package's lease_function.py, alone: no htgrid import.
    code = lease_function_zip()
    assert b"lease_function.py" in code
    assert "import htgrid" not in Path(lf.__file__).read_text()
    # Setup again: nothing fails, nothing doubles.
    status, out, err = run_cli(Path("."), "annex", "setup")
    assert status == 0, err
    assert '"iam:PassRole"' in out and '"ec2:RunInstances"' in out
    assert boto("iam").get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"] == "v2"  # type: ignore[attr-defined]
    assert len(boto("iam").list_policy_versions(PolicyArn=arn)["Versions"]) == 2  # type: ignore[attr-defined]


def test_without_setup_create_refuses_and_requests_nothing(aws: str, home: Path) -> None:
    boto("events").remove_targets(Rule=lf.SWEEPER_RULE, Ids=["lease"])  # type: ignore[attr-defined]
    with pytest.raises(SetupMissing, match="htgrid annex setup"):
        annexes(home).create(AnnexSpec("a1", count=1, lifetime=3600, image_ids=(IMAGE,)))
    assert _leftovers() == NOTHING


def test_the_lease_is_installed_before_any_instance_is_requested(aws: str, home: Path) -> None:
    calls: list[str] = []

    class Recording:
        def __init__(self, service: str) -> None:
            self.client = boto(service)

        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(self.client, name)

    ann = annexes(home)
    ann.aws = AwsAnnexes(REGION, clients=Recording)
    ann.create(AnnexSpec("a1", count=2, lifetime=3600, image_ids=(IMAGE,)))
    assert calls.index("put_rule") < calls.index("put_targets") < calls.index("run_instances")
    assert calls.index("put_parameter") < calls.index("run_instances")
    assert len(_live_instances()) == 2


def test_the_lease_function_ends_the_annex_at_its_lease_end_and_not_before(
    aws: str, home: Path
) -> None:
    status, _, err = _create(home, "a1", "--count", "3", "--lifetime", "2h")
    assert status == 0, err
    assert len(_live_instances()) == 3
    (event,) = _rule_events()
    assert event["AnnexName"] == "a1"
    end = event["LeaseExpiration"]
    assert lf.handler(event, None, clock=lambda: end - 1, clients=_clients)["expired"] is False
    assert len(_live_instances()) == 3
    # The sweeper too leaves a live lease alone.
    lf.handler(_sweeper_event(), None, clock=lambda: end - 1, clients=_clients)
    assert len(_live_instances()) == 3
    done = lf.handler(event, None, clock=lambda: end, clients=_clients)
    assert done["expired"] is True and len(done["terminated"]) == 3
    assert _leftovers() == NOTHING
    # Run again (the rule's last minute raced its removal): nothing fails.
    assert lf.handler(event, None, clock=lambda: end + 60, clients=_clients)["terminated"] == []


def test_a_spot_fleet_annex_is_cancelled_with_its_instances(aws: str, home: Path) -> None:
    status, _, err = _create(
        home, "f1", "--slots", "3", "--instance-types", "m5.large", "--lifetime", "1h"
    )
    assert status == 0, err
    assert len(_leftovers()["fleets"]) == 1
    live = _live_instances()
    assert len(live) == 3 and all(i.get("InstanceLifecycle") == "spot" for i in live)
    (event,) = _rule_events()
    lf.handler(event, None, clock=lambda: event["LeaseExpiration"] + 1, clients=_clients)
    assert _leftovers() == NOTHING


def test_shutdown_cancels_pending_requests_and_terminates(aws: str, home: Path) -> None:
    assert _create(home, "f2", "--slots", "2", "--lifetime", "1h")[0] == 0
    assert _create(home, "o2", "--count", "2", "--lifetime", "1h")[0] == 0
    status, out, err = run_cli(home, "annex", "shutdown", "f2")
    assert status == 0, err
    assert "2 instances terminated, 1 spot-fleet requests cancelled" in out
    left = _leftovers()
    assert left["fleets"] == [] and len(left["instances"]) == 2  # o2's alone
    assert left["rules"] == ["htgrid-annex-o2"]
    assert run_cli(home, "annex", "shutdown", "f2")[0] == 1  # no such annex now
    # Its token is revoked in the pool too.
    assert run_cli(home, "annex", "shutdown", "o2")[0] == 0
    assert _leftovers() == NOTHING
    revoked = (home / "etc" / "tokens.revoked").read_text()
    assert revoked.count("annex o2 shut down") == 1


def test_the_token_reaches_instances_through_ssm_not_user_data(aws: str, home: Path) -> None:
    now = 1_900_000_000.0
    made = annexes(home, clock=lambda: now).create(
        AnnexSpec("t1", count=1, lifetime=5400, image_ids=(IMAGE,), owners=("alice", "bob"))
    )
    param = boto("ssm").get_parameter(Name=token_parameter("t1", OWNER), WithDecryption=True)  # type: ignore[attr-defined]
    assert param["Parameter"]["Type"] == "SecureString"
    token = param["Parameter"]["Value"]
    claims = StoredToken.read(token).claims
    assert claims["exp"] == int(now + 5400) == int(made.lease_end)
    assert claims["scope"] == "condor:/ADVERTISE_STARTD"
    assert claims["sub"].startswith("t1.annex@")
    (iid,) = made.ids
    raw = boto("ec2").describe_instance_attribute(InstanceId=iid, Attribute="userData")  # type: ignore[attr-defined]
    user_data = base64.b64decode(raw["UserData"]["Value"]).decode()
    assert token not in user_data and token.split(".")[1] not in user_data
    settings = settings_of(user_data)
    assert settings["token_parameter"] == token_parameter("t1", OWNER)
    assert settings["start"] == (
        '(MY.AnnexName == TARGET.TargetAnnexName) && member(TARGET.Owner, {"alice", "bob"})'
    )
    assert "BEGIN CERTIFICATE" in settings["ca"]


def test_extend_moves_the_lease_in_the_cloud(aws: str, home: Path) -> None:
    now = [1_900_000_000.0]
    ann = annexes(home, clock=lambda: now[0])
    ann.create(AnnexSpec("e1", count=1, lifetime=600, image_ids=(IMAGE,)))
    old_token = boto("ssm").get_parameter(Name=token_parameter("e1", OWNER), WithDecryption=True)  # type: ignore[attr-defined]
    now[0] += 300
    new = ann.extend("e1", lifetime=3600)
    assert new == now[0] + 3600
    (event,) = _rule_events()
    assert event["LeaseExpiration"] == int(new)
    # The sweeper reads the rule's tag when the rule has no target: it says the new end.
    (rule,) = boto("events").list_rules(NamePrefix=lf.RULE_PREFIX)["Rules"]  # type: ignore[attr-defined]
    tags = boto("events").list_tags_for_resource(ResourceARN=rule["Arn"])["Tags"]  # type: ignore[attr-defined]
    assert {t["Key"]: t["Value"] for t in tags}[lf.LEASE_TAG] == str(int(new))
    boto("events").remove_targets(Rule=rule["Name"], Ids=["lease"])  # type: ignore[attr-defined]
    assert lf.sweep(_clients, now[0] + 600)["ended"] == []
    assert len(_live_instances()) == 1
    ann.aws.set_lease_target("e1", new, ann.aws.lease_function_arn())
    # The old lease end passes: nothing ends.
    assert lf.handler(event, None, clock=lambda: now[0] + 600, clients=_clients)["expired"] is False
    assert len(_live_instances()) == 1
    fresh = boto("ssm").get_parameter(Name=token_parameter("e1", OWNER), WithDecryption=True)  # type: ignore[attr-defined]
    assert StoredToken.read(fresh["Parameter"]["Value"]).claims["exp"] == int(new)
    assert fresh["Parameter"]["Value"] != old_token["Parameter"]["Value"]
    lf.handler(event, None, clock=lambda: new, clients=_clients)
    assert _leftovers() == NOTHING
    with pytest.raises(AnnexNotFound):
        ann.extend("e1", lifetime=60)


def test_add_launches_more_under_the_same_lease(aws: str, home: Path) -> None:
    assert _create(home, "d1", "--count", "1", "--lifetime", "1h")[0] == 0
    status, _, err = run_cli(home, "annex", "add", "d1", "--count", "2")
    assert status == 0, err
    assert len(_live_instances()) == 3
    assert len(_rule_events()) == 1
    (annex,) = annexes(home).describe("d1")
    assert annex.requested == 3 and len(annex.instances) == 3


def test_bad_requests_are_refused_before_anything_is_made(aws: str, home: Path) -> None:
    for args, said in (
        (["bad_name", "--count", "1", "--lifetime", "1h"], "cannot name an annex"),
        (["x1", "--count", "1", "--lifetime", "soon"], "not a duration"),
        (["x1", "--count", "1"], "--lifetime or --expiry"),
        (["x1", "--lifetime", "1h"], "--count N"),
        (["x1", "--count", "1", "--lifetime", "30"], "at least 60 s"),
    ):
        status, _, err = _create(home, *args)
        assert status == 2 and said in err, (args, err)
    assert _leftovers() == NOTHING
    assert _create(home, "x1", "--count", "1", "--lifetime", "1h")[0] == 0
    status, _, err = _create(home, "x1", "--count", "1", "--lifetime", "1h")
    assert status == 2 and "exists" in err
    with pytest.raises(AnnexUsageError):
        AnnexSpec("x2", count=1, slots=2, image_ids=(IMAGE,))


def test_a_rule_left_without_target_is_swept_after_its_lease(aws: str, home: Path) -> None:
    ann = annexes(home)
    # What a create killed between PutRule and PutTargets leaves.
    ann.aws.call(
        "events",
        "put_rule",
        Name="htgrid-annex-k1",
        ScheduleExpression="rate(1 minute)",
        Tags=[{"Key": lf.ANNEX_TAG, "Value": "k1"}, {"Key": lf.LEASE_TAG, "Value": "2000"}],
    )
    lf.handler(_sweeper_event(), None, clock=lambda: 1999, clients=_clients)
    assert _leftovers()["rules"] == ["htgrid-annex-k1"]
    lf.handler(_sweeper_event(), None, clock=lambda: 2000, clients=_clients)
    assert _leftovers()["rules"] == []


@pytest.mark.timeout(600)
def test_kill_9_of_create_at_any_moment_leaves_nothing_past_the_lease(aws: str, home: Path) -> None:
    image = ["--image-ids", IMAGE]
    done = kill_creates_at_random(home, 8, [["--count", "2", *image], ["--slots", "2", *image]])
    made = _leftovers()
    assert made["instances"], f"{done}: no instance at all was requested"
    # Every rule's own event past its lease, then the sweeper's, in the cloud's minutes.
    later = time.time() + 3600 + 60
    for event in _rule_events():
        lf.handler(event, None, clock=lambda: later, clients=_clients)
    lf.handler(_sweeper_event(), None, clock=lambda: later, clients=_clients)
    assert _leftovers() == NOTHING, done


def test_a_status_refresh_makes_as_many_cloud_calls_for_100_instances_as_for_1(
    aws: str, home: Path
) -> None:
    def calls(name: str) -> int:
        ann = annexes(home)
        before = ann.aws.calls
        (annex,) = ann.describe(name)
        assert annex.instances
        return ann.aws.calls - before

    annexes(home).create(AnnexSpec("one", count=1, lifetime=3600, image_ids=(IMAGE,)))
    one = calls("one")
    annexes(home).create(AnnexSpec("many", count=100, lifetime=3600, image_ids=(IMAGE,)))
    (many,) = annexes(home).describe("many")
    assert len(many.instances) == 100
    assert calls("many") == one
    # And every annex at once: the same listings, not one more per annex.
    ann = annexes(home)
    before = ann.aws.calls
    assert len(ann.describe()) == 2
    assert ann.aws.calls - before <= one + 1  # the listing of rules


def test_no_join_runs_the_users_own_boot_under_the_same_lease(
    aws: str, home: Path, tmp_path: Path
) -> None:
    boot = tmp_path / "glidein.sh"
    boot.write_text("#!/bin/sh\necho my own startd\n")
    status, _, err = _create(
        home, "g1", "--count", "1", "--lifetime", "1h", "--no-join", "--user-data", str(boot)
    )
    assert status == 0, err
    (iid,) = (i["InstanceId"] for i in _live_instances())
    raw = boto("ec2").describe_instance_attribute(InstanceId=iid, Attribute="userData")  # type: ignore[attr-defined]
    assert base64.b64decode(raw["UserData"]["Value"]).decode() == boot.read_text()
    # No token was made for it; the lease and its ad's facts are there all the same.
    assert token_parameter("g1", OWNER) not in _leftovers()["parameters"]
    (annex,) = annexes(home).describe("g1")
    assert annex.requested == 1 and [i.instance_id for i in annex.instances] == [iid]
    (event,) = _rule_events()
    lf.handler(event, None, clock=lambda: event["LeaseExpiration"], clients=_clients)
    assert _leftovers() == NOTHING


def test_create_warns_when_the_instances_could_never_reach_the_pool(aws: str, home: Path) -> None:
    # The pool's own collector address (no --pool) is loopback: say so, and how to fix it.
    status, _, err = _create(home, "w1", "--count", "1", "--lifetime", "1h")
    assert status == 0, err
    assert "warning" in err and "127.0.0.1:9618" in err and "can never join" in err
    assert "--pool HOST:PORT" in err and "--no-join" in err
    for args in (["--pool", "10.1.2.3:9618"], ["--no-join"]):
        name = f"w{len(args[0])}"
        status, _, err = _create(home, name, "--count", "1", "--lifetime", "1h", *args)
        assert status == 0, err
        assert "can never join" not in err


class _Terminations:
    """boto3 clients that note the (injected) time of each TerminateInstances."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.at: list[float] = []

    def __call__(self, service: str) -> Any:
        client = boto(service)
        if service != "ec2":
            return client
        outer = self

        class Ec2:
            def __getattr__(self, name: str) -> Any:
                method = getattr(client, name)
                if name != "terminate_instances":
                    return method

                def terminate(**kw: Any) -> Any:
                    outer.at.append(outer.clock())
                    return method(**kw)

                return terminate

        return Ec2()


class _Context:
    """Lambda's context: how much of the invocation's timeout is left."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def get_remaining_time_in_millis(self) -> int:
        return int(self.seconds * 1000)


@pytest.mark.parametrize("before", [0.5, 30.0, 59.5])
def test_the_lease_function_ends_the_annex_at_its_lease_end_to_the_second(
    aws: str, home: Path, before: float
) -> None:
    # The rule fires once a minute, at a phase of its own: the firing in the last minute
    # (`before` s before the end) waits for the end, and terminates then, not a minute on.
    now = [1_900_000_000.0]
    annexes(home, clock=lambda: now[0]).create(
        AnnexSpec("m1", count=3, lifetime=3600, image_ids=(IMAGE,))
    )
    (event,) = _rule_events()
    end = event["LeaseExpiration"]
    clients = _Terminations(lambda: now[0])

    def sleep(seconds: float) -> None:
        now[0] += seconds

    now[0] = end - before - 60  # the firing a minute earlier: not the last minute
    assert lf.handler(event, None, clock=lambda: now[0], clients=clients, sleep=sleep)[
        "expired"
    ] is False  # fmt: skip
    assert now[0] == end - before - 60 and len(_live_instances()) == 3
    now[0] = end - before
    done = lf.handler(event, _Context(120), clock=lambda: now[0], clients=clients, sleep=sleep)
    assert done["expired"] is True and len(done["terminated"]) == 3
    assert clients.at == [end]  # at the lease's end: not before, not a minute after
    assert _leftovers() == NOTHING


def test_a_function_with_no_time_to_wait_ends_the_annex_at_the_next_minute(
    aws: str, home: Path
) -> None:
    # An invocation with no time to spare for a wait (its timeout nearly spent) leaves
    # the last minute alone: the next firing, up to 59 s past the end, ends everything.
    now = [1_900_000_000.0]
    annexes(home, clock=lambda: now[0]).create(
        AnnexSpec("m2", count=2, lifetime=3600, image_ids=(IMAGE,))
    )
    (event,) = _rule_events()
    end = event["LeaseExpiration"]
    clients = _Terminations(lambda: now[0])
    slept: list[float] = []
    now[0] = end - 1
    done = lf.handler(
        event, _Context(lf.WAIT_MARGIN), clock=lambda: now[0], clients=clients, sleep=slept.append
    )
    assert done["expired"] is False and slept == [] and len(_live_instances()) == 2
    now[0] = end + 59
    done = lf.handler(
        event, _Context(lf.WAIT_MARGIN), clock=lambda: now[0], clients=clients, sleep=slept.append
    )
    assert done["expired"] is True and clients.at == [end + 59]
    assert _leftovers() == NOTHING


def test_setup_gives_the_function_time_to_wait_for_a_lease_end(aws: str) -> None:
    fn = boto("lambda").get_function_configuration(FunctionName="htgrid-annex-lease")  # type: ignore[attr-defined]
    assert fn["Timeout"] == lf.FUNCTION_TIMEOUT >= 60 + lf.WAIT_MARGIN
    # An older setup's function (60 s) gets the new timeout when setup runs again.
    boto("lambda").update_function_configuration(FunctionName="htgrid-annex-lease", Timeout=60)  # type: ignore[attr-defined]
    setup(AwsAnnexes(REGION))
    fn = boto("lambda").get_function_configuration(FunctionName="htgrid-annex-lease")  # type: ignore[attr-defined]
    assert fn["Timeout"] == lf.FUNCTION_TIMEOUT


def test_a_token_the_schedd_refuses_leaves_the_cloud_as_it_was(aws: str, home: Path) -> None:
    class Refusing:  # the schedd's answer to a user asking for another's annex name
        def annex_token(self, annex: str, *args: Any, **kw: Any) -> dict[str, Any]:
            raise NotAuthorized(f"annex {annex} belongs to bob until its token expires")

    def user() -> Annexes:
        return Annexes(AwsAnnexes(REGION), home, pool="127.0.0.1:9618", schedd=Refusing)  # type: ignore[arg-type]

    with pytest.raises(NotAuthorized, match="belongs to bob"):
        user().create(AnnexSpec("r1", count=1, lifetime=3600, image_ids=(IMAGE,)))
    assert _leftovers() == NOTHING
    annexes(home).create(AnnexSpec("r2", count=1, lifetime=3600, image_ids=(IMAGE,)))
    (before,) = _rule_events()
    with pytest.raises(NotAuthorized):
        user().extend("r2", lifetime=7200)
    assert _rule_events() == [before]
