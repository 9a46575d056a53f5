"""Keep this pool's annex ads current: `python -m htgrid.annex.keep --home H`.

`htgrid annex create` leaves a record of the annex in the pool's home (spool/annexes/
NAME.json: its region and collector); the master runs this every ANNEX_UPDATE_INTERVAL
while any record is there. One run refreshes every recorded annex with the same few
cloud calls per region however many instances they have (`Annexes.keep`), publishes
their ads, and, for an annex the cloud no longer has (its lease rule is gone: ended or
shut down), invalidates its ad and drops its record, so the refreshes stop.

An ordinary user's annex is recorded by the schedd that grants its token (with its
owner, and when: its lease is installed in the cloud after its token), so the master
keeps its ad current with the master's own cloud credentials; a record made less than
`RECORD_GRACE` seconds ago is kept while its annex is not (yet) in the cloud.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from htgrid.annex._aws import AwsAnnexes
from htgrid.annex._azure import GROUP, AzureAnnexes
from htgrid.annex._errors import AnnexError
from htgrid.annex._service import Annexes
from htgrid.annex._spec import Cloud
from htgrid.collector import CollectorError
from htgrid.pool import HomeLayout

__all__ = ["RECORD_GRACE", "Record", "forget", "main", "records", "refresh", "remember"]

#: Seconds a record the schedd made is kept while the cloud has no such annex yet.
RECORD_GRACE = 600.0

_log = logging.getLogger("htgrid.annex")


@dataclass(frozen=True, slots=True)
class Record:
    """An annex this pool made: where it is, and the collector its ads go to."""

    name: str
    region: str
    pool: str
    cloud: str = "ec2"
    group: str = ""  # Azure: the setup's resource group
    since: float = 0.0  # the schedd's record: when it was made (0: after the lease)


def _path(home: Path, name: str) -> Path:
    return HomeLayout(home).annex_dir / f"{name}.json"


def remember(home: Path, record: Record) -> None:
    """Record `record` (atomically: a crash leaves the old record or the new)."""
    path = _path(home, record.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"name": record.name, "region": record.region,
                               "pool": record.pool, "cloud": record.cloud,
                               "group": record.group, "since": record.since}) + "\n")  # fmt: skip
    os.replace(tmp, path)


def forget(home: Path, name: str) -> None:
    _path(home, name).unlink(missing_ok=True)


def records(home: Path) -> list[Record]:
    """The recorded annexes; a record that cannot be read is logged and skipped."""
    out = []
    for path in sorted(HomeLayout(home).annex_dir.glob("*.json")):
        try:
            raw = json.loads(path.read_text())
            out.append(
                Record(
                    str(raw["name"]),
                    str(raw["region"]),
                    str(raw.get("pool", "")),
                    str(raw.get("cloud", "ec2")),
                    str(raw.get("group", "")),
                    float(raw.get("since", 0.0)),
                )
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _log.error("%s: not an annex record (%s): skipped", path, exc)
    return out


def _cloud(record: Record) -> Cloud:
    if record.cloud == "azure":
        return AzureAnnexes(record.region, group=record.group or GROUP)
    return AwsAnnexes(record.region)


def refresh(home: Path, *, clouds: Callable[[Record], Cloud] = _cloud,
            clock: Callable[[], float] = time.time) -> list[str]:  # fmt: skip
    """One refresh of the recorded annexes' ads; the names of those found gone."""
    young = {r.name for r in records(home) if clock() - r.since < RECORD_GRACE}
    by_place: dict[tuple[str, str, str, str], list[Record]] = {}
    for r in records(home):
        by_place.setdefault((r.cloud, r.region, r.group, r.pool), []).append(r)
    gone: list[str] = []
    for (_, region, _, pool), recorded in by_place.items():
        names = [r.name for r in recorded]
        try:
            ended = Annexes(clouds(recorded[0]), home, pool=pool or None).keep(names)
        except (AnnexError, CollectorError) as exc:  # the next refresh tries again
            _log.error("cannot refresh the annexes %s in %s: %s", ", ".join(names), region, exc)
            continue
        ended = [name for name in ended if name not in young]  # its lease may be coming
        for name in ended:
            _log.info("annex %s is gone: its ad is removed", name)
            forget(home, name)
        gone += ended
    return gone


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m htgrid.annex.keep", description=__doc__)
    parser.add_argument("--home", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    refresh(args.home.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
