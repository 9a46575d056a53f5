"""Tables as condor_q prints them: plain aligned columns in a pipe, rich in a terminal."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Column", "print_table"]


@dataclass(frozen=True, slots=True)
class Column:
    """A column's title and which side its cells lean to."""

    title: str
    right: bool = False


def print_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, rich: bool) -> None:
    """The header and the rows: rich's table in a terminal, else plain text."""
    if rich:
        from rich import box
        from rich.console import Console
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for col in columns:
            table.add_column(col.title, justify="right" if col.right else "left", no_wrap=True)
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    widths = [len(c.title) for c in columns]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(w) if col.right else cell.ljust(w)
            for col, w, cell in zip(columns, widths, cells, strict=True)
        ]
        return " ".join(parts).rstrip()

    out = sys.stdout
    out.write(line([c.title for c in columns]) + "\n")
    for row in rows:
        out.write(line(row) + "\n")
