"""The annex's lease, enforced in the cloud: the AWS Lambda function `htgrid annex setup`
installs (this file alone, zipped; handler `lease_function.handler`, runtime python3.12).

It imports nothing of htgrid, only the standard library and boto3 (which Lambda's
Python runtime provides), so it runs there as it runs in the tests.

Two events reach it, both constant inputs of EventBridge rules at rate(1 minute):

* an annex's own rule (`htgrid-annex-NAME`, made by `htgrid annex create` BEFORE any
  instance is requested, its input rewritten by `htgrid annex extend`):

      {"htgrid": "annex-lease", "AnnexName": "NAME", "LeaseExpiration": 1767225600,
       "RuleName": "htgrid-annex-NAME"}

  The event is only what some rule's owner put there: the lease it acts on is the one
  the annex's own rule holds (`_lease_of`), which only the annex's owner may change, so
  a user's rule naming another's annex ends nothing early (an annex with no rule is
  ended, as the sweeper ends it).
  Before the expiry it does nothing, but in the last minute (the rule would next fire
  up to a minute after the end) it waits for the end, so the annex ends within a second
  of its lease rather than up to a minute after. From then on it terminates every instance tagged
  `htgrid:AnnexName = NAME` and with the owner the rule is tagged with (`htgrid:AnnexOwner`:
  what another user tagged with the name is not the annex's), cancels the annex's
  spot-fleet requests (terminating their instances), deletes the annex's SSM parameters and its token, then its instances' role
  and instance profile, and, last, removes its own rule: should any step fail, the rule
  stays and the next minute tries again.

* the sweeper's rule (`htgrid-annex_sweeper`, made by setup): {"htgrid": "annex-sweep"}.
  It enforces every annex rule's lease as above (a second chance, should one rule's
  invocation be lost), deletes annex rules left without a target whose lease tag has
  passed (a `create` killed between PutRule and PutTargets), and terminates instances
  and cancels fleets of annexes that have no rule at all (requested, somehow, after
  their lease was enforced; or another user's tagged with an ended annex's name).

The wait is bounded by the invocation's remaining time (`WAIT_MARGIN` kept for the
work), so a function set up with a shorter timeout waits less and the next minute ends it.

Nothing is kept between invocations: the rules, their inputs and the tags are the state.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = [
    "ANNEX_TAG",
    "FUNCTION_TIMEOUT",
    "LEASE_TAG",
    "OWNER_TAG",
    "PARAMETER_ROOT",
    "ROLE_PATH",
    "RULE_PREFIX",
    "SWEEPER_RULE",
    "TOKEN_ROOT",
    "WAIT_MARGIN",
    "enforce",
    "handler",
    "instance_role",
    "lease_input",
    "rule_name",
    "sweep",
]

#: Every rule of an annex is named with this prefix and the annex's name.
RULE_PREFIX = "htgrid-annex-"
#: The setup's own rule (an underscore: no annex name has one, so no annex rule is it).
SWEEPER_RULE = "htgrid-annex_sweeper"
#: The tag on an annex's instances, fleets and rule that names the annex.
ANNEX_TAG = "htgrid:AnnexName"
#: The tag on an annex's rule holding its lease's end (seconds since 1970).
LEASE_TAG = "htgrid:LeaseExpiration"
#: The tag on all an annex makes naming its owner (the IAM user, or the principal tag's
#: value): the users' policy lets each change and end only what is tagged its own.
OWNER_TAG = "htgrid:AnnexOwner"
#: Each annex's SSM parameters are under PARAMETER_ROOT/NAME/.
PARAMETER_ROOT = "/htgrid/annex"
#: Each annex's token is TOKEN_ROOT/OWNER/NAME (OWNER: the IAM user who made it), so that a
#: user's policy may read its own tokens only (`${aws:username}` in the parameter's ARN).
TOKEN_ROOT = "/htgrid/annex-token"
#: The IAM path of each annex's instance role and profile (`instance_role`).
ROLE_PATH = "/htgrid-annex/"
#: The function's timeout (seconds): a minute of waiting for a lease's end, and the work.
FUNCTION_TIMEOUT = 120
#: Seconds of an invocation kept for the work after a wait (terminating, cancelling).
WAIT_MARGIN = 45.0
#: The most an invocation waits for a lease's end: the rule fires once a minute.
_MAX_WAIT = 60.0

_LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped"]
_LIVE_FLEET_STATES = frozenset({"submitted", "active", "modifying"})

Clients = Callable[[str], Any]  # service name -> boto3 client


def rule_name(annex: str) -> str:
    """The EventBridge rule that holds `annex`'s lease."""
    return RULE_PREFIX + annex


def instance_role(annex: str, region: str) -> str:
    """The name of `annex`'s instance role and instance profile (under ROLE_PATH): one an
    annex, so that its instances may read its token and no other. IAM's names are the
    account's, so the region is in it (a digest of both when too long for 64 characters)."""
    name = f"{annex}.{region}"
    if len(name) > 64:
        name = f"{annex[:51]}.{hashlib.sha256(name.encode()).hexdigest()[:12]}"
    return name


def lease_input(annex: str, expiration: float) -> str:
    """The constant input of `annex`'s rule: the event this function receives."""
    return json.dumps(
        {
            "htgrid": "annex-lease",
            "AnnexName": annex,
            "LeaseExpiration": int(expiration),
            "RuleName": rule_name(annex),
        },
        sort_keys=True,
    )


def _default_clients(region: str | None = None) -> Clients:
    import boto3  # type: ignore[import-untyped]  # Lambda's runtime provides it

    session = boto3.session.Session(region_name=region or os.environ.get("AWS_REGION"))
    made: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in made:
            made[service] = session.client(service)
        return made[service]

    return client


def _wait_budget(context: object) -> float:
    """How long this invocation may wait and still do the work (Lambda's context says
    the time left; without one, as when called by hand, it does not wait)."""
    left = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(left):
        return 0.0
    try:
        return max(0.0, min(_MAX_WAIT, float(left()) / 1000.0 - WAIT_MARGIN))
    except (TypeError, ValueError):
        return 0.0


def handler(event: dict[str, Any], context: object, *, clock: Callable[[], float] = time.time,
            clients: Clients | None = None,
            sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:  # fmt: skip
    """Lambda's entry: what it did, as a dict (Lambda logs it)."""
    aws = clients if clients is not None else _default_clients()
    kind = event.get("htgrid")
    if kind == "annex-lease":
        name = event.get("AnnexName")
        expiration = event.get("LeaseExpiration")
        if not isinstance(name, str) or not isinstance(expiration, int | float):
            return {"error": "an annex-lease event needs AnnexName and LeaseExpiration"}
        # The annex's own rule's lease, if it has one; with none, what is left of it is
        # no lease's, and is ended as the sweeper would.
        events = aws("events")
        rule = _rule_of(events, name)
        lease = None if rule is None else _lease_of(events, rule)
        expiration = expiration if lease is None else lease[1]
        left = float(expiration) - clock()
        budget = _wait_budget(context)
        if 0 < left <= budget:
            # The next firing is up to a minute past the end: end it at the end instead
            # (a sleep may return a little early by the wall clock: sleep on, a little).
            waited = 0.0
            while left > 0 and waited <= budget:
                sleep(max(left, 0.01))
                waited += max(left, 0.01)
                left = float(expiration) - clock()
        now = clock()
        if now < expiration or rule is None:
            return enforce(aws, name, float(expiration), now)
        return enforce(aws, name, float(expiration), now, owner=_rule_owner(events, rule))
    if kind == "annex-sweep":
        return sweep(aws, clock())
    return {"error": f"not an htgrid annex event: {str(kind)[:80]!r}"}


def _pages(method: Callable[..., dict[str, Any]], key: str, token: str, **kwargs: Any) -> Iterator[Any]:  # fmt: skip
    while True:
        page = method(**kwargs)
        yield from page.get(key, [])
        nxt = page.get(token)
        if not nxt:
            return
        kwargs[token] = nxt


def _live_instances(ec2: Any, annex: str | None) -> Iterator[dict[str, Any]]:
    filters = [{"Name": "instance-state-name", "Values": _LIVE_INSTANCE_STATES}]
    if annex is None:
        filters.append({"Name": "tag-key", "Values": [ANNEX_TAG]})
    else:
        filters.append({"Name": f"tag:{ANNEX_TAG}", "Values": [annex]})
    for reservation in _pages(
        ec2.describe_instances, "Reservations", "NextToken", Filters=filters, MaxResults=1000
    ):
        yield from reservation.get("Instances", [])


def _tag(tags: Iterable[dict[str, str]] | None, key: str) -> str | None:
    return next((t.get("Value") for t in tags or () if t.get("Key") == key), None)


def _live_fleets(ec2: Any) -> Iterator[tuple[str, str, str | None]]:
    """(request id, annex name, owner) of every live spot-fleet request of an annex."""
    for config in _pages(ec2.describe_spot_fleet_requests, "SpotFleetRequestConfigs", "NextToken"):
        tags = config.get("Tags")
        annex = _tag(tags, ANNEX_TAG)
        if annex is not None and config.get("SpotFleetRequestState") in _LIVE_FLEET_STATES:
            yield config["SpotFleetRequestId"], annex, _tag(tags, OWNER_TAG)


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _stop_spending(aws: Clients, annexes: set[str] | None,
                   owner: str | None = None) -> dict[str, list[str]]:  # fmt: skip
    """Cancel the fleets and terminate the instances of `annexes` (None: of every annex
    not ruled by a lease, which `sweep` computes and passes); `owner`'s only, if given
    (a user's shutdown: what another tagged with the annex's name is not its to end)."""
    ec2 = aws("ec2")
    # The fleets first, so that none launches an instance after the listing below; their
    # instances are terminated with the rest.
    fleets = [
        f
        for f, a, o in _live_fleets(ec2)
        if (annexes is None or a in annexes) and (owner is None or o == owner)
    ]
    for chunk in _chunks(fleets, 100):
        ec2.cancel_spot_fleet_requests(SpotFleetRequestIds=chunk, TerminateInstances=False)
    if annexes is not None and len(annexes) == 1:
        found = _live_instances(ec2, next(iter(annexes)))
    else:
        wanted = annexes
        found = (
            i
            for i in _live_instances(ec2, None)
            if wanted is None or _tag(i.get("Tags"), ANNEX_TAG) in wanted
        )
    instances = [
        i["InstanceId"] for i in found if owner is None or _tag(i.get("Tags"), OWNER_TAG) == owner
    ]
    for chunk in _chunks(instances, 1000):
        ec2.terminate_instances(InstanceIds=chunk)
    return {"terminated": instances, "cancelled": fleets}


def _delete_parameters(ssm: Any, annex: str) -> list[str]:
    names = [
        p["Name"]
        for p in _pages(
            ssm.get_parameters_by_path,
            "Parameters",
            "NextToken",
            Path=f"{PARAMETER_ROOT}/{annex}",
            Recursive=True,
        )
    ]
    for chunk in _chunks(names, 10):
        ssm.delete_parameters(Names=chunk)
    return names


def _delete_tokens(ssm: Any, annex: str, token: str | None) -> list[str]:
    """The annex's token: `token`, else TOKEN_ROOT/OWNER/NAME whoever its owner (the
    owner's own shutdown names it: a user may not list the others')."""
    if token is not None:
        return list(ssm.delete_parameters(Names=[token]).get("DeletedParameters", []))
    names = [
        p["Name"]
        for p in _pages(
            ssm.get_parameters_by_path, "Parameters", "NextToken", Path=TOKEN_ROOT, Recursive=True
        )
        if p["Name"].rpartition("/")[2] == annex
    ]
    for chunk in _chunks(names, 10):
        ssm.delete_parameters(Names=chunk)
    return names


def _delete_role(iam: Any, name: str) -> bool:
    """The instance profile and role `name` (False: there was none)."""

    def gone(call: Callable[..., Any], **kwargs: Any) -> bool:
        try:
            call(**kwargs)
        except Exception as exc:
            if _code(exc) != "NoSuchEntity":
                raise  # the rule stays, and runs this again in a minute
            return False
        return True

    found = False
    try:
        profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    except Exception as exc:
        if _code(exc) != "NoSuchEntity":
            raise
    else:
        # A create killed halfway may have left it without its role.
        for role in profile.get("Roles", []):
            gone(iam.remove_role_from_instance_profile, InstanceProfileName=name,
                 RoleName=role["RoleName"])  # fmt: skip
        found = gone(iam.delete_instance_profile, InstanceProfileName=name)
    try:
        attached = iam.list_attached_role_policies(RoleName=name).get("AttachedPolicies", [])
    except Exception as exc:
        if _code(exc) != "NoSuchEntity":
            raise
        return found
    for policy in attached:
        gone(iam.detach_role_policy, RoleName=name, PolicyArn=policy["PolicyArn"])
    return gone(iam.delete_role, RoleName=name) or found


def _code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    return response.get("Error", {}).get("Code") if isinstance(response, dict) else None


def _remove_rule(events: Any, rule: str) -> None:
    try:
        ids = [
            t["Id"] for t in _pages(events.list_targets_by_rule, "Targets", "NextToken", Rule=rule)
        ]
        if ids:
            events.remove_targets(Rule=rule, Ids=ids)
        events.delete_rule(Name=rule)
    except Exception as exc:
        if _code(exc) != "ResourceNotFoundException":
            raise  # the rule stays, and runs this again in a minute


def enforce(aws: Clients, annex: str, expiration: float, now: float,
            token: str | None = None, owner: str | None = None) -> dict[str, Any]:  # fmt: skip
    """End `annex` if its lease has passed: instances, fleets, secrets, then its rule
    (`token`: its token's parameter, when the caller knows it; `owner`: only what is
    tagged as its, when a user ends its own annex)."""
    if now < expiration:
        return {"annex": annex, "expired": False, "remaining": int(expiration - now)}
    done: dict[str, Any] = {"annex": annex, "expired": True}
    done.update(_stop_spending(aws, {annex}, owner))
    ssm = aws("ssm")
    done["parameters"] = _delete_parameters(ssm, annex) + _delete_tokens(ssm, annex, token)
    # Its instances' role last: they are gone, and with it any reading of the token.
    done["role"] = _delete_role(aws("iam"), instance_role(annex, ssm.meta.region_name))
    _remove_rule(aws("events"), rule_name(annex))
    return done


def _rule_of(events: Any, annex: str) -> dict[str, Any] | None:
    """The annex's own rule (None: it has none)."""
    rule = rule_name(annex)
    for found in _pages(events.list_rules, "Rules", "NextToken", NamePrefix=rule):
        if found.get("Name") == rule:
            return dict(found)
    return None


def _rule_owner(events: Any, rule: dict[str, Any]) -> str | None:
    """The owner an annex's rule is tagged with (only the owner may tag it so): what
    its lease ends is what is tagged with its name and this owner, not what another
    user tagged with its name (None: a rule made before owners were tagged ends all)."""
    try:
        tags = events.list_tags_for_resource(ResourceARN=rule["Arn"]).get("Tags", [])
    except Exception as exc:
        if _code(exc) != "ResourceNotFoundException":
            raise
        return None
    return _tag(tags, OWNER_TAG)


def _lease_of(events: Any, rule: dict[str, Any]) -> tuple[str, float] | None:
    """The (annex, expiry) of an annex's rule: the annex its name says (a user may put
    anything on its own rule, but no other's lease), the expiry its target's input says,
    else, with no target, its tags: None if neither says one (a rule of something else)."""
    annex = str(rule["Name"])[len(RULE_PREFIX) :]
    try:
        targets = events.list_targets_by_rule(Rule=rule["Name"]).get("Targets", [])
    except Exception as exc:
        if _code(exc) != "ResourceNotFoundException":
            raise
        return None
    for target in targets:
        try:
            doc = json.loads(target.get("Input") or "")
            if isinstance(doc, dict) and doc.get("htgrid") == "annex-lease":
                return annex, float(doc["LeaseExpiration"])
        except (ValueError, KeyError, TypeError):
            continue
    if targets:
        return None
    tags = events.list_tags_for_resource(ResourceARN=rule["Arn"]).get("Tags", [])
    lease = _tag(tags, LEASE_TAG)
    if _tag(tags, ANNEX_TAG) is None or lease is None:
        return None
    try:
        return annex, float(lease)
    except ValueError:
        return annex, 0.0  # a lease tag that says nothing is no lease


def sweep(aws: Clients, now: float) -> dict[str, Any]:
    """Enforce every annex's lease, and end what no lease rules."""
    events = aws("events")
    ruled: set[str] = set()
    ended: list[dict[str, Any]] = []
    for rule in _pages(events.list_rules, "Rules", "NextToken", NamePrefix=RULE_PREFIX):
        lease = _lease_of(events, rule)
        if lease is None:
            continue
        annex, expiration = lease
        owner = _rule_owner(events, rule) if now >= expiration else None
        result = enforce(aws, annex, expiration, now, owner=owner)
        if result["expired"]:
            ended.append(result)
        else:
            ruled.add(annex)
    ec2 = aws("ec2")
    orphans = {a for _, a, _ in _live_fleets(ec2)} | {
        a for i in _live_instances(ec2, None) if (a := _tag(i.get("Tags"), ANNEX_TAG))
    }
    orphans -= ruled
    stray = _stop_spending(aws, orphans) if orphans else {"terminated": [], "cancelled": []}
    return {"ended": ended, "unruled": sorted(orphans), **stray}
