"""Rows the queue cannot read, set aside when it opens, so that it serves the rest.

Every write passes `_serial`'s guard, but a database may still hold what this code
cannot read: a row an older htgrid wrote, one edited by hand with sqlite3, a cluster row
lost. Such a row used to fail every query that met it (and stop the daemon, or keep it
from starting). When the queue opens, each job row, cluster row and change-feed row is
checked; one that cannot be read is moved, in one transaction, to the `quarantine`
table (the table it came from, the job, why, and its columns as they were, as JSON),
logged once, and counted by `JobQueue.quarantined`. A job of a cluster whose ad cannot
be read goes with it. Nothing is lost: an administrator repairs a row and puts it back
with sqlite3. The history (which only grows) is not scanned: a history row that cannot
be read is left out of history queries, with a warning.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Final

from htgrid.classad import ClassAd
from htgrid.queue._errors import JobNotFound, QueueError
from htgrid.queue._feed import ChangeKind
from htgrid.queue._serial import decode, expression_problem, unreadable
from htgrid.queue._status import JobStatus
from htgrid.queue._store import Store

__all__ = ["Quarantined", "history_ad", "quarantine_unreadable", "quarantined"]

_log = logging.getLogger("htgrid.queue")

_JOB_COLUMNS: Final = ("cluster", "proc", "status", "owner", "seq", "ad", "masked")
_CLUSTER_COLUMNS: Final = ("cluster", "owner", "ad")
_CHANGE_COLUMNS: Final = (
    "seq",
    "time",
    "kind",
    "cluster",
    "first_proc",
    "last_proc",
    "status",
    "last_status",
    "attrs",
    "deleted",
)
_STATUSES: Final = frozenset(int(s) for s in JobStatus)
_KINDS: Final = frozenset(k.value for k in ChangeKind)


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A row set aside: where it came from, whose job it was, why, and when."""

    id: int
    time: int
    source: str  # "jobs", "clusters" or "changes"
    cluster: int | None
    proc: int | None
    owner: str | None
    reason: str

    @property
    def job(self) -> str | None:
        """The job id ("12.0") of a job row, else None."""
        if self.source != "jobs" or self.cluster is None or self.proc is None:
            return None
        return f"{self.cluster}.{self.proc}"


@dataclass(frozen=True, slots=True)
class _Bad:
    source: str
    key: tuple[Any, ...]  # the row's primary key, to delete it by
    row: dict[str, Any]
    reason: str


def quarantine_unreadable(store: Store, now: int) -> list[Quarantined]:
    """Move every row of the queue that cannot be read to the quarantine; those moved."""
    with store.reading() as conn:
        bad = _scan(store, conn)
    if not bad:
        return []
    moved: list[Quarantined] = []
    with store.writing(now) as txn:
        for found in bad:
            entry = _move(txn.conn, found, now)
            if entry is not None:  # else another process moved it meanwhile
                moved.append(entry)
    for entry in moved:
        what = f"job {entry.job}" if entry.job else f"a row of {entry.source}"
        _log.error(
            "%s cannot be read and is set aside (quarantine id %d): %s",
            what,
            entry.id,
            entry.reason,
        )
    return moved


def quarantined(conn: Any) -> list[Quarantined]:
    """Every row in the quarantine, oldest first (in the caller's read transaction)."""
    rows = conn.execute(
        "SELECT id, time, source, cluster, proc, owner, reason FROM quarantine ORDER BY id"
    ).fetchall()
    return [Quarantined(*row) for row in rows]


def _scan(store: Store, conn: Any) -> list[_Bad]:
    """The rows that cannot be read. SQLite screens every row (its JSON functions, at C
    speed: 100,000 jobs in a few tenths of a second); this code reads the few it flags,
    and each distinct expression text once."""
    texts, odd = _odd_values(conn)
    params = {"bad": json.dumps(sorted(texts)), "clusters": "[]"}
    screens = _screens(deep=odd)
    bad: list[_Bad] = []
    broken: dict[int, str] = {}  # cluster id -> why its ad cannot be read
    flagged: list[Any] = []  # clusters whose jobs are each looked at
    for values in conn.execute(screens["clusters"], params):
        row = dict(zip(_CLUSTER_COLUMNS, values, strict=True))
        flagged.append(row["cluster"])
        reason = _cluster_problem(row)
        if reason is not None:
            broken[row["cluster"]] = reason
            bad.append(_Bad("clusters", (row["cluster"],), row, reason))
    params["clusters"] = json.dumps(flagged)
    for values in conn.execute(screens["jobs"], params):
        row = dict(zip(_JOB_COLUMNS, values, strict=True))
        reason = _job_problem(row, broken, store)
        if reason is not None:
            bad.append(_Bad("jobs", (row["cluster"], row["proc"]), row, reason))
    for values in conn.execute(screens["changes"], params):
        row = dict(zip(_CHANGE_COLUMNS, values, strict=True))
        reason = _change_problem(row)
        if reason is not None:
            bad.append(_Bad("changes", (row["seq"],), row, reason))
    return bad


def _each(column: str) -> str:
    """The attributes of a stored ad, as SQLite's json_each rows (none if not JSON)."""
    return f"json_each(CASE WHEN json_valid({column}) THEN {column} ELSE '{{}}' END)"


#: A stored value `_serial.decode` takes without the parser: a plain string (a quote
#: first, no backslash, no quote but the last), true, false or an integer of up to 18
#: digits. Ordered by cost: this runs for every attribute of every job.
_PLAIN: Final = """(
    (unicode(j.value) = 34 AND instr(j.value, '\\') = 0
     AND instr(substr(j.value, 2), '"') = length(j.value) - 1)
    OR (j.value GLOB '[1-9]*' AND NOT j.value GLOB '*[^0-9]*' AND length(j.value) <= 18)
    OR j.value IN ('true', 'false', '0', '-0')
    OR (j.value GLOB '-[1-9]*' AND NOT substr(j.value, 2) GLOB '*[^0-9]*'
        AND length(j.value) <= 19))"""
_STATUS_TEXTS: Final = "('1', '2', '3', '4', '5', '6', '7')"
_ODD_STATUS: Final = f"(lower(j.key) = 'jobstatus' AND j.value NOT IN {_STATUS_TEXTS})"


def _odd_values(conn: Any) -> tuple[set[str], bool]:
    """The stored expression texts that do not parse (each distinct text parsed once),
    and whether any stored value is odd (not text, such a text, a JobStatus that is no
    status): only then are the ads' attributes screened row by row."""
    found: set[str] = set()
    odd = False
    for table, column in (("clusters", "ad"), ("jobs", "ad"), ("changes", "attrs")):
        sql = (
            f"SELECT DISTINCT j.value, j.type != 'text' OR {_ODD_STATUS} "
            f"FROM {table}, {_each(column)} AS j WHERE j.type != 'text' OR NOT {_PLAIN}"
        )
        for text, strange in conn.execute(sql):
            if strange:
                odd = True
            elif type(text) is str and expression_problem(text) is not None:
                found.add(text)
                odd = True
    return found, odd


def _screens(*, deep: bool) -> dict[str, str]:
    """The SELECT of the rows of each table that need a closer look; `deep`: screen
    each attribute too (see `_odd_values`)."""

    def ad(column: str, extra: str = "") -> str:
        each = (
            f"EXISTS (SELECT 1 FROM {_each(column)} AS j WHERE j.type != 'text' "
            f"OR j.value IN (SELECT value FROM json_each(:bad)){extra})"
            if deep
            else "0"
        )
        return (
            f"(CASE WHEN typeof({column}) != 'text' OR NOT json_valid({column}) THEN 1 "
            f"WHEN json_type({column}) != 'object' OR instr({column}, '\\u0000') THEN 1 "
            f"ELSE {each} END)"
        )

    statuses = "NOT BETWEEN 1 AND 7"
    kinds = ", ".join(f"'{k.value}'" for k in ChangeKind)
    where = {
        "clusters": f"""typeof(cluster) != 'integer' OR {ad("ad")}
            OR NOT EXISTS (SELECT 1 FROM {_each("ad")} AS j
                           WHERE lower(j.key) = 'jobstatus' AND j.value IN {_STATUS_TEXTS})""",
        "jobs": f"""typeof(cluster) != 'integer' OR typeof(proc) != 'integer'
            OR typeof(status) != 'integer' OR status {statuses} OR typeof(owner) != 'text'
            OR (masked IS NOT NULL AND (typeof(masked) != 'text'
                OR instr(' ' || lower(masked) || ' ', ' jobstatus ') > 0))
            OR NOT EXISTS (SELECT 1 FROM clusters AS c WHERE c.cluster = jobs.cluster)
            OR cluster IN (SELECT value FROM json_each(:clusters))
            OR {ad("ad", f" OR {_ODD_STATUS}")}""",
        "changes": f"""typeof(seq) != 'integer' OR typeof(time) != 'integer'
            OR typeof(cluster) != 'integer' OR typeof(first_proc) != 'integer'
            OR typeof(last_proc) != 'integer' OR typeof(deleted) != 'text'
            OR kind NOT IN ({kinds})
            OR (status IS NOT NULL AND (typeof(status) != 'integer' OR status {statuses}))
            OR (last_status IS NOT NULL
                AND (typeof(last_status) != 'integer' OR last_status {statuses}))
            OR {ad("attrs")}""",
    }
    columns = {"clusters": _CLUSTER_COLUMNS, "jobs": _JOB_COLUMNS, "changes": _CHANGE_COLUMNS}
    return {
        table: f"SELECT {', '.join(columns[table])} FROM {table} WHERE {where[table]}"
        for table in where
    }


def _cluster_problem(row: dict[str, Any]) -> str | None:
    if type(row["cluster"]) is not int:
        return f"its cluster id is {row['cluster']!r}, not a whole number"
    return _ad_problem(row["ad"], "its ad")


def _job_problem(row: dict[str, Any], broken: dict[int, str], store: Store) -> str | None:
    cluster, proc = row["cluster"], row["proc"]
    if type(cluster) is not int or type(proc) is not int:
        return f"its id is {cluster!r}.{proc!r}, not two whole numbers"
    if type(row["status"]) is not int or row["status"] not in _STATUSES:
        return f"its status column holds {row['status']!r}, not a job status"
    if type(row["owner"]) is not str:
        return f"its owner column holds {row['owner']!r}, not a user name"
    if row["masked"] is not None and type(row["masked"]) is not str:
        return f"its masked column holds {row['masked']!r}, not attribute names"
    if cluster in broken:
        return f"the ad of its cluster cannot be read: {broken[cluster]}"
    problem = _ad_problem(row["ad"], "its own ad")
    if problem is not None:
        return problem
    try:
        cluster_ad = store.cluster_ad(cluster)
    except JobNotFound:
        return f"its cluster's row (cluster {cluster}) is missing"
    own = decode(row["ad"])
    masked = row["masked"].lower().split() if row["masked"] else ()
    status = own.get("JobStatus") if "JobStatus" in own or "jobstatus" in masked else None
    if "JobStatus" not in own and "jobstatus" not in masked:
        status = cluster_ad.get("JobStatus")
    if type(status) is not int or status not in _STATUSES:
        return f"its JobStatus is {status!r}, not a job status"
    return None


def _change_problem(row: dict[str, Any]) -> str | None:
    if any(type(row[c]) is not int for c in ("seq", "time", "cluster", "first_proc", "last_proc")):
        return "a number column holds something else"
    if row["kind"] not in _KINDS:
        return f"its kind is {row['kind']!r}, not one of {', '.join(sorted(_KINDS))}"
    for column in ("status", "last_status"):
        if row[column] is not None and (
            type(row[column]) is not int or row[column] not in _STATUSES
        ):
            return f"its {column} is {row[column]!r}, not a job status"
    if type(row["deleted"]) is not str:
        return f"its deleted column holds {row['deleted']!r}, not attribute names"
    return _ad_problem(row["attrs"], "its attributes")


def _ad_problem(text: Any, what: str) -> str | None:
    if type(text) is not str:
        return f"{what} is stored as {type(text).__name__}, not text"
    problem = unreadable(text)
    return None if problem is None else f"{what}: {problem}"


def _move(conn: Any, bad: _Bad, now: int) -> Quarantined | None:
    """Move one row to the quarantine (None when it is gone already)."""
    where = {
        "jobs": "cluster = ? AND proc = ?",
        "clusters": "cluster = ?",
        "changes": "seq = ?",
    }[bad.source]
    cursor = conn.execute(f"DELETE FROM {bad.source} WHERE {where}", bad.key)
    if not cursor.rowcount:
        return None
    row = bad.row
    cluster = row.get("cluster")
    proc = row.get("proc", row.get("first_proc"))
    owner = row.get("owner")
    values = (
        now,
        bad.source,
        cluster if type(cluster) is int else None,
        proc if type(proc) is int else None,
        owner if type(owner) is str else None,
        bad.reason,
        json.dumps({k: _jsonable(v) for k, v in row.items()}),
    )
    cursor = conn.execute(
        "INSERT INTO quarantine (time, source, cluster, proc, owner, reason, data)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        values,
    )
    return Quarantined(cursor.lastrowid, *values[:6])


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | None) else repr(value)


_unread_history: set[tuple[Any, Any]] = set()  # history rows warned of, in this process


def history_ad(store: Store, row: tuple[Any, ...]) -> ClassAd | None:
    """The job ad of a history row; None (and a warning, once) when it cannot be read."""
    try:
        return store.job_ad(row, history=True)
    except (ValueError, TypeError, AttributeError, RecursionError, QueueError) as exc:
        key = (row[0], row[1])
        if key not in _unread_history:
            _unread_history.add(key)
            _log.warning("the history row of job %s.%s cannot be read, left out: %s", *key, exc)
        return None
