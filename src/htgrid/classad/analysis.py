"""Why two ads do or do not match: each Requirements clause and the values it saw
(`htgrid classad match`, and the clauses condor_q -better-analyze counts)."""

from __future__ import annotations

from dataclasses import dataclass

from htgrid.classad._ast import AttrRef, Node, children, operands
from htgrid.classad._classad import ClassAd, to_python
from htgrid.classad._compile import compiled
from htgrid.classad._match import rank, symmetric_match
from htgrid.classad._state import EvalState, overspent
from htgrid.classad._unparse import unparse, unparse_value
from htgrid.classad._values import ERROR, Val

__all__ = ["ClauseResult", "MatchReport", "explain_match", "split_clauses"]


@dataclass(frozen=True, slots=True)
class ClauseResult:
    """One `&&` clause of a Requirements expression and what it evaluated to."""

    text: str
    value: object
    satisfied: bool
    # The attribute references in the clause and their values, as (name, value text).
    inputs: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MatchReport:
    """Both sides of a match: the job's clauses against the machine, and vice versa."""

    matched: bool
    my_clauses: tuple[ClauseResult, ...]
    target_clauses: tuple[ClauseResult, ...]
    my_rank: float


def split_clauses(node: Node) -> list[Node]:
    """The top-level `&&` clauses of an expression (parentheses around all of it removed)."""
    return operands(node, "&&")


def _refs(node: Node) -> list[AttrRef]:
    out: list[AttrRef] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if type(n) is AttrRef:
            out.append(n)
        else:
            stack.extend(children(n))
    return out


def _satisfied(v: Val) -> bool:
    return v is True or (type(v) in (int, float) and v != 0)


def _clauses(ad: ClassAd, target: ClassAd) -> tuple[ClauseResult, ...]:
    entry = ad._attrs.get("requirements")
    if entry is None:
        return ()
    results = []
    for clause in split_clauses(entry.node):
        st = EvalState(ad, ad, target)  # each clause an evaluation, with its own budget
        try:
            value = compiled(clause)(st)
        except RecursionError:
            value = ERROR
        if overspent(st):
            value = ERROR
        inputs: dict[str, str] = {}
        for ref in _refs(clause):
            name = unparse(ref)
            if name in inputs:
                continue
            ref_st = EvalState(ad, ad, target)
            try:
                v = compiled(ref)(ref_st)
                inputs[name] = unparse_value(ERROR if overspent(ref_st) else v)
            except (TypeError, RecursionError):
                inputs[name] = "?"
        results.append(
            ClauseResult(
                unparse(clause), to_python(value), _satisfied(value), tuple(inputs.items())
            )
        )
    return tuple(results)


def explain_match(my: ClassAd, target: ClassAd) -> MatchReport:
    """Evaluate each Requirements clause of both ads against the other."""
    return MatchReport(
        matched=symmetric_match(my, target),
        my_clauses=_clauses(my, target),
        target_clauses=_clauses(target, my),
        my_rank=rank(my, target),
    )
