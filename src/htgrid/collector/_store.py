"""The collector's memory: ads by type, refreshed by updates, expired when not refreshed.

A plain object with no I/O; time comes from the `clock` it is given. Semantics follow
condor_collector:

- An ad is known by its type and name (`Name`, or `Machine` for a startd ad without one;
  `HashName` for a grid manager's resource ad) plus the address it came from, so an
  update replaces the previous ad of the same daemon. A startd's ads by the host of
  that address alone, as condor_collector's: a startd restarted on another port
  replaces its predecessor's ads, which would otherwise be matched until they expire.
- An update carrying `UpdateSequenceNumber` lower than the stored ad's is stale and
  dropped, unless `DaemonStartTime` changed (the daemon restarted and counts again).
  With both attributes the collector adds `UpdatesTotal`, `UpdatesSequenced` and
  `UpdatesLost` (gaps in the sequence), as condor_advertise's manual describes.
- The collector stamps `LastHeardFrom`. An ad lives `ClassAdLifetime` seconds after its
  last update; an ad without one but with `UpdateInterval` lives three intervals (three
  missed updates); otherwise the collector's default (CLASSAD_LIFETIME, 900 s).
- An invalidation names ads by `Name` (and `MyAddress` when given) or by the query ad's
  `Requirements`, evaluated against each ad.

Each stored ad also gets a version, from one counter of the store (an epoch names the
store's life: a restarted collector counts again), and a content version: the version
of the first of the daemon's ads in a row that differ only in what every update changes
(`VOLATILE`: LastHeardFrom, UpdateSequenceNumber, ...). So `query_changes` can answer a
client that keeps the ads it decoded (the negotiator, every cycle) with only the ads
whose content changed since its last query in full, the volatile attributes of those
only refreshed, and the others by content version.

A daemon that keeps the version of each ad the store accepted from it may `refresh` an
ad whose content did not change since: it sends the volatile attributes only (and what
names the ad), and the store keeps the ad it has with those set, as if the whole ad had
come again. A refresh of an ad the store no longer holds at that version (a restarted
collector, an expired, removed or replaced ad) is not accepted: the daemon sends the
whole ad.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from copy import copy
from dataclasses import dataclass
from typing import Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.adjson import json_members
from htgrid.classad.fast import entries, from_entries, requirements_hold
from htgrid.collector._errors import InvalidAd, InvalidQuery
from htgrid.collector._types import AdType, Command, parse_command
from htgrid.collector._wire import encode_ad, join_ads
from htgrid.net.cedar import line_name, split_lines

__all__ = ["DEFAULT_LIFETIME", "REFRESH_KEYS", "VOLATILE", "AdStore", "UpdateResult"]

# condor_collector's CLASSAD_LIFETIME default: three missed 300-second updates.
DEFAULT_LIFETIME = 900.0

Clock = Callable[[], float]

#: What changes at every update of an ad whose content is the same (lower-case names):
#: the collector's stamps and the node's sequence, clock and load.
VOLATILE: Final = frozenset(
    {
        "lastheardfrom",
        "updatesequencenumber",
        "updatestotal",
        "updatessequenced",
        "updateslost",
        "mycurrenttime",
        "totalloadavg",
        "loadavg",
    }
)
#: What a refresh may carry besides `VOLATILE` attributes: what names the ad.
REFRESH_KEYS: Final = frozenset({"mytype", "name", "machine", "myaddress"})
# What the store itself sets at each update (its stamps).
_STAMPS: Final = ("LastHeardFrom", "UpdatesTotal", "UpdatesSequenced", "UpdatesLost")


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """What became of one ad of an update: stored, or dropped and why."""

    accepted: bool
    name: str
    reason: str = ""
    version: int = 0  # the stored ad's (what a refresh of it names), when accepted


class _Record:
    """One stored ad and the bookkeeping around it."""

    __slots__ = (
        "ad",
        "base",
        "content",
        "expires",
        "lines",
        "lost",
        "parts",
        "sequence",
        "sequenced",
        "start",
        "total",
        "version",
    )

    def __init__(self, ad: ClassAd, expires: float, version: int) -> None:
        self.ad = ad
        self.expires = expires
        self.version = version  # the store's count of updates when this one was stored
        # The content version, 0 until a query needs it; until then `base` is the last
        # record of the same daemon whose content version is known, to compare with.
        self.content = 0
        self.base: _Record | None = None
        self.sequence: int | None = None
        self.start: int | None = None
        self.total = 0
        self.sequenced = 0
        self.lost = 0
        # The ad's JSON members, made on the first query that needs them.
        self.parts: dict[str, str] | None = None
        # Its CEDAR lines (lower-case name, `Name = expr`), likewise.
        self.lines: list[tuple[str, bytes]] | None = None


def _int_attr(ad: ClassAd, name: str) -> int | None:
    value = ad.get(name)
    return value if type(value) is int else None


def _number_attr(ad: ClassAd, name: str) -> float | None:
    value = ad.get(name)
    # Exact types: bool and classad.Value (an int enum) are not numbers here.
    return float(value) if isinstance(value, int | float) and type(value) in (int, float) else None


def _string_attr(ad: ClassAd, name: str) -> str | None:
    value = ad.get(name)
    return value if isinstance(value, str) else None


def _truthy(value: object) -> bool:
    if value is True:
        return True
    return type(value) in (int, float) and value != 0


def _lower(names: Sequence[str]) -> set[str]:
    return {n.lower() for n in names}


def _content(record: _Record) -> tuple[dict[str, str], int]:
    """The record's JSON members and content version, worked out on first need."""
    if record.parts is None:
        record.parts = json_members(record.ad)
    if not record.content:
        base, parts = record.base, record.parts
        record.content = record.version
        if base is not None and base.parts is not None and base.parts.keys() == parts.keys():
            old = base.parts
            if all(old[k] == v for k, v in parts.items() if k not in VOLATILE):
                record.content = base.content
        record.base = None
    return record.parts, record.content


def _constraint(text: str | ExprTree | None) -> ExprTree | None:
    if text is None or isinstance(text, ExprTree):
        return text
    if not text.strip():
        return None
    return ExprTree(text)  # ClassAdSyntaxError, with line and column, if it is not one


class AdStore:
    """All ads the collector knows, by table (the ads' MyType)."""

    def __init__(self, *, clock: Clock = time.time, default_lifetime: float = DEFAULT_LIFETIME):
        self._clock = clock
        self._default_lifetime = default_lifetime
        self._tables: dict[str, dict[tuple[str, ...], _Record]] = {}
        self._version = 0  # ads stored so far: each record's version is unique
        self.epoch = secrets.token_hex(8)

    def now(self) -> float:
        """The store's time (its injected clock)."""
        return self._clock()

    # -- updates ------------------------------------------------------------------------

    def update(self, command: Command | str, ad: ClassAd, *, take: bool = False) -> UpdateResult:
        """Store `ad` under `command` (`UPDATE_STARTD_AD`, ...): a copy, or the ad itself
        when `take` (the caller hands it over, as the HTTP layer does with ads it read)."""
        cmd = parse_command(command) if isinstance(command, str) else command
        if cmd.invalidate:
            raise InvalidAd(f"{cmd.name} removes ads; send it to invalidate()")
        if not take:
            ad = copy(ad)
        table, key, name = self._identify(cmd, ad)
        now = self._clock()
        records = self._tables.setdefault(table, {})
        old = records.get(key)
        if old is not None and old.expires <= now:
            old = None  # an expired ad is forgotten, sequence numbers and all
        sequence = _int_attr(ad, "UpdateSequenceNumber")
        start = _int_attr(ad, "DaemonStartTime")
        restarted = old is not None and start is not None and start != old.start
        if (
            old is not None
            and not restarted
            and sequence is not None
            and old.sequence is not None
            and sequence < old.sequence
        ):
            return UpdateResult(
                False,
                name,
                f"stale update: UpdateSequenceNumber {sequence} is older than the "
                f"stored ad's {old.sequence}",
            )
        self._version += 1
        record = _Record(ad, now + self._lifetime(ad), self._version)
        record.sequence, record.start = sequence, start
        if old is not None:
            record.base = old if old.content else old.base
        if old is not None and not restarted:
            record.total, record.sequenced, record.lost = old.total, old.sequenced, old.lost
            if sequence is not None and old.sequence is not None:
                record.lost += max(0, sequence - old.sequence - 1)
        record.total += 1
        if sequence is not None:
            record.sequenced += 1
        ad["LastHeardFrom"] = int(now)
        if sequence is not None and start is not None:
            ad["UpdatesTotal"] = record.total
            ad["UpdatesSequenced"] = record.sequenced
            ad["UpdatesLost"] = record.lost
        records[key] = record
        return UpdateResult(True, name, version=record.version)

    def refresh(
        self, command: Command | str, ad: ClassAd, version: tuple[str, int]
    ) -> UpdateResult:
        """Store again the ad of `version` (an epoch and a version of the store's
        answers; the ad named by `ad`'s Name, MyAddress...) with the `VOLATILE`
        attributes of `ad` set, as `update` would store that whole ad; not accepted
        when the store holds no such ad at `version` (the daemon sends it whole).
        `ad` is the store's from then on."""
        cmd = parse_command(command) if isinstance(command, str) else command
        if cmd.invalidate:
            raise InvalidAd(f"{cmd.name} removes ads; send it to invalidate()")
        other = [n for n in ad if n.lower() not in VOLATILE and n.lower() not in REFRESH_KEYS]
        if other:
            raise InvalidAd(
                f"{cmd.name}: a refresh sets only what every update changes "
                f"({', '.join(sorted(VOLATILE))}), not {', '.join(other)}"
            )
        table, key, name = self._identify(cmd, ad)
        if version[0] != self.epoch:
            return UpdateResult(False, name, "the collector restarted since: send the whole ad")
        old = self._tables.get(table, {}).get(key)
        if old is None or old.version != version[1] or old.expires <= self._clock():
            why = f"no ad of version {version[1]} to refresh: send the whole ad"
            return UpdateResult(False, name, why)
        if any(ad.get(n) != old.ad.get(n) for n in ("Name", "Machine", "MyAddress") if n in ad):
            return UpdateResult(False, name, "the refresh names another ad: send it whole")
        whole = copy(old.ad)
        whole.update(ad)
        result = self.update(cmd, whole, take=True)
        if result.accepted and old.parts is not None:
            # Only volatile attributes changed: the content version and most members stay.
            record = self._tables[table][key]
            stamps = ClassAd({n: whole.lookup(n) for n in _STAMPS if n in whole})
            stamps.update(ad)
            record.parts = {**old.parts, **json_members(stamps)}
            if old.content:
                record.content, record.base = old.content, None
        return result

    def _identify(self, cmd: Command, ad: ClassAd) -> tuple[str, tuple[str, ...], str]:
        """The table, key and name an ad is stored under."""
        my_type = _string_attr(ad, "MyType")
        if cmd.ad_type is AdType.GENERIC:
            if not my_type:
                raise InvalidAd(f"{cmd.name} needs the ad's MyType, to know what it is")
            table = my_type.lower()
        else:
            expected = cmd.ad_type.value
            if my_type is None:
                ad["MyType"] = expected
            elif my_type.lower() != expected.lower():
                raise InvalidAd(f'{cmd.name} takes ads with MyType = "{expected}", not "{my_type}"')
            table = expected.lower()
        name = _string_attr(ad, "Name")
        if cmd.ad_type is AdType.STARTD and not name:
            name = _string_attr(ad, "Machine")
        if cmd.ad_type is AdType.GRID:
            name = _string_attr(ad, "HashName") or name
        if not name:
            raise InvalidAd(f"{cmd.name}: the ad has no Name, so it cannot be told apart")
        address = _string_attr(ad, "MyAddress") or ""
        if cmd.ad_type is AdType.SUBMITTER:
            key: tuple[str, ...] = (name, _string_attr(ad, "ScheddName") or "", address)
        elif cmd.ad_type is AdType.STARTD:
            key = (name, _host(address))
        elif cmd.ad_type is AdType.GRID:
            owner = _string_attr(ad, "Owner") or ""
            key = (name, owner, _string_attr(ad, "ScheddName") or "")
        else:
            key = (name, address)
        return table, key, name

    def _lifetime(self, ad: ClassAd) -> float:
        lifetime = _number_attr(ad, "ClassAdLifetime")
        if lifetime is not None and lifetime > 0:
            return lifetime
        interval = _number_attr(ad, "UpdateInterval")
        if interval is not None and interval > 0:
            return 3.0 * interval
        return self._default_lifetime

    # -- invalidations ------------------------------------------------------------------

    def invalidate(self, command: Command | str, query: ClassAd) -> int:
        """Remove the ads `query` names; how many were removed."""
        cmd = parse_command(command) if isinstance(command, str) else command
        if not cmd.invalidate:
            raise InvalidAd(f"{cmd.name} stores ads; send it to update()")
        if cmd.ad_type is AdType.GENERIC:
            target = _string_attr(query, "TargetType")
            if not target:
                raise InvalidAd(f"{cmd.name} needs TargetType, the MyType of the ads to remove")
            table = target.lower()
        else:
            table = cmd.ad_type.value.lower()
        records = self._tables.get(table, {})
        name = _string_attr(query, "Name")
        address = _string_attr(query, "MyAddress")
        if name is not None:
            doomed = [
                key
                for key, record in records.items()
                if _string_attr(record.ad, "Name") == name
                and (address is None or _string_attr(record.ad, "MyAddress") == address)
            ]
        elif "Requirements" in query:
            doomed = [key for key, record in records.items() if requirements_hold(query, record.ad)]
        else:
            raise InvalidAd(f"{cmd.name} needs Name or Requirements to say which ads to remove")
        for key in doomed:
            del records[key]
        return len(doomed)

    def expire(self) -> int:
        """Forget the ads whose lifetime has passed; how many were forgotten."""
        now = self._clock()
        gone = 0
        for records in self._tables.values():
            stale = [key for key, record in records.items() if record.expires <= now]
            for key in stale:
                del records[key]
            gone += len(stale)
        return gone

    # -- queries ------------------------------------------------------------------------

    def _select(
        self,
        ad_type: AdType | str | None,
        constraint: str | ExprTree | None,
        limit: int | None,
        query: ClassAd | None = None,
    ) -> Iterator[_Record]:
        """The live records of `ad_type` for which `constraint` holds, or `query`'s
        Requirements (with the query as MY and the ad as TARGET, as HTCondor's
        collector evaluates them)."""
        if limit is not None and limit < 0:
            raise InvalidQuery("limit must not be negative")
        expr = _constraint(constraint)
        now = self._clock()
        if ad_type is None or (isinstance(ad_type, str) and ad_type.lower() in ("", "any")):
            tables = list(self._tables.values())
        else:
            name = ad_type.value if isinstance(ad_type, AdType) else ad_type
            tables = [self._tables.get(name.lower(), {})]
        found = 0
        for records in tables:
            for record in list(records.values()):
                if limit is not None and found >= limit:
                    return
                if record.expires <= now:
                    continue
                if expr is not None and not _truthy(expr.eval(record.ad)):
                    continue
                if query is not None and not requirements_hold(query, record.ad):
                    continue
                found += 1
                yield record

    def query(
        self,
        ad_type: AdType | str | None = None,
        constraint: str | ExprTree | None = None,
        projection: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> list[ClassAd]:
        """Copies of the live ads of `ad_type` (all types when None) matching `constraint`.

        `projection` keeps only the named attributes; `limit` caps how many ads come back.
        """
        out = []
        for record in self._select(ad_type, constraint, limit):
            if projection is None:
                out.append(copy(record.ad))
            else:
                src = entries(record.ad)
                table = {}
                for name in projection:
                    key = name.lower()
                    entry = src.get(key)
                    if entry is not None:
                        table[key] = entry  # immutable: shared
                out.append(from_entries(table))
        return out

    def query_json(
        self,
        ad_type: AdType | str | None = None,
        constraint: str | ExprTree | None = None,
        projection: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> str:
        """The same selection as `query`, as a JSON array in HTCondor's JSON form."""
        objects = []
        for record in self._select(ad_type, constraint, limit):
            if record.parts is None:
                record.parts = json_members(record.ad)
            objects.append(encode_ad(record.parts, projection))
        return join_ads(objects)

    def query_changes(
        self,
        ad_type: AdType | str | None = None,
        constraint: str | ExprTree | None = None,
        projection: Sequence[str] | None = None,
        since: tuple[str, int] | None = None,
    ) -> str:
        """The same selection as `query_json`, for a client that keeps what it decoded:
        a JSON object `{"epoch": E, "version": V, "ads": [...]}` whose ads are, in the
        selection's order and each named by its content version C: `[C, ad]` for an ad
        whose content changed after `since` (an epoch and a version of an earlier
        answer; all when None or of another epoch), `[C, attributes, 1]` for one only
        refreshed since (the `VOLATILE` attributes to set in the ad C the client
        keeps), the bare C for one not stored again since. V is the next query's
        `since`; an ad left out is gone (removed, expired, or no longer matching)."""
        after = since[1] if since is not None and since[0] == self.epoch else -1
        volatile = [n for n in VOLATILE if projection is None or n in _lower(projection)]
        items = []
        for record in self._select(ad_type, constraint, None):
            parts, content = _content(record)
            if record.version <= after:
                items.append(str(content))
            elif content <= after:
                items.append(f"[{content}, {encode_ad(parts, volatile)}, 1]")
            else:
                items.append(f"[{content}, {encode_ad(parts, projection)}]")
        head = f'{{"epoch": "{self.epoch}", "version": {self._version}, "ads": '
        return head + join_ads(items) + "}"

    def query_lines(
        self,
        ad_type: AdType | str | None,
        query: ClassAd | None,
        projection: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[list[bytes]]:
        """The ads `query`'s Requirements select, each as CEDAR's `Name = expr` lines;
        `projection` (lower-case names) keeps only those attributes."""
        out = []
        for record in self._select(ad_type, None, limit, query):
            if record.lines is None:
                record.lines = [(line_name(line), line) for line in split_lines(record.ad)]
            if projection:
                out.append([line for name, line in record.lines if name in projection])
            else:
                out.append([line for _, line in record.lines])
        return out

    def counts(self) -> dict[str, int]:
        """How many live ads each table holds, by MyType as the ads spell it."""
        now = self._clock()
        out: dict[str, int] = {}
        for records in self._tables.values():
            live = [r for r in records.values() if r.expires > now]
            if live:
                out[str(live[0].ad.get("MyType"))] = len(live)
        return out

    def __len__(self) -> int:
        return sum(self.counts().values())


def _host(address: str) -> str:
    """The host of a sinful string (`<10.1.2.3:9620?...>`: 10.1.2.3); one without a port
    (a Unix socket's `<host?sock=...>`) whole."""
    hostport = address.strip().removeprefix("<").removesuffix(">").partition("?")[0]
    host, colon, port = hostport.rpartition(":")
    return host.strip("[]") if colon and port.isdigit() and host else address
