"""condor_status's tables: its columns, widths and totals, as plain text or rich tables.

Plain text (when piped) keeps condor_status's layout to the column so eyes and awk used
to it keep working; in a terminal the same rows become a rich table.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from htgrid.classad import ClassAd

__all__ = ["Table", "any_table", "grid_table", "machine_table", "render", "schedd_table"]

# Totals are keyed "Arch/OpSys" in a column this wide (condor_status's totals).
_KEY_WIDTH = 24
_STATES = ("Owner", "Claimed", "Unclaimed", "Matched", "Preempting", "Backfill", "Drained")


@dataclass(frozen=True, slots=True)
class Table:
    """Rows to show: a plain-text header and rows, the same as cells for rich."""

    header: str
    lines: list[str]
    columns: tuple[str, ...]
    cells: list[tuple[str, ...]]
    totals: list[str]  # plain-text totals block ([] when there are none)
    totals_columns: tuple[str, ...] = ()
    totals_cells: tuple[tuple[str, ...], ...] = ()


def _str(ad: ClassAd, name: str) -> str:
    value = ad.get(name)
    return value if isinstance(value, str) else ""


def _num(ad: ClassAd, name: str) -> float | None:
    value = ad.get(name)
    if not isinstance(value, int | float) or type(value) not in (int, float):
        return None
    return float(value)


def format_time(seconds: float) -> str:
    """condor's `d+hh:mm:ss`, days right-aligned in three places."""
    s = max(0, int(seconds))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days:3d}+{hours:02d}:{minutes:02d}:{secs:02d}"


def _activity_time(ad: ClassAd) -> str:
    entered = _num(ad, "EnteredCurrentActivity")
    now = _num(ad, "MyCurrentTime") or _num(ad, "LastHeardFrom")
    if entered is None or now is None:
        return " [Unknown]"
    return format_time(now - entered)


def machine_table(ads: Sequence[ClassAd]) -> Table:
    """condor_status's default view of slots, with totals per Arch/OpSys."""
    header = (
        f"{'Name':<18} {'OpSys':<10} {'Arch':<6} {'State':<9} {'Activity':<8} "
        f"{'LoadAv':<6} {'Mem':<4}  ActvtyTime"
    )
    lines: list[str] = []
    cells: list[tuple[str, ...]] = []
    totals: dict[str, Counter[str]] = {}
    malformed = 0
    for ad in ads:
        name, opsys, arch = _str(ad, "Name"), _str(ad, "OpSys"), _str(ad, "Arch")
        state, activity = _str(ad, "State"), _str(ad, "Activity")
        load, memory = _num(ad, "LoadAvg"), _num(ad, "Memory")
        loadav = f"{load:6.3f}" if load is not None else ""
        mem = f"{int(memory):4d}" if memory is not None else ""
        when = _activity_time(ad)
        lines.append(
            f"{name:<18.18} {opsys:<10.10} {arch:<6.6} {state:<9.9} {activity:<8.8} "
            f"{loadav:>6} {mem:>4}{when}"
        )
        cells.append(
            (name, opsys, arch, state, activity, loadav.strip(), mem.strip(), when.strip())
        )
        state_key = "Drained" if state == "Drained" else state
        if not (arch and opsys and state_key in _STATES):
            malformed += 1
            continue
        totals.setdefault(f"{arch}/{opsys}", Counter())[state_key] += 1
    columns = ("Name", "OpSys", "Arch", "State", "Activity", "LoadAv", "Mem", "ActvtyTime")
    return _with_totals(Table(header, lines, columns, cells, []), totals, malformed)


def _with_totals(table: Table, totals: dict[str, Counter[str]], malformed: int) -> Table:
    head = "Total Owner Claimed Unclaimed Matched Preempting Backfill  Drain"
    width = max([_KEY_WIDTH, *(len(k) for k in totals)])

    def row(key: str, c: Counter[str]) -> tuple[str, list[int]]:
        values = [sum(c.values()), *(c[s] for s in _STATES)]
        text = "{:>{w}}{:6d} {:5d} {:7d} {:9d} {:7d} {:10d} {:8d} {:6d}".format(
            key, *values, w=width
        )
        return text, values

    block = [f"{'':{width}} {head}", ""]
    cells = []
    for key in sorted(totals):
        text, values = row(key, totals[key])
        block.append(text)
        cells.append((key, *map(str, values)))
    if totals:
        block.append("")
    overall: Counter[str] = Counter()
    for c in totals.values():
        overall.update(c)
    text, values = row("Total", overall)
    block.append(text)
    cells.append(("Total", *map(str, values)))
    if malformed:
        block += [
            "",
            f"{'':{width}}(Omitted {malformed} malformed ads in computed attribute totals)",
        ]
    columns = (
        "",
        "Total",
        "Owner",
        "Claimed",
        "Unclaimed",
        "Matched",
        "Preempting",
        "Backfill",
        "Drain",
    )
    return Table(
        table.header, table.lines, table.columns, table.cells, block, columns, tuple(cells)
    )


def schedd_table(ads: Sequence[ClassAd]) -> Table:
    """condor_status -schedd: job counts per queue, and their totals."""
    header = f"{'Name':<20} {'Machine':<10} {'RunningJobs':>11} {'IdleJobs':>10} {'HeldJobs':>10}"
    lines: list[str] = []
    cells: list[tuple[str, ...]] = []
    sums = [0, 0, 0]
    for ad in ads:
        counts = [
            int(_num(ad, n) or 0) for n in ("TotalRunningJobs", "TotalIdleJobs", "TotalHeldJobs")
        ]
        sums = [a + b for a, b in zip(sums, counts, strict=True)]
        name, machine = _str(ad, "Name"), _str(ad, "Machine")
        lines.append(
            f"{name:<20.20} {machine:<10.10} {counts[0]:11d} {counts[1]:10d} {counts[2]:10d}"
        )
        cells.append((name, machine, *map(str, counts)))
    columns = ("Name", "Machine", "RunningJobs", "IdleJobs", "HeldJobs")
    heads = ("TotalRunningJobs", "TotalIdleJobs", "TotalHeldJobs")
    block = [
        f"{'':{_KEY_WIDTH}}" + " ".join(f"{h:>18}" for h in heads),
        "",
        f"{'Total':>{_KEY_WIDTH}}" + " ".join(f"{n:18d}" for n in sums),
    ]
    return Table(header, lines, columns, cells, block, ("", *heads), (("Total", *map(str, sums)),))


def grid_table(ads: Sequence[ClassAd]) -> Table:
    """condor_status -grid: the grid manager's resources and their jobs."""
    header = f"{'Name':<36} {'NumJobs':>7} {'Allowed':>7} {'Wanted':>7} {'Running':>7} {'Idle':>7}"
    names = ("NumJobs", "SubmitsAllowed", "SubmitsWanted", "RunningJobs", "IdleJobs")
    lines: list[str] = []
    cells: list[tuple[str, ...]] = []
    for ad in ads:
        values = [_num(ad, n) for n in names]
        shown = [str(int(v)) if v is not None else "" for v in values]
        name = _str(ad, "Name")
        lines.append(f"{name:<36.36} " + " ".join(f"{v:>7}" for v in shown))
        cells.append((name, *shown))
    columns = ("Name", "NumJobs", "Allowed", "Wanted", "Running", "Idle")
    return Table(header, lines, columns, cells, [])


def any_table(ads: Sequence[ClassAd], extra: str = "") -> Table:
    """condor_status -any: every ad's type, target type and name (and one more column)."""
    columns = ("MyType", "TargetType", "Name") + ((extra,) if extra else ())
    header = f"{'MyType':<20} {'TargetType':<20} " + (f"{'Name':<40} {extra}" if extra else "Name")
    lines: list[str] = []
    cells: list[tuple[str, ...]] = []
    for ad in ads:
        row = [_str(ad, "MyType"), _str(ad, "TargetType") or "None", _str(ad, "Name")]
        if extra:
            row.append(_str(ad, extra))
        lines.append(
            f"{row[0]:<20.20} {row[1]:<20.20} {row[2]:<40}" + (f" {row[3]}" if extra else "")
        )
        cells.append(tuple(row))
    return Table(header, [line.rstrip() for line in lines], columns, cells, [])


def render(
    table: Table, out: TextIO | None = None, *, totals_only: bool = False, rich: bool | None = None
) -> None:
    """Print `table`: rich in a terminal, condor_status's plain text otherwise."""
    out = out or sys.stdout
    if rich if rich is not None else out.isatty():
        _render_rich(table, out, totals_only)
        return
    if not totals_only:
        out.write(f"\n{table.header}\n\n")
        for line in table.lines:
            out.write(line + "\n")
    if table.totals and (table.lines or totals_only):
        out.write("\n")
        for line in table.totals:
            out.write(line.rstrip() + "\n")


def _render_rich(table: Table, out: TextIO, totals_only: bool) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=out)

    def show(columns: tuple[str, ...], cells: Sequence[tuple[str, ...]]) -> RichTable:
        # As `htgrid q` draws its tables.
        t = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for i, column in enumerate(columns):
            numeric = i > 0 and _numeric(cells, i)
            t.add_column(column, justify="right" if numeric else "left", no_wrap=True)
        for row in cells:
            t.add_row(*row)
        return t

    if not totals_only:
        console.print(show(table.columns, table.cells))
    if table.totals_cells and (table.cells or totals_only):
        console.print(show(table.totals_columns, table.totals_cells))


def _numeric(cells: Sequence[tuple[str, ...]], i: int) -> bool:
    values = [row[i] for row in cells if i < len(row) and row[i]]
    return bool(values) and all(v.replace(".", "", 1).lstrip("-").isdigit() for v in values)
