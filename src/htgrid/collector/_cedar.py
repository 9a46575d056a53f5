"""The collector's commands over CEDAR: what `htcondor2.Collector` sends.

- QUERY_*_ADS (`query`, `locate`, `locateAll`, `directQuery`): one query ad (TargetType,
  Requirements, Projection as a space- or comma-separated string, LimitResults); the
  answer is one message, `int 1` + ad for each ad, then `int 0`. Reading needs READ.
- QUERY_MULTIPLE_ADS (`query(AdTypes.StartDaemon)`, condor_status of several types): the
  TargetType is a comma list, searched in its order; `<Type>Requirements`,
  `<Type>Projection` and `<Type>LimitResults` stand for one type instead of the query's
  own, and LimitResults caps them all. One answer, as for the other queries.
- UPDATE_*_AD (`advertise`): an ad, stored as the HTTPS API's updates are; further
  ads may follow on the same socket. No answer. The level is the HTTPS side's
  (ADVERTISE_STARTD, ADVERTISE_SCHEDD, ...); an execute node's token advertises its
  own node only.
- INVALIDATE_*_ADS: a query ad naming the ads to remove.

The store is used from the app's one worker thread, as the HTTPS routes use it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from copy import copy
from typing import Final

from htgrid.classad import ClassAd
from htgrid.collector._errors import InvalidAd
from htgrid.collector._types import AdType, parse_command
from htgrid.collector._types import Command as AdCommand
from htgrid.collector.app import _ADVERTISE, _check_own, _Collector, _own_query, node_of
from htgrid.errors import HTGridError
from htgrid.net.cedar import CedarCall, CedarSecurity, CedarService, Command, parse_ad

__all__ = ["collector_cedar"]

_log = logging.getLogger("htgrid.collector")

# QUERY_* commands (condor_commands.h) and the TargetType each searches by default.
_QUERIES: Final = {
    5: ("QUERY_STARTD_ADS", "Machine"),
    6: ("QUERY_SCHEDD_ADS", "Scheduler"),
    7: ("QUERY_MASTER_ADS", "DaemonMaster"),
    12: ("QUERY_SUBMITTOR_ADS", "Submitter"),
    20: ("QUERY_COLLECTOR_ADS", "Collector"),
    43: ("QUERY_LICENSE_ADS", "License"),
    46: ("QUERY_STORAGE_ADS", "Storage"),
    48: ("QUERY_ANY_ADS", "Any"),
    50: ("QUERY_NEGOTIATOR_ADS", "Negotiator"),
    56: ("QUERY_HAD_ADS", "HAD"),
    71: ("QUERY_GRID_ADS", "Grid"),
    74: ("QUERY_GENERIC_ADS", "Generic"),
    78: ("QUERY_ACCOUNTING_ADS", "Accounting"),
}
QUERY_MULTIPLE_ADS: Final = 53
# The names of a multi-query's types that are not their ads' MyType (condor_adtypes.cpp).
_TABLES: Final = {"slot": "Machine", "any": "Any"}
# One search of a multi-query: its table, selection, projection and limit.
_Search = tuple[str, ClassAd | None, frozenset[str] | None, int | None]
_UPDATES: Final = {
    0: "UPDATE_STARTD_AD",
    1: "UPDATE_SCHEDD_AD",
    2: "UPDATE_MASTER_AD",
    11: "UPDATE_SUBMITTOR_AD",
    19: "UPDATE_COLLECTOR_AD",
    42: "UPDATE_LICENSE_AD",
    45: "UPDATE_STORAGE_AD",
    49: "UPDATE_NEGOTIATOR_AD",
    55: "UPDATE_HAD_AD",
    58: "UPDATE_AD_GENERIC",
    70: "UPDATE_GRID_AD",
    77: "UPDATE_ACCOUNTING_AD",
    13: "INVALIDATE_STARTD_ADS",
    14: "INVALIDATE_SCHEDD_ADS",
    15: "INVALIDATE_MASTER_ADS",
    18: "INVALIDATE_SUBMITTOR_ADS",
    21: "INVALIDATE_COLLECTOR_ADS",
    44: "INVALIDATE_LICENSE_ADS",
    47: "INVALIDATE_STORAGE_ADS",
    51: "INVALIDATE_NEGOTIATOR_ADS",
    57: "INVALIDATE_HAD_ADS",
    59: "INVALIDATE_ADS_GENERIC",
    72: "INVALIDATE_GRID_ADS",
}


def _projection(value: object) -> frozenset[str] | None:
    if not isinstance(value, str):
        return None
    names = frozenset(n.lower() for n in value.replace(",", " ").split())
    return names or None


def _limit(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def _answer(call: CedarCall, found: list[list[bytes]]) -> None:
    """A query's one answer: `int 1` and the ad for each, then `int 0`."""
    w = call.writer()
    for lines in found:
        w.int(1).lines(lines)
    w.int(0)
    await call.send(w)


def _query_handler(state: _Collector, default_type: str) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        r = await call.receive()
        query = parse_ad(r.lines(what="the query ad"), "the query ad")
        r.done("the query ad")
        target = query.get("TargetType")
        ad_type = target if isinstance(target, str) and target else default_type
        if ad_type.lower() == "any":
            ad_type = "Any"
        projection = _projection(query.get("Projection"))
        limit = _limit(query.get("LimitResults"))
        selection = query if "Requirements" in query else None
        try:
            found = await state.run(
                lambda: state.store.query_lines(ad_type, selection, projection, limit)
            )
        except HTGridError as exc:
            _log.warning("CEDAR query from %s refused: %s", call.peer, exc)
            found = []
        await _answer(call, found)

    return handle


def _multi_query(
    query: ClassAd,
) -> list[tuple[str, ClassAd | None, frozenset[str] | None, int | None]]:
    """The searches of a QUERY_MULTIPLE_ADS ad, in order: each type's table, selection,
    projection and limit (its own, else the query's)."""
    targets = query.get("TargetType")
    if not isinstance(targets, str) or not targets.strip():
        raise InvalidAd("QUERY_MULTIPLE_ADS: the query names no TargetType")
    searches: list[_Search] = []
    for tag in (t.strip() for t in targets.split(",")):
        if not tag:
            continue
        table = _TABLES.get(tag.lower(), tag)
        selection: ClassAd | None = query if "Requirements" in query else None
        if f"{tag}Requirements" in query:
            selection = copy(query)
            selection["Requirements"] = query.lookup(f"{tag}Requirements")
        own_projection = query.get(f"{tag}Projection")
        projection = _projection(
            own_projection if isinstance(own_projection, str) else query.get("Projection")
        )
        searches.append((table, selection, projection, _limit(query.get(f"{tag}LimitResults"))))
        if table == "Any":
            break  # Any is every table: nothing after it (as HTCondor's collector)
    return searches


def _multi_handler(state: _Collector) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        r = await call.receive()
        query = parse_ad(r.lines(what="the query ad"), "the query ad")
        r.done("the query ad")
        overall = _limit(query.get("LimitResults"))

        def search() -> list[list[bytes]]:
            found: list[list[bytes]] = []
            for table, selection, projection, limit in _multi_query(query):
                left = None if overall is None else overall - len(found)
                if left is not None and left <= 0:
                    break
                if limit is None or (left is not None and left < limit):
                    limit = left
                found += state.store.query_lines(table, selection, projection, limit)
            return found

        try:
            found = await state.run(search)
        except HTGridError as exc:
            _log.warning("CEDAR QUERY_MULTIPLE_ADS from %s refused: %s", call.peer, exc)
            found = []
        await _answer(call, found)

    return handle


def _update_handler(
    state: _Collector, command: AdCommand
) -> Callable[[CedarCall], Awaitable[None]]:
    async def handle(call: CedarCall) -> None:
        r = await call.receive()
        ad = parse_ad(r.lines(what="the ad"), f"the ad of {command.name}")
        principal = call.principal
        node = node_of(principal) if command.ad_type is AdType.STARTD else None

        def store() -> str | None:
            if command.invalidate:
                if node is not None:
                    _own_query(principal, node, ad)
                return f"removed {state.store.invalidate(command, ad)}"
            if node is not None:
                _check_own(principal, node, ad)
            result = state.store.update(command, ad, take=True)
            return None if result.accepted else result.reason

        try:
            outcome = await state.run(store)
        except (InvalidAd, HTGridError) as exc:
            _log.warning(
                "%s from %s (%s) refused: %s", command.name, call.peer, principal.name, exc
            )
            return
        if outcome is not None and not command.invalidate:
            _log.info("%s from %s not stored: %s", command.name, call.peer, outcome)

    return handle


def collector_cedar(state: _Collector, security: CedarSecurity) -> CedarService:
    """The collector's CEDAR service over the app's state."""
    commands = [
        Command(number, name, "READ", _query_handler(state, target))
        for number, (name, target) in _QUERIES.items()
    ]
    commands.append(
        Command(QUERY_MULTIPLE_ADS, "QUERY_MULTIPLE_ADS", "READ", _multi_handler(state))
    )
    for number, name in _UPDATES.items():
        command = parse_command(name)
        level = _ADVERTISE.get(command.ad_type, "DAEMON")
        commands.append(Command(number, name, level, _update_handler(state, command)))
    return CedarService("collector", commands, security)
