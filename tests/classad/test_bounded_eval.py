"""One evaluation does a bounded amount of work: an expression that parses but would take
forever (attributes that double their work at each level, a regular expression that
backtracks without end) gives ERROR instead of holding the daemon thread that evaluates
it, and every other evaluation is as before.

classad2 (25.14.1) stops the same way: its EvalState counts node evaluations
(MAX_CLASSAD_EVAL_STEPS, 10,000,000) and its ExprTree.eval raises "failed to evaluate
expression" where htgrid gives Value.Error (htgrid's budget is 1,000,000 steps of its own
kind: see `MAX_EVALUATION_STEPS`). Its regexps stop at PCRE2's match limit and give ERROR.

Each test that would hang without the bound has a timeout (pytest-timeout) as its guard.
"""

from __future__ import annotations

import classad2
import htcondor2  # noqa: F401 - HTCondor mode for classad2
import pytest

import htgrid.classad as classad
from htgrid.classad.analysis import explain_match

ERROR = classad.Value.Error
GUARD = pytest.mark.timeout(60)


def _doubling(levels: int, leaf: str = "1", prefix: str = "A") -> str:
    """`A0 = A1 + A1; A1 = A2 + A2; ...`: A0 takes 2**levels evaluations of the leaf."""
    lines = [f"{prefix}{i} = {prefix}{i + 1} + {prefix}{i + 1}" for i in range(levels)]
    return "[" + "; ".join([*lines, f"{prefix}{levels} = {leaf}"]) + "]"


BOMB = _doubling(60)


@GUARD
def test_an_ad_that_doubles_its_work_60_times_evaluates_to_error() -> None:
    ad = classad.ClassAd(BOMB)
    assert ad.eval("A0") is ERROR
    assert classad.ExprTree("A0 + 1").eval(ad) is ERROR
    assert ad.flatten(classad.ExprTree("A0 + x")) is ERROR
    # An attribute lower down is still cheap enough to have its value.
    assert ad.eval("A45") == 2**15
    # classad2 gives up on it as well (with an exception rather than a value).
    with pytest.raises(classad2.ClassAdException, match="failed to evaluate"):
        classad2.ClassAd(BOMB).eval("A0")


def test_below_the_budget_the_same_shape_has_its_value_as_in_classad2() -> None:
    text = _doubling(16)
    assert classad.ClassAd(text).eval("A0") == 2**16 == classad2.ClassAd(text).eval("A0")


@GUARD
def test_a_large_expression_reached_again_and_again_pays_for_its_size() -> None:
    # Each step down is one attribute, but the leaf is a 5,000-term chain of constants:
    # counting attributes alone would allow a million of those.
    leaf = " + ".join(["K"] * 5000)
    ad = classad.ClassAd(_doubling(40, leaf).replace("]", "; K = 1]"))
    assert ad.eval("A0") is ERROR
    assert ad.eval("A39") == 2 * 5000


@GUARD
@pytest.mark.parametrize(
    "expr",
    [
        "isError(A0)",
        "A0 =?= error",
        "ifThenElse(isError(A0), 1, 2)",
        "isError(A0) || true",
        "A0 ?: 1",
    ],
)
def test_an_evaluation_that_ran_out_is_error_whatever_it_made_of_it(expr: str) -> None:
    assert classad.ExprTree(expr).eval(classad.ClassAd(BOMB)) is ERROR


@GUARD
@pytest.mark.parametrize("function", ["countMatches", "evalInEachContext"])
def test_evaluating_in_each_ad_of_a_list_draws_on_the_same_budget(function: str) -> None:
    # Each level evaluates the next in each of two nested ads: 2**40 evaluations.
    lines = [f"C{i} = {function}(C{i + 1} > 0, {{ [], [] }})" for i in range(40)]
    ad = classad.ClassAd("[" + "; ".join([*lines, "C40 = 1"]) + "]")
    assert ad.eval("C0") is ERROR


@GUARD
def test_matchmaking_with_such_requirements_fails_and_others_still_match() -> None:
    bad = classad.ClassAd(BOMB)
    bad["Requirements"] = classad.ExprTree("A0 > 0 && TARGET.Cpus > 0")
    good = classad.ClassAd({"Requirements": classad.ExprTree("TARGET.Cpus > 0")})
    machine = classad.ClassAd({"Cpus": 4, "Requirements": True})
    assert not machine.symmetricMatch(bad)
    assert machine.symmetricMatch(good)
    (clause, cpus) = explain_match(bad, machine).my_clauses
    assert clause.value is ERROR and not clause.satisfied
    assert cpus.satisfied


@GUARD
def test_each_evaluation_has_a_budget_of_its_own() -> None:
    ad = classad.ClassAd(BOMB)
    ad["Small"] = classad.ExprTree("A50 * 2")
    for _ in range(2):
        assert ad.eval("A0") is ERROR
        assert ad.eval("Small") == 2**11


def test_a_100000_term_chain_of_attribute_references_evaluates() -> None:
    chain = " + ".join(["K"] * 100_000)
    ad = classad.ClassAd("[K = Y + 0; Y = 1]")
    assert classad.ExprTree(chain).eval(ad) == 100_000
    ad["Sum"] = classad.ExprTree(chain)
    assert ad.eval("Sum") == 100_000
    ad["Requirements"] = classad.ExprTree(f"Sum == 100000 && {' && '.join(['K == 1'] * 50_000)}")
    assert classad.ClassAd({"Requirements": True}).symmetricMatch(ad)
