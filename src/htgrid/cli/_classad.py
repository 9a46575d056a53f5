"""`htgrid classad eval` and `htgrid classad match`: the language from the command line."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from htgrid import classad
from htgrid.classad.analysis import ClauseResult, explain_match
from htgrid.classad.syntax import evaluated, iter_ads
from htgrid.errors import UsageError

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add the `classad` command group to the top-level parser."""
    group = commands.add_parser("classad", help="evaluate and match ClassAds")
    sub = group.add_subparsers(dest="classad_command", metavar="SUBCOMMAND")
    group.set_defaults(handler=lambda args: _no_subcommand(group))

    ev = sub.add_parser(
        "eval",
        help="evaluate expressions, optionally in an ad",
        description="Evaluate each EXPR and print its value in ClassAd syntax.",
    )
    ev.add_argument("exprs", nargs="+", metavar="EXPR")
    ev.add_argument("-f", "--file", help="the ad to evaluate in (MY); old, new or JSON syntax")
    ev.add_argument("-t", "--target", help="an ad to use as TARGET")
    ev.set_defaults(handler=_eval)

    match = sub.add_parser(
        "match",
        help="match a job ad against machine ads, clause by clause",
        description=(
            "Match the job ad against each machine ad in MACHINE_AD_FILE (ads separated by "
            "blank lines) and say which Requirements clauses fail."
        ),
    )
    match.add_argument("job", metavar="JOB_AD_FILE")
    match.add_argument("machines", metavar="MACHINE_AD_FILE")
    match.add_argument("-v", "--verbose", action="store_true", help="show every clause")
    match.set_defaults(handler=_match)


def _no_subcommand(group: argparse.ArgumentParser) -> int:
    group.print_help(sys.stderr)
    return 2


def _read_ads(path: str) -> list[classad.ClassAd]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    ads = [ad for ad, _ in iter_ads(text, origin=path)]
    if not ads:
        raise UsageError(f"{path}: no ClassAd found")
    return ads


def _one_ad(path: str) -> classad.ClassAd:
    ads = _read_ads(path)
    if len(ads) > 1:
        raise UsageError(f"{path}: holds {len(ads)} ads; expected one")
    return ads[0]


def _eval(args: argparse.Namespace) -> int:
    scope = _one_ad(args.file) if args.file else None
    target = _one_ad(args.target) if args.target else None
    for text in args.exprs:
        print(repr(evaluated(classad.ExprTree(text), scope, target)))
    return 0


def _match(args: argparse.Namespace) -> int:
    job = _one_ad(args.job)
    machines = _read_ads(args.machines)
    out = sys.stdout
    matched = 0
    for i, machine in enumerate(machines):
        name = machine.get("Name") or f"machine ad #{i + 1}"
        report = explain_match(job, machine)
        if report.matched:
            matched += 1
            out.write(f"{name}: MATCH (job Rank {report.my_rank:g})\n")
        else:
            out.write(f"{name}: no match\n")
        if args.verbose or not report.matched:
            _clauses(out, "job Requirements", report.my_clauses, args.verbose, "job")
            _clauses(out, "machine Requirements", report.target_clauses, args.verbose, "machine")
    out.write(f"{matched} of {len(machines)} machine(s) match.\n")
    return 0 if matched else 1


def _clauses(
    out: TextIO, title: str, clauses: tuple[ClauseResult, ...], verbose: bool, side: str
) -> None:
    if not clauses:
        out.write(f"  {title}: none ({side} has no Requirements; a match needs them)\n")
        return
    failed = [c for c in clauses if not c.satisfied]
    if not failed and not verbose:
        return
    out.write(f"  {title}:\n")
    for clause in clauses if verbose else failed:
        mark = "ok  " if clause.satisfied else "FAIL"
        out.write(f"    [{mark}] {clause.text}  -> {_show(clause.value)}\n")
        if not clause.satisfied:
            for name, value in clause.inputs:
                out.write(f"             {name} = {value}\n")


def _show(value: object) -> str:
    if isinstance(value, classad.Value):
        return "undefined" if value == classad.Value.Undefined else "error"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)
