"""Why is my job not running: its Requirements clause by clause against the pool.

`analyze(job, machines)` counts, for each `&&` clause of the job's Requirements, how many
slot or site ads satisfy it, sorts the pool the way condor_q -better-analyze does
(rejected by the job, rejecting the job, running your jobs, serving others, available),
and says which clause to relax: for each failing clause, how many ads would match if it
were dropped, and for a bound on a slot attribute (`TARGET.Memory >= RequestMemory`) the
value that would let some in ("MODIFY TO 16384"). `Analysis.format()` prints HTCondor's
layout; `better_analyze()` is both in one call, for `htgrid q -better-analyze`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from htgrid.classad import ClassAd, ExprTree
from htgrid.classad.analysis import split_clauses
from htgrid.classad.fast import requirements_hold
from htgrid.classad.syntax import AttrRef, Binary, Node, Paren, expr_of, node_of, unparse

__all__ = ["Analysis", "Condition", "analyze", "better_analyze"]

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "=="}


@dataclass(frozen=True, slots=True)
class Condition:
    """One clause of the job's Requirements and how the pool takes it."""

    step: int  # HTCondor's step number ([0], [1], [3], [5], ...)
    text: str  # as written: TARGET.Memory >= RequestMemory
    flattened: str  # with the job's own values: TARGET.Memory >= 20000
    matched: int  # ads satisfying this clause
    matched_without: int  # ads satisfying every other clause
    suggestion: str  # "", "REMOVE" or "MODIFY TO <value>"
    suggested_matches: int  # ads that would match with the suggestion taken


@dataclass(frozen=True, slots=True)
class Analysis:
    """A job's Requirements against the pool, condor_q -better-analyze's findings."""

    job_id: str
    requirements: str
    job_attributes: tuple[tuple[str, str], ...]  # what the job defines that they use
    conditions: tuple[Condition, ...]
    total: int
    rejected_by_job: int
    rejected_by_machine: int
    running_yours: int
    serving_others: int
    available: int

    @property
    def relax(self) -> Condition | None:
        """The failing clause whose change lets in the most ads (None if none helps)."""
        failing = [c for c in self.conditions if c.matched < self.total and c.suggestion]
        if not failing:
            return None
        return max(failing, key=lambda c: (c.suggested_matches, -c.matched))

    def format(self) -> str:
        """The report, laid out as condor_q -better-analyze prints it."""
        jid = self.job_id
        out = [f"The Requirements expression for job {jid} is", "", _wrap(self.requirements), ""]
        if self.job_attributes:
            out += [f"Job {jid} defines the following attributes:", ""]
            out += [f"    {name} = {text}" for name, text in self.job_attributes]
            out.append("")
        out += [
            f"The Requirements expression for job {jid} reduces to these conditions:",
            "",
            "         Slots",
            "Step    Matched  Condition",
            "-----  --------  ---------",
        ]
        out += [f"{f'[{c.step}]':<5}  {c.matched:8d}  {c.text}" for c in self.conditions]
        suggested = sorted(self.conditions, key=lambda c: c.matched)
        if any(c.suggestion for c in suggested):
            out += [
                "",
                "Suggestions:",
                "",
                "    Condition                         Machines Matched    Suggestion",
                "    ---------                         ----------------    ----------",
            ]
            for i, c in enumerate(suggested, 1):
                condition = f"( {c.flattened} )"
                tail = f"{c.matched:<20d}{c.suggestion}".rstrip()
                if len(condition) > 33:
                    out += [f"{i:<4d}{condition}", f"{'':38}{tail}"]
                else:
                    out.append(f"{i:<4d}{condition:<34}{tail}")
        out += [
            "",
            f"{jid}:  Run analysis summary ignoring user priority.  Of {self.total} machines,",
            f"{self.rejected_by_job:7d} are rejected by your job's requirements",
            f"{self.rejected_by_machine:7d} reject your job because of their own requirements",
            f"{self.running_yours:7d} match and are already running your jobs",
            f"{self.serving_others:7d} match but are serving other users",
            f"{self.available:7d} are able to run your job",
        ]
        matching = self.running_yours + self.serving_others + self.available
        if not matching:
            out += ["", "WARNING:  Be advised:", "   No machines matched the job's constraints"]
            relax = self.relax
            if relax is not None:
                change = (
                    f"with {relax.suggestion.lower()}"
                    if relax.suggestion.startswith("MODIFY")
                    else "without it"
                )
                out.append(
                    f"   Relax [{relax.step}] {relax.text}: {change}, "
                    f"{relax.suggested_matches} would match"
                )
        return "\n".join(out) + "\n"


def _wrap(text: str, width: int = 100) -> str:
    """The expression indented, broken after `&&` to fit `width`."""
    parts = text.split(" && ")
    lines: list[str] = []
    line = ""
    for i, part in enumerate(parts):
        piece = part + (" &&" if i < len(parts) - 1 else "")
        if line and len(line) + 1 + len(piece) > width - 4:
            lines.append(line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    lines.append(line)
    return "\n".join("    " + line for line in lines)


def _truthy(value: object) -> bool:
    return value is True or (type(value) in (int, float) and value != 0)


def _job_id(job: ClassAd) -> str:
    cluster, proc = job.get("ClusterId"), job.get("ProcId")
    if type(cluster) is int and type(proc) is int:
        return f"{cluster}.{proc:03d}"
    return "?"


def _strip(node: Node) -> Node:
    while type(node) is Paren:
        node = node.inner
    return node


def _slot_bound(node: Node, job: ClassAd) -> tuple[str, str, float] | None:
    """For `TARGET.x op v` (v a number the job alone decides): (x, op, v), else None."""
    node = _strip(node)
    if type(node) is not Binary or node.op not in _FLIP:
        return None
    for attr, other, op in (
        (node.left, node.right, node.op),
        (node.right, node.left, _FLIP[node.op]),
    ):
        attr = _strip(attr)
        if type(attr) is not AttrRef:
            continue
        base = attr.base
        scoped = type(base) is AttrRef and base.base is None and base.name.lower() == "target"
        if not (scoped or (base is None and attr.name not in job)):
            continue
        bound = expr_of(other).eval(job)
        if type(bound) in (int, float):
            return attr.name, op, float(bound)
    return None


def _suggest(node: Node, job: ClassAd, others_ok: list[ClassAd]) -> tuple[str, int]:
    """What to do with a failing clause, and how many ads would then match.

    A bound on a slot attribute moves just far enough to let in the next ads that
    satisfy every other clause ("MODIFY TO"); any other clause would have to go
    ("REMOVE"). Nothing is suggested when dropping the clause alone lets nothing in.
    """
    if not others_ok:
        return "", 0
    bound = _slot_bound(node, job)
    if bound is not None:
        name, op, now = bound
        values: list[int | float] = [
            v
            for ad in others_ok
            if isinstance(v := ad.get(name), int | float) and type(v) in (int, float)
        ]
        if op in (">=", ">"):
            looser = [v for v in values if v < now or (op == ">" and v == now)]
            if looser:
                best = max(looser)
                return f"MODIFY TO {best}", sum(1 for v in values if v >= best)
        elif op in ("<=", "<"):
            looser = [v for v in values if v > now or (op == "<" and v == now)]
            if looser:
                best = min(looser)
                return f"MODIFY TO {best}", sum(1 for v in values if v <= best)
        else:
            others = Counter(v for v in values if v != now)
            if others:
                best, count = others.most_common(1)[0]
                return f"MODIFY TO {best}", count
    return "REMOVE", len(others_ok)


def _mine(job: ClassAd, machine: ClassAd) -> bool:
    for remote, local in (("RemoteUser", "User"), ("RemoteOwner", "Owner")):
        value = machine.get(remote)
        if isinstance(value, str):
            return value == job.get(local)
    return False


def analyze(job: ClassAd, machines: Sequence[ClassAd], *, job_id: str | None = None) -> Analysis:
    """The job's Requirements, clause by clause, against `machines` (slot or site ads)."""
    jid = job_id or _job_id(job)
    requirements = job.lookup("Requirements") if "Requirements" in job else ExprTree("false")
    clauses = split_clauses(node_of(requirements))
    # Each clause's truth for each ad: [clause][ad].
    truth = [
        [_truthy(expr_of(clause).eval(job, machine)) for machine in machines] for clause in clauses
    ]
    conditions = []
    for k, clause in enumerate(clauses):
        others_ok = [
            m
            for i, m in enumerate(machines)
            if all(truth[j][i] for j in range(len(clauses)) if j != k)
        ]
        matched = sum(truth[k])
        suggestion, suggested = (
            ("", 0) if matched == len(machines) else _suggest(clause, job, others_ok)
        )
        flat = job.flatten(expr_of(clause))
        flat_text = unparse(_strip(node_of(flat))) if isinstance(flat, ExprTree) else repr(flat)
        conditions.append(
            Condition(
                step=0 if k == 0 else 2 * k - 1,
                text=unparse(_strip(clause)),
                flattened=flat_text,
                matched=matched,
                matched_without=len(others_ok),
                suggestion=suggestion,
                suggested_matches=suggested,
            )
        )
    counts = Counter[str]()
    for machine in machines:
        if not requirements_hold(job, machine):
            counts["job"] += 1
        elif not requirements_hold(machine, job):
            counts["machine"] += 1
        elif machine.get("State") in ("Claimed", "Preempting", "Matched"):
            counts["yours" if _mine(job, machine) else "others"] += 1
        else:
            counts["available"] += 1
    used = sorted(n for n in job.internalRefs(requirements) if n)
    attributes = tuple((_name(job, n), repr(job.lookup(n))) for n in used)
    return Analysis(
        jid,
        unparse(node_of(requirements)),
        attributes,
        tuple(conditions),
        len(machines),
        counts["job"],
        counts["machine"],
        counts["yours"],
        counts["others"],
        counts["available"],
    )


def _name(job: ClassAd, name: str) -> str:
    """The attribute's name as the job spells it."""
    return next((k for k in job if k.lower() == name.lower()), name)


def better_analyze(job: ClassAd, machines: Sequence[ClassAd], *, job_id: str | None = None) -> str:
    """condor_q -better-analyze's report for one job against the pool."""
    return analyze(job, machines, job_id=job_id).format()
