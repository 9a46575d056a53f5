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
def test_a_function_given_a_long_string_pays_for_its_length() -> None:
    # Each leaf copies a megabyte twice: counted as one step, a million of them would
    # copy two terabytes.
    ad = classad.ClassAd(_doubling(40, "size(strcat(S, S))"))
    ad["S"] = "x" * 1_000_000
    assert ad.eval("A0") is ERROR
    assert ad.eval("A38") == 4 * 2_000_000


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


# -- regular expressions ----------------------------------------------------------------

RUN = "a" * 60 + "b"  # `(a|aa)+$` tries every way to split the a's before failing at b
PATTERN = "(a|aa)+$"


@GUARD
@pytest.mark.parametrize(
    ("expr", "want"),
    [
        (f'regexp("{PATTERN}", X)', ERROR),
        (f'regexp("{PATTERN}", X, "i")', ERROR),
        (f'regexp("{PATTERN}", "{RUN}")', ERROR),  # folded when compiled: the same
        (f'regexps("{PATTERN}", X, "x")', ERROR),
        (f'replace("{PATTERN}", X, "x")', ERROR),
        (f'replaceAll("{PATTERN}", X, "x")', ERROR),
        (f'isError(regexp("{PATTERN}", X))', True),
        # The list functions count an item the match gave up on as no match.
        (f'regexpMember("{PATTERN}", {{ X }})', False),
        (f'regexpMember("{PATTERN}", {{ X, "aa" }})', True),
        (f'stringList_regexpMember("{PATTERN}", X)', False),
        (f'stringList_regexpMember("{PATTERN}", strcat(X, ",aa"))', True),
        ('regexp("^(a|a)*$", X)', ERROR),
        ('regexp("^((a+)\\\\2)*$", X)', ERROR),
    ],
)
def test_a_regexp_that_backtracks_without_end_gives_up_as_pcre2_does(
    expr: str, want: object
) -> None:
    ad = classad.ClassAd({"X": RUN})
    assert classad.ExprTree(expr).eval(ad) == want
    if "\\\\2" not in expr:  # classad2 (PCRE2's match limit) agrees
        assert classad2.ExprTree(expr).eval(classad2.ClassAd({"X": RUN})) == want


@GUARD
def test_a_pattern_the_matcher_needs_not_backtrack_on_gets_its_answer() -> None:
    # `regex` sees that `(a+)+` can split a run of a's but one way worth trying, and says
    # no at once; PCRE2 backtracks into its match limit and gives ERROR. Both stop.
    ad = classad.ClassAd({"X": RUN})
    assert classad.ExprTree('regexp("(a+)+$", X)').eval(ad) is False
    assert classad2.ExprTree('regexp("(a+)+$", X)').eval(classad2.ClassAd({"X": RUN})) == ERROR


@GUARD
def test_unresolved_counts_a_name_the_match_gave_up_on_as_no_match() -> None:
    ad = classad.ClassAd(f"[E = {RUN}; F = {RUN} + aa]")
    assert classad.ExprTree(f'unresolved(E, "{PATTERN}")').eval(ad) is False
    assert classad.ExprTree(f'unresolved(F, "{PATTERN}")').eval(ad) is True


@GUARD
def test_many_slow_matches_in_one_evaluation_are_bounded_too() -> None:
    # Each leaf gives up after its time, and 2**30 of them would never end: the time
    # the matches take is drawn from the evaluation's budget.
    ad = classad.ClassAd(_doubling(30, f'regexp("{PATTERN}", X) =?= error'))
    ad["X"] = RUN
    assert ad.eval("A0") is ERROR


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ('regexp("^slot[0-9]+@.*\\\\.example\\\\.org$", Name, "i")', True),
        ('regexp("^slot[0-9]+@", Name)', False),
        ('regexps("([a-z]+)([0-9]+)@", Name, "\\\\2-\\\\1", "i")', "12-SLOT"),
        ('replaceAll("o", Name, "0")', "SLOT12@n0de042.Example.0rg"),
        ('regexpMember("^node", split(Name, "@"))', True),
        ('stringList_regexpMember("EXAMPLE", "a,b,node.example.org", ",", "i")', True),
        ('regexp("(a|aa)+$", "aaab")', False),  # the pathological pattern, on a short subject
        ('regexp("(a|aa)+$", "aaaa")', True),
    ],
)
def test_ordinary_regexps_give_what_they_gave(expr: str, want: object) -> None:
    name = "SLOT12@node042.Example.org"
    assert classad.ExprTree(expr).eval(classad.ClassAd({"Name": name})) == want
    assert classad2.ExprTree(expr).eval(classad2.ClassAd({"Name": name})) == want


def test_a_long_subject_is_matched_as_a_short_one() -> None:
    # Past the length where `re` is sure to be quick, the bounded matcher takes over.
    long = "x" * 100_000 + "slot1@host.example.org"
    ad = classad.ClassAd({"Name": long})
    assert classad.ExprTree('regexp("slot[0-9]+@.*\\\\.example\\\\.org$", Name)').eval(ad)
    assert classad.ExprTree('regexps("(slot[0-9]+)@", Name, "\\\\1")').eval(ad) == "slot1"
    assert classad.ExprTree('regexp("^slot", Name)').eval(ad) is False
