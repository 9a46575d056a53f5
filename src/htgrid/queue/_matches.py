"""Grid matchmaking in the job ad: a match fills the `$$()` macros in, a release undoes it.

A grid job with `grid_resource = $$(resource_name)` waits (Matched = false) until the
negotiator matches it to a site ad. The match writes the filled-in values over the
job's attributes, so that the grid manager, `htgrid q` and the event log all see the
site (GridResource = "batch slurm"); it keeps each attribute's `$$()` template, as
HTCondor's job ad keeps it, in `MATCH_TEMPLATE_<attribute>` (a MATCH_ attribute, which
is never expanded itself), next to HTCondor's records of the match (`MATCH_<name>`,
`MATCH_EXP_<attribute>`, NumJobMatches, LastMatchName0...), and sets Matched = true.

A grid job the site failed comes back to the queue held; when it is released (by its
periodic_release, or a user) the match is undone: the templates return, the MATCH_
records go, and Matched = false, so the negotiator matches the job anew, to another site
when its Requirements or Rank say so (`Rank = TARGET.Name != LastMatchName0`, with
`match_list_length`, as HTCondor's manual shows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from htgrid.queue._store import JobEdit

__all__ = ["TEMPLATE_PREFIX", "record_match", "undo_match"]

TEMPLATE_PREFIX: Final = "MATCH_TEMPLATE_"
_GRID: Final = 9


def record_match(edit: JobEdit, updates: Mapping[str, Any], expanded: Iterable[str]) -> None:
    """Write a match's `updates` into the job; the attributes named in `expanded` (those
    whose macros it filled) keep their template first, unless one is kept already."""
    for name in expanded:
        template = TEMPLATE_PREFIX + name
        if not edit.has(template) and edit.has(name):
            edit.set(template, edit.get(name))
    for name, value in updates.items():
        edit.set(name, value)
    edit.set("Matched", True)


def undo_match(edit: JobEdit) -> bool:
    """Undo the grid match of a job the grid manager has let go of; whether there was one.

    Called at release: a job still managed by the grid manager (Managed = "External")
    keeps its match, as the grid manager still runs it at that site.
    """
    if edit.get("Matched") is not True or edit.get("JobUniverse") != _GRID:
        return False
    if edit.get("Managed") == "External":
        return False
    recorded = [name for name in edit.own if name.upper().startswith("MATCH_")]
    templates = [name for name in recorded if name.upper().startswith(TEMPLATE_PREFIX)]
    if not templates:
        return False  # nothing was filled in by a match: nothing to match anew
    for name in templates:
        edit.set(name[len(TEMPLATE_PREFIX) :], edit.get(name))
    for name in recorded:
        edit.delete(name)
    edit.set("Matched", False)
    return True
