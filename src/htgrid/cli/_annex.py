"""`htgrid annex`: cloud instances that join the pool for a while (condor_annex).

    htgrid annex setup [--region R] [--vpc V] [--cidr C] [--principal-tag KEY]
                                                             once per account and region
    htgrid annex create NAME --count N --lifetime 2h --image-ids ami-1 [--idle 15m] ...
    htgrid annex create NAME --slots 16 --instance-types m5.large:2,c5.xlarge:4 ...
    htgrid annex add NAME --count N | --slots W
    htgrid annex extend NAME --lifetime 1h | --expiry "2030-01-01 12:00"
    htgrid annex status [NAME] [-json|-classad]
    htgrid annex list
    htgrid annex shutdown NAME

AWS credentials and endpoints are boto3's own (AWS_PROFILE, AWS_ACCESS_KEY_ID,
AWS_ENDPOINT_URL...); the region is --region, else AWS_DEFAULT_REGION, else us-east-1.
An annex is its owner's: the IAM user's, or for a principal with no IAM user name (single
sign-on) HTGRID_ANNEX_OWNER's, the value of the principal tag setup's --principal-tag names.
With --cloud azure: a service principal from AZURE_TENANT_ID, AZURE_CLIENT_ID and
AZURE_CLIENT_SECRET, the subscription from --subscription or AZURE_SUBSCRIPTION_ID,
the setup's --resource-group (htgrid-annex), the location from --region (eastus).
Exit status: 0 done, 1 no such annex or the cloud refused, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from htgrid.annex import (
    DEFAULT_IDLE,
    AnnexCloudError,
    Annexes,
    AnnexNotFound,
    AnnexSpec,
    AnnexUsageError,
    AwsAnnexes,
    AzureAnnexes,
    SetupMissing,
    azure_setup,
    parse_duration,
    parse_expiry,
    parse_tags,
    setup,
)
from htgrid.cli._common import EXIT_NO, EXIT_OK, EXIT_USAGE
from htgrid.pool import htgrid_home

__all__ = ["register"]


def _listed(text: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def register(commands: Any) -> None:
    """Add `annex` and its verbs to the top-level parser."""
    annex = commands.add_parser(
        "annex",
        help="cloud instances that join the pool for a while (condor_annex)",
        description="Rent cloud instances that join the pool, under a lease the cloud enforces.",
    )
    verbs = annex.add_subparsers(dest="verb", metavar="VERB")

    def verb(name: str, what: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = verbs.add_parser(name, help=what, description=what)
        parser.add_argument("--region", default=None, help="the region (us-east-1, eastus)")
        parser.add_argument("--cloud", default="ec2", choices=["ec2", "azure"], help="ec2 or azure")
        parser.add_argument(
            "--subscription", help="azure: the subscription (AZURE_SUBSCRIPTION_ID)"
        )
        parser.add_argument(
            "--resource-group", default="htgrid-annex", help="azure: the setup's resource group"
        )
        return parser

    s = verb("setup", "install the lease function, roles and security group (administrator)")
    s.add_argument("--vpc", help="the VPC of the security group (default VPC)")
    s.add_argument("--cidr", default="0.0.0.0/0", help="who may reach the nodes (the pool)")
    s.add_argument(
        "--principal-tag", metavar="KEY",
        help="ec2: the users' policy names each annex's owner by this principal tag (single "
        "sign-on: users set HTGRID_ANNEX_OWNER to its value), not the IAM user name",
    )  # fmt: skip
    s.add_argument("--vault", help="azure: the Key Vault's name (globally unique)")
    s.add_argument(
        "--user-object-ids",
        default="",
        help="azure: the users' object ids (each gets a Key Vault of their own)",
    )
    s.set_defaults(handler=_setup)

    c = verb("create", "start an annex: its lease first, then its instances")
    c.add_argument("name", metavar="NAME")
    c.add_argument("--count", type=int, default=0, help="on-demand instances")
    c.add_argument("--slots", type=int, default=0, help="spot fleet capacity, in weights")
    c.add_argument("--lifetime", help="the lease: 3600, 90m, 2h, 1d")
    c.add_argument("--expiry", help='the lease\'s end, "YYYY-MM-DD HH:MM" (local time)')
    c.add_argument("--idle", default=str(int(DEFAULT_IDLE)), help="idle instances stop (900)")
    c.add_argument("--instance-types", help="t1[:weight],t2[:weight] (m5.large, Standard_D2s_v3)")
    c.add_argument(
        "--image-ids", required=True,
        help="the image (AMI), or one per type; azure: publisher:offer:sku:version or an id",
    )  # fmt: skip
    c.add_argument("--spot-price", help="the most to pay an hour (spot fleet)")
    c.add_argument("--keypair", help="an EC2 key pair for SSH")
    c.add_argument("--vpc", help="the VPC (with --subnet)")
    c.add_argument("--subnet", help="the subnet")
    c.add_argument("--security-groups", help="security group ids, comma-separated")
    c.add_argument("--project-id", help="a project to tag the instances with")
    c.add_argument("--tag", action="append", default=[], metavar="K=V", help="tag (repeatable)")
    c.add_argument("--owners", help="who may run jobs on it (default: you)")
    c.add_argument("--user-data", type=Path, help="the instances' own boot (with --no-join)")
    c.add_argument("--no-join", action="store_true", help="the instances do not join the pool")
    c.add_argument("--pool", help="the collector the instances join (default: this pool's)")
    c.add_argument(
        "--config", action="append", default=[], metavar="KNOB=VALUE",
        help="a line of the instances' htgrid.conf (repeatable)",
    )  # fmt: skip
    c.set_defaults(handler=_create)

    a = verb("add", "more instances under an annex's lease")
    a.add_argument("name", metavar="NAME")
    a.add_argument("--count", type=int, default=0)
    a.add_argument("--slots", type=int, default=0)
    a.set_defaults(handler=_add)

    e = verb("extend", "a longer lease, counted from now (or to --expiry)")
    e.add_argument("name", metavar="NAME")
    e.add_argument("--lifetime")
    e.add_argument("--expiry")
    e.set_defaults(handler=_extend)

    st = verb("status", "annexes: instances by state, slots, lease (refreshes their ads)")
    st.add_argument("name", nargs="?", metavar="NAME")
    st.add_argument("-json", "--json", action="store_true", help="the annex ads, as JSON")
    st.add_argument("-classad", "--classad", action="store_true", help="the annex ads")
    st.set_defaults(handler=_status)

    ls = verb("list", "the annexes of this region")
    ls.set_defaults(handler=_list)

    sh = verb("shutdown", "end an annex now: requests cancelled, instances terminated")
    sh.add_argument("name", metavar="NAME")
    sh.set_defaults(handler=_shutdown)
    annex.set_defaults(handler=lambda _: _usage(annex))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _annexes(args: argparse.Namespace) -> Annexes:
    pool = getattr(args, "pool", None)
    if args.cloud == "azure":
        cloud = AzureAnnexes(
            args.region or "eastus", subscription=args.subscription, group=args.resource_group
        )
        return Annexes(cloud, htgrid_home(), pool=pool)
    region = args.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return Annexes(AwsAnnexes(region), htgrid_home(), pool=pool)


def _guard(fn: Any) -> Any:
    """The annex errors as the CLI's exit statuses, with the reason on stderr."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except AnnexUsageError as exc:
            print(f"htgrid annex: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except (AnnexNotFound, SetupMissing, AnnexCloudError) as exc:
            print(f"htgrid annex: {exc}", file=sys.stderr)
            return EXIT_NO

    return run


@_guard
def _setup(args: argparse.Namespace) -> int:
    cloud = _annexes(args).cloud
    if isinstance(cloud, AzureAnnexes):
        made = azure_setup(cloud, users=_listed(args.user_object_ids), vault=args.vault)
        if made["migrated"]:
            print(
                f"Key Vault {made['vault']} was in access-policy mode: switched to Azure "
                "RBAC, each access policy's secret permissions given first as a role on the "
                f"vault to {', '.join(made['migrated'])} (the policies stay, inert)."
            )
        print(
            f"Installed in {made['resource_group']} ({made['region']}): Automation account "
            f"{made['account']} with runbook {made['runbook']} and its hourly sweeper, "
            f"lease timer {made['function_app']} (every minute), Key Vault {made['vault']}."
            "\nGive annex users this role on the resource group:"
        )
        print(json.dumps(made["user_role"], indent=2))
        print(
            "with this condition on the assignment (the roles they may give their scale "
            f"sets, no other):\n{made['user_condition']}"
        )
        for user, vault in sorted(made.get("user_vaults", {}).items()):
            print(f"User {user}: Key Vault {vault}, theirs alone.")
        _moved(made["vault"], made["moved"])
        return EXIT_OK
    assert isinstance(cloud, AwsAnnexes)
    done = setup(cloud, vpc=args.vpc, cidr=args.cidr, principal_tag=args.principal_tag)
    print(
        f"Installed in {done['region']}: lease function {done['function']}, sweeper rule "
        f"{done['sweeper']}, instances' policy {done['instance_policy']}, security group "
        f"{done['security_group']}.\nGive annex users this policy:"
    )
    print(json.dumps(done["user_policy"], indent=2))
    if args.principal_tag:
        print(
            f"(Each user's annexes are those of its principal tag {args.principal_tag}'s "
            "value: users set HTGRID_ANNEX_OWNER to it.)"
        )
    return EXIT_OK


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(seconds))


@_guard
def _create(args: argparse.Namespace) -> int:
    extra: dict[str, str] = {}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AnnexUsageError(f"--config {item!r} is not KNOB=VALUE")
        extra[key.strip()] = value.strip()
    annexes = _annexes(args)
    spec = AnnexSpec(
        name=args.name,
        count=args.count,
        slots=args.slots,
        lifetime=parse_duration(args.lifetime, "--lifetime") if args.lifetime else None,
        expiry=parse_expiry(args.expiry) if args.expiry else None,
        idle=parse_duration(args.idle, "--idle"),
        region=annexes.cloud.region,
        instance_types=_listed(args.instance_types)
        or (("Standard_D2s_v3",) if args.cloud == "azure" else ("m5.large",)),
        image_ids=_listed(args.image_ids),
        spot_price=args.spot_price,
        keypair=args.keypair,
        subnet=args.subnet,
        vpc=args.vpc,
        security_groups=_listed(args.security_groups),
        project_id=args.project_id,
        tags=parse_tags(args.tag),
        owners=_listed(args.owners),
        user_data=args.user_data.read_text() if args.user_data else None,
        join=not args.no_join,
        extra=extra,
    )
    if not spec.count and not spec.slots:
        raise AnnexUsageError("--count N (on-demand instances) or --slots W (a spot fleet)")
    if args.cloud == "azure" and (len(spec.instance_types) > 1 or len(spec.image_ids) > 1):
        raise AnnexUsageError(
            "--cloud azure: a scale set has one size and one image (--instance-types, --image-ids)"
        )
    made = annexes.create(spec)
    for warning in made.warnings:
        print(f"htgrid annex: warning: {warning}", file=sys.stderr)
    print(
        f"Annex {made.name}: lease until {_when(made.lease_end)} installed; requested "
        f"{', '.join(made.ids) or 'nothing'}."
    )
    annexes.ads(made.name) if spec.join else None
    return EXIT_OK


@_guard
def _add(args: argparse.Namespace) -> int:
    if not args.count and not args.slots:
        raise AnnexUsageError("--count N or --slots W")
    made = _annexes(args).add(args.name, count=args.count, slots=args.slots)
    print(f"Annex {made.name}: requested {', '.join(made.ids) or 'nothing'}.")
    return EXIT_OK


@_guard
def _extend(args: argparse.Namespace) -> int:
    if bool(args.lifetime) == bool(args.expiry):
        raise AnnexUsageError("--lifetime D or --expiry WHEN: one of them")
    new = _annexes(args).extend(
        args.name,
        lifetime=parse_duration(args.lifetime, "--lifetime") if args.lifetime else None,
        expiry=parse_expiry(args.expiry) if args.expiry else None,
    )
    print(f"Annex {args.name}: lease until {_when(new)}.")
    return EXIT_OK


@_guard
def _status(args: argparse.Namespace) -> int:
    ads = _annexes(args).ads(args.name)
    if args.json:
        print("[\n" + ",\n".join(ad.printJson() for ad in ads) + "\n]" if ads else "[]")
    elif args.classad:
        print("\n".join(ad.printOld() for ad in ads))
    else:
        now = time.time()
        for ad in ads:
            left = int(ad["LeaseExpiration"]) - now
            print(
                f"{ad['Name']}: owner {ad['Owner']}, {ad['Requested']} requested; instances "
                f"{ad['Pending']} pending, {ad['Booting']} booting, {ad['Joined']} joined, "
                f"{ad['Terminated']} terminated; slots {ad['IdleSlots']} idle, "
                f"{ad['BusySlots']} busy; lease {'ended' if left <= 0 else f'{int(left)} s left'}"
            )
            for iid, state in zip(ad["InstanceIds"], ad["InstanceStates"], strict=False):
                print(f"    {iid}  {state}")
    return EXIT_OK


def _moved(shared: str, moved: Mapping[str, Any]) -> None:
    """What setup moved out of the shared vault, and what it left there."""
    for annex, vault in sorted(moved["copied"].items()):
        print(f"Annex {annex}: its secrets copied from Key Vault {shared} to its owner's {vault}.")  # fmt: skip
    if moved["unowned"]:
        print(
            f"Left in Key Vault {shared} (no owner with a vault of their own): annexes "
            f"{', '.join(moved['unowned'])}; their leases end them."
        )
    if moved["revoked"]:
        print(f"Secrets Officer on Key Vault {shared} taken from {', '.join(moved['revoked'])}.")
    if moved["pending"]:
        print(f"Not all moved ({moved['pending']}): run setup again in a few minutes.")


@_guard
def _list(args: argparse.Namespace) -> int:
    for name in _annexes(args).cloud.names():
        print(name)
    return EXIT_OK


@_guard
def _shutdown(args: argparse.Namespace) -> int:
    done = _annexes(args).shutdown(args.name)
    if args.cloud == "azure":
        print(
            f"Annex {args.name}: {len(done['deleted'])} scale sets deleted with their VMs, "
            f"{len(done['secrets'])} secrets purged, lease removed."
        )
        for note in done.get("notes", []):
            print(f"Note: {note}.")
        return EXIT_OK
    print(
        f"Annex {args.name}: {len(done['terminated'])} instances terminated, "
        f"{len(done['cancelled'])} spot-fleet requests cancelled, lease removed."
    )
    return EXIT_OK
