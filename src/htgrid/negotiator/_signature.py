"""Which attributes matter to a match, and ads grouped by their values of them.

HTCondor groups idle jobs into autoclusters by their SIGNIFICANT_ATTRIBUTES: the job
attributes that any Requirements or Rank (the job's, the machines', the negotiator's
PRE/POST_JOB_RANK) can reach. Jobs alike in those are alike to every machine, so one
representative is matched for all. This module computes that set from the expressions
themselves (following attributes into their own expressions), and does the same for
machine ads: slots alike in everything a job can see fall into one class, matched once.

An expression calling `eval()` reaches attributes by computed names; an ad whose
expressions do that is kept apart, in a group of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from htgrid.classad import ClassAd
from htgrid.classad.fast import NOT_CONSTANT, entries
from htgrid.classad.syntax import AttrRef, Call, Node, children

__all__ = ["Grouping", "RefCache", "Refs", "group_signatures"]

_MY = frozenset({"my", "self"})
_TARGET = frozenset({"target", "other"})
_OUTER = frozenset({"parent", "root", "toplevel"})
# Functions that look attributes up by names made at run time.
_OPAQUE = frozenset({"eval"})


@dataclass(frozen=True, slots=True)
class Refs:
    """The attribute names (lower case) an expression can reach."""

    mine: frozenset[str]  # in the expression's own ad (MY.x, .x)
    other: frozenset[str]  # in the other ad of the match (TARGET.x)
    either: frozenset[str]  # unscoped: the own ad first, then the other
    opaque: bool  # names made at run time (eval)


class RefCache:
    """`Refs` of expression nodes, each computed once (nodes are shared between ads)."""

    def __init__(self) -> None:
        # Keyed by id; the node is kept in the value so the id stays its own.
        self._cache: dict[int, tuple[Node, Refs]] = {}
        self._keys: dict[int, tuple[Node, tuple[str, int] | None]] = {}
        self._by_structure: dict[Node, int] = {}
        self._tags: dict[int, tuple[str, int]] = {}

    def key(self, node: Node) -> tuple[str, int] | None:
        """A tag equal for structurally equal expressions; None for opaque ones.

        Ads read from JSON or new syntax share the nodes of equal expressions (the
        parser's cache), so this hashes each distinct node object once; ads built one
        by one still group, at the cost of hashing each.
        """
        hit = self._keys.get(id(node))
        if hit is not None:
            return hit[1]
        tag = None
        if not self(node).opaque:
            number = self._by_structure.setdefault(node, len(self._by_structure))
            tag = self._tags.setdefault(number, ("expr", number))  # one object per tag
        self._keys[id(node)] = (node, tag)
        return tag

    def __call__(self, node: Node) -> Refs:
        hit = self._cache.get(id(node))
        if hit is not None:
            return hit[1]
        mine: set[str] = set()
        other: set[str] = set()
        either: set[str] = set()
        opaque = False
        stack = [node]
        while stack:
            n = stack.pop()
            t = type(n)
            if t is AttrRef:
                ref: AttrRef = n  # type: ignore[assignment]
                name = ref.name.lower()
                base = ref.base
                if base is None:
                    (mine if ref.absolute else either).add(name)
                    continue
                if type(base) is AttrRef and base.base is None and not base.absolute:
                    scope = base.name.lower()
                    if scope in _MY or scope in _OUTER:
                        mine.add(name)
                        continue
                    if scope in _TARGET:
                        other.add(name)
                        continue
                # `foo.bar` into a nested ad: `bar` may fall back to either ad.
                either.add(name)
                stack.append(base)
                continue
            if t is Call and n.name.lower() in _OPAQUE:  # type: ignore[attr-defined]
                opaque = True
            stack.extend(children(n))
        refs = Refs(frozenset(mine), frozenset(other), frozenset(either), opaque)
        self._cache[id(node)] = (node, refs)
        return refs


@dataclass(frozen=True, slots=True)
class Grouping:
    """Each ad's signature, and the attributes they were taken over, per side."""

    job_names: tuple[str, ...]
    machine_names: tuple[str, ...]
    jobs: list[object]  # one signature per job ad, in order
    machines: list[object]  # one signature per machine ad, in order


_ABSENT = object()


def group_signatures(
    jobs: Sequence[ClassAd],
    machines: Sequence[ClassAd],
    job_roots: Iterable[str],
    machine_roots: Iterable[str],
    machine_exprs: Iterable[Node],
    refs: RefCache,
) -> Grouping:
    """Signatures of every ad over everything the roots can reach, on both sides.

    `job_roots` and `machine_roots` are attribute names evaluated on each side;
    `machine_exprs` are expressions evaluated with the machine as MY (PRE/POST_JOB_RANK).
    Equal signatures match every ad of the other side the same way: constants count by
    type and value (`1`, `1.0` and `true` differ), expressions by structure. An ad
    reaching attributes by computed names (eval) gets a signature equal to no other.

    One column (attribute) at a time over all ads of a side: an expression met for the
    first time may reach more attributes, which become more columns, until none is new.
    """
    names: dict[str, list[str]] = {"job": [], "machine": []}
    known: dict[str, set[str]] = {"job": set(), "machine": set()}
    ads = {"job": [entries(ad) for ad in jobs], "machine": [entries(ad) for ad in machines]}
    columns: dict[str, list[list[object]]] = {"job": [], "machine": []}
    opaque_nodes: set[int] = set()
    flip = {"job": "machine", "machine": "job"}
    followed: set[tuple[str, tuple[str, int]]] = set()

    def add(side: str, found: Iterable[str]) -> None:
        for name in found:
            if name not in known[side]:
                known[side].add(name)
                names[side].append(name)

    def reach(side: str, r: Refs) -> None:
        add(side, r.mine)
        add(flip[side], r.other)
        add(side, r.either)
        add(flip[side], r.either)

    add("job", (n.lower() for n in job_roots))
    add("machine", (n.lower() for n in machine_roots))
    everything_opaque = False
    for node in machine_exprs:
        r = refs(node)
        everything_opaque = everything_opaque or r.opaque
        reach("machine", r)
    key = refs.key
    while any(len(columns[side]) < len(names[side]) for side in columns):
        for side in ("job", "machine"):
            while len(columns[side]) < len(names[side]):
                name = names[side][len(columns[side])]
                column: list[object] = []
                append = column.append
                for attrs in ads[side]:
                    entry = attrs.get(name)
                    if entry is None:
                        append(_ABSENT)
                        continue
                    lit = entry.lit
                    t = type(lit)
                    if t is str or t is int:
                        append(lit)
                    elif lit is NOT_CONSTANT:
                        tag = key(entry.node)
                        if tag is None:
                            opaque_nodes.add(id(entry.node))
                            reach(side, refs(entry.node))
                        elif (side, tag) not in followed:
                            followed.add((side, tag))
                            reach(side, refs(entry.node))
                        append(tag)
                    else:
                        append((t, lit))  # bool, float: 1, 1.0 and true must differ
                columns[side].append(column)

    if opaque_nodes:
        # eval() can reach any attribute of either ad: nothing groups safely.
        everything_opaque = True

    def signatures(side: str) -> list[object]:
        count = len(ads[side])
        if everything_opaque:
            return [object() for _ in range(count)]
        if not columns[side]:
            return [()] * count
        return list(zip(*columns[side], strict=True))

    return Grouping(
        tuple(names["job"]), tuple(names["machine"]), signatures("job"), signatures("machine")
    )
