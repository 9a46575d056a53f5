"""`htgrid collector`, `htgrid status` and `htgrid advertise`: condor_collector,
condor_status and condor_advertise.

    htgrid collector [--port 9618]                  run a collector in the foreground
    htgrid status [-schedd|-grid|-any] [-l|-json|-af ATTR ...] [-constraint EXPR] [NAME ...]
    htgrid advertise [-multiple] [UPDATE_STARTD_AD|INVALIDATE_STARTD_ADS|...] [FILE]

The pool is `-pool host[:port]`, else HTGRID_COLLECTOR_HOST, else 127.0.0.1:9618.
Exit codes: 0 done (status: even when no ad matches); 1 the collector could not be
reached or refused an ad (a stale UpdateSequenceNumber, an ad without Name); 2 bad usage
or input (a constraint that does not parse, a file that is not a ClassAd).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from htgrid._args import flag
from htgrid._ports import held_by
from htgrid.classad import ClassAd, ExprTree, ParserType, Value, quote
from htgrid.classad.fast import entries
from htgrid.classad.syntax import iter_ads
from htgrid.cli._status_tables import (
    Table,
    any_table,
    grid_table,
    machine_table,
    render,
    schedd_table,
)
from htgrid.client import DEFAULT_PORT, pool_url
from htgrid.collector import (
    AdType,
    CollectorClient,
    CollectorError,
    command_for,
    default_pool,
    parse_command,
)
from htgrid.errors import UsageError

__all__ = ["register"]

EXIT_FAILED = 1

# condor_status's query options: which ads, and how they are shown by default.
_MODES = {
    "startd": (AdType.STARTD.value, machine_table),
    "schedd": (AdType.SCHEDD.value, schedd_table),
    "grid": (AdType.GRID.value, grid_table),
    "negotiator": (AdType.NEGOTIATOR.value, lambda ads: any_table(ads, "MyAddress")),
    "collector": (AdType.COLLECTOR.value, lambda ads: any_table(ads, "MyAddress")),
    "any": (None, any_table),
    "annex": ("Annex", lambda ads: annex_table(ads)),
}


def annex_table(ads: Sequence[ClassAd]) -> Table:
    """`htgrid status -annex`: each annex, its instances by state and its slots."""
    columns = ("Name", "Owner", "Requested", "Pending", "Booting", "Joined", "IdleSlots",
               "BusySlots", "LeaseExpiration", "Spend")  # fmt: skip
    header = (
        f"{'Name':<24} {'Owner':<12} {'Req':>4} {'Pend':>4} {'Boot':>4} {'Join':>4} "
        f"{'Idle':>4} {'Busy':>4} {'LeaseEnd (UTC)':<16} {'Spend$':>8}"
    )
    lines: list[str] = []
    cells: list[tuple[str, ...]] = []
    for ad in ads:
        row = [str(ad.get(c, "")) for c in columns]
        lease = ad.get("LeaseExpiration")
        if isinstance(lease, int):
            row[8] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(lease))
        lines.append(
            f"{row[0]:<24.24} {row[1]:<12.12} {row[2]:>4} {row[3]:>4} {row[4]:>4} {row[5]:>4} "
            f"{row[6]:>4} {row[7]:>4} {row[8]:<16} {row[9]:>8}"
        )
        cells.append(tuple(row))
    return Table(header, lines, columns, cells, [])


def register(commands: Any) -> None:
    """Add `collector`, `status` and `advertise` to the top-level parser."""
    col = commands.add_parser(
        "collector",
        help="run a collector in the foreground (condor_collector)",
        description="Keep the pool's ads and answer queries over HTTP on loopback.",
    )
    col.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    col.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default 9618)")
    col.add_argument(
        "--lifetime",
        type=float,
        default=900.0,
        help="seconds an ad without ClassAdLifetime lives (CLASSAD_LIFETIME, 900)",
    )
    col.add_argument("--name", default="htgrid pool", help="the collector's Name")
    col.set_defaults(handler=_collector)

    st = commands.add_parser(
        "status",
        help="show the pool's ads (condor_status)",
        description="Query the collector; slots by default, with totals per platform.",
    )
    # The short forms are condor_status's own (status.cpp): -sc, -star, -col, -const...
    flag(st, "pool", 1, help="host[:port] of the collector")
    which = st.add_mutually_exclusive_group()
    for mode, shortest, what in (
        ("startd", 4, "slots and grid sites (the default)"),
        ("schedd", 2, "job queues"),
        ("grid", 1, "the grid manager's resources"),
        ("negotiator", 1, "negotiators"),
        ("collector", 3, "collectors"),
        ("any", 2, "every ad: its type, target type and name"),
        ("annex", 5, "annexes (their ads; NAME picks annexes by name)"),
    ):
        flag(which, mode, shortest, dest="mode", action="store_const", const=mode, help=what)
    shape = st.add_mutually_exclusive_group()
    flag(shape, "long", 1, "-l", action="store_true", help="whole ads")
    flag(shape, "json", 2, action="store_true", help="whole ads, as JSON")
    flag(shape, "autoformat", 5, "-af", nargs="+", metavar="ATTR", help="values only")
    flag(st, "constraint", 3, help="a ClassAd expression")
    flag(st, "totals", 1, "--total", dest="total", action="store_true", help="totals only")
    flag(st, "limit", 2, type=int, help="at most this many ads")
    st.add_argument("names", nargs="*", metavar="NAME", help="slot or machine names")
    st.set_defaults(handler=_status, mode="startd")

    adv = commands.add_parser(
        "advertise",
        help="send ads to the collector (condor_advertise)",
        description=(
            "Send the ad(s) in FILE (old syntax; '-' or nothing for standard input) with an "
            "UPDATE_* command, or remove ads with an INVALIDATE_* command and a query ad "
            '(MyType = "Query", TargetType, Requirements).'
        ),
    )
    adv.add_argument("-pool", "--pool", help="host[:port] of the collector")
    adv.add_argument(
        "-multiple",
        "--multiple",
        action="store_true",
        help="FILE holds several ads separated by blank lines",
    )
    adv.add_argument("args", nargs="*", metavar="[COMMAND] [FILE]")
    adv.set_defaults(handler=_advertise)


# -- htgrid collector -------------------------------------------------------------------


def _collector(args: argparse.Namespace) -> int:
    # Imported here for start-up: `htgrid status` does not load the collector's server.
    from htgrid.collector import daemon
    from htgrid.net.server import tcp_listener

    # Bound here, before a word is said: a port another program holds is an error that
    # names it, not "listening" and then a server that dies.
    sock = tcp_listener(args.host)
    try:
        sock.bind((args.host, args.port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        where = f"{args.host}:{args.port}"
        print(
            f"htgrid collector: cannot listen on {where}: {exc.strerror}{held_by(args.port)}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    port = sock.getsockname()[1]
    print(f"htgrid collector listening on {pool_url(f'{args.host}:{port}')}", file=sys.stderr)
    server = daemon.make_server(args.host, port, default_lifetime=args.lifetime, name=args.name)
    server.run(sockets=[sock])
    return 0


# -- htgrid status ----------------------------------------------------------------------


def _constraint(args: argparse.Namespace) -> str | None:
    parts = []
    if args.constraint:
        ExprTree(args.constraint)  # a syntax error stops here, with line and column
        parts.append(f"({args.constraint})")
    if args.names:
        # A host name picks all its slots (slot1@host...), as condor_status's does.
        names = " || ".join(
            f"Name == {quote(n)} || Machine == {quote(n)}"
            f" || regexp({quote('^' + re.escape(n) + '([.]|$)')}, Machine)"
            f" || regexp({quote('@' + re.escape(n) + '([.]|$)')}, Name)"
            for n in args.names
        )
        parts.append(f"({names})")
    return " && ".join(parts) or None


def _sort_key(ad: ClassAd) -> tuple[str, str]:
    machine, name = ad.get("Machine"), ad.get("Name")
    return (
        (machine if isinstance(machine, str) else "").lower(),
        (name if isinstance(name, str) else "").lower(),
    )


def _format_value(value: Any) -> str:
    """An -af value: strings bare, everything else in ClassAd syntax."""
    if isinstance(value, Value):  # an int enum: test it before numbers
        return "undefined" if value == Value.Undefined else "error"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, ExprTree):
        return repr(value)
    if isinstance(value, list):
        return "{ " + ", ".join(_format_value(v) for v in value) + " }"
    if isinstance(value, ClassAd):
        return repr(value)
    if value is None:
        return "undefined"
    return str(value)


def _autoformat(ads: Sequence[ClassAd], attrs: Sequence[str]) -> str:
    exprs = [ExprTree(a) for a in attrs]
    return "".join(" ".join(_format_value(e.eval(ad)) for e in exprs) + "\n" for ad in ads)


async def _query(args: argparse.Namespace, ad_type: str | None) -> list[ClassAd]:
    async with CollectorClient(args.pool) as client:
        return await client.query(ad_type, _constraint(args), limit=args.limit)


def _status(args: argparse.Namespace) -> int:
    ad_type, make_table = _MODES[args.mode]
    try:
        ads = asyncio.run(_query(args, ad_type))
    except CollectorError as err:
        print(f"htgrid status: {err}", file=sys.stderr)
        return EXIT_FAILED
    ads.sort(key=_sort_key)
    out = sys.stdout
    if args.long:
        out.write("\n".join(ad.printOld() for ad in ads))
    elif args.json:
        out.write("[\n" + ",\n".join(ad.printJson() for ad in ads) + "\n]\n" if ads else "[]\n")
    elif args.autoformat:
        out.write(_autoformat(ads, args.autoformat))
    elif ads:
        table: Table = make_table(ads)
        render(table, out, totals_only=args.total)
    return 0


# -- htgrid advertise -------------------------------------------------------------------


def _read(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    with open(path, encoding="utf-8") as f:
        return f.read(), path


def _parse(text: str, origin: str, multiple: bool) -> list[ClassAd]:
    ads = [ad for ad, _ in iter_ads(text, ParserType.Auto, origin=origin)]
    if not ads:
        raise UsageError(f"{origin}: no ClassAd found")
    if multiple or len(ads) == 1:
        return ads
    # condor_advertise without -multiple ignores blank lines: one ad, later lines winning.
    merged = ClassAd()
    for ad in ads:
        entries(merged).update(entries(ad))
    print(
        f"htgrid advertise: {origin}: blank lines ignored, read as one ad "
        f"(use -multiple to send {len(ads)} ads)",
        file=sys.stderr,
    )
    return [merged]


def _infer_command(ads: Sequence[ClassAd]) -> str:
    my_type = ads[0].get("MyType")
    if not isinstance(my_type, str):
        raise UsageError("the ad has no MyType; name the command (UPDATE_STARTD_AD, ...)")
    if my_type.lower() == "query":
        raise UsageError("a Query ad needs its INVALIDATE_* command named")
    ad_type = AdType.of(my_type)
    return command_for(ad_type if ad_type is not None else AdType.GENERIC).name


def _advertise(args: argparse.Namespace) -> int:
    rest = list(args.args)
    if len(rest) > 2:
        raise UsageError("usage: htgrid advertise [COMMAND] [FILE]")
    command = None
    if rest and rest[0].upper().startswith(("UPDATE_", "INVALIDATE_")):
        command = parse_command(rest.pop(0))
    path = rest[0] if rest else "-"
    text, origin = _read(path)
    ads = _parse(text, origin, args.multiple)
    if command is None:
        command = parse_command(_infer_command(ads))
    pool = args.pool or default_pool()
    try:
        return asyncio.run(_send(pool, command.name, command.invalidate, ads))
    except CollectorError as err:
        print(f"htgrid advertise: {err}", file=sys.stderr)
        return EXIT_FAILED


async def _send(pool: str, command: str, invalidate: bool, ads: list[ClassAd]) -> int:
    async with CollectorClient(pool) as client:
        if invalidate:
            for query in ads:
                await client.invalidate(command, query)
            return 0
        results = await client.advertise(command, ads)
    failed = [r for r in results if not r.accepted]
    for r in failed:
        print(f"htgrid advertise: {r.name}: {r.reason}", file=sys.stderr)
    return EXIT_FAILED if failed else 0
