"""htgrid.classad's API beyond classad2, for htgrid's own daemons: `fast` (entry tables,
matching), `syntax` (expression trees and their text) and `analysis` (why ads match)."""

from __future__ import annotations

import copy
import sys

import pytest

from htgrid.classad import ClassAd, ExprTree, ParserType, Value
from htgrid.classad.analysis import ClauseResult, explain_match, split_clauses
from htgrid.classad.fast import (
    NOT_CONSTANT,
    Entry,
    attr_value,
    compile_expressions,
    entries,
    from_entries,
    rank,
    requirements_hold,
    symmetric_match,
)
from htgrid.classad.syntax import (
    AttrRef,
    Binary,
    ListExpr,
    Literal,
    Paren,
    Unary,
    children,
    evaluated,
    expr_of,
    iter_ads,
    node_of,
    operands,
    to_node,
    unparse,
)
from htgrid.errors import ClassAdSyntaxError, ClassAdValueError

JOB = '[Owner = "alice"; RequestMemory = 2048; Requirements = TARGET.Memory >= RequestMemory]'
SLOT = '[Name = "s1"; Memory = 4096; Requirements = TARGET.Owner == "alice"; Rank = 2.5]'


# -- fast --------------------------------------------------------------------------------


def test_entries_is_the_ads_own_table_by_lower_case_name() -> None:
    ad = ClassAd('[Owner = "alice"; RequestMemory = 2048; Big = RequestMemory * 2]')
    table = entries(ad)
    assert list(table) == ["owner", "requestmemory", "big"]
    assert [(e.name, e.lit) for e in table.values()][:2] == [
        ("Owner", "alice"),
        ("RequestMemory", 2048),
    ]
    assert table["big"].lit is NOT_CONSTANT
    assert unparse(table["big"].node) == "RequestMemory * 2"
    # Not a copy: a change to the table is a change to the ad, and the other way round.
    table["procid"] = Entry("ProcId", Literal(7))
    del table["owner"]
    assert ad["ProcId"] == 7 and "Owner" not in ad
    ad["Cpus"] = 4
    assert table["cpus"].lit == 4


def test_entries_may_be_shared_between_ads() -> None:
    ad = ClassAd(JOB)
    other = copy.copy(ad)
    assert entries(other) is not entries(ad)
    assert entries(other)["requirements"] is entries(ad)["requirements"]


def test_an_entry_holds_the_value_of_a_constant_only() -> None:
    assert Entry("X", to_node("text")).lit == "text"
    assert Entry("X", to_node(2.5)).lit == 2.5
    assert Entry("X", to_node(None)).lit is Value.Undefined
    assert Entry("X", node_of(ExprTree('relTime("1:00")'))).lit == 60.0
    assert Entry("X", node_of(ExprTree("1 + 1"))).lit is NOT_CONSTANT
    assert Entry("X", to_node([1, 2])).lit is NOT_CONSTANT


def test_from_entries_makes_an_ad_of_the_table_itself() -> None:
    table = {
        "memory": Entry("Memory", Literal(4096)),
        "requirements": Entry("Requirements", node_of(ExprTree("TARGET.RequestMemory <= Memory"))),
    }
    ad = from_entries(table)
    assert entries(ad) is table
    assert ad == ClassAd("[Memory = 4096; Requirements = TARGET.RequestMemory <= Memory]")
    assert list(ad) == ["Memory", "Requirements"]
    assert ad.printOld() == "Memory = 4096\nRequirements = TARGET.RequestMemory <= Memory\n"
    assert requirements_hold(ad, ClassAd("[RequestMemory = 1024]"))
    assert from_entries({}) == ClassAd()


def test_requirements_hold_is_classad2s_matches_the_other_way_round() -> None:
    job, slot = ClassAd(JOB), ClassAd(SLOT)
    assert requirements_hold(job, slot) and slot.matches(job)
    small = ClassAd('[Memory = 1024; Requirements = true; Owner = "x"]')
    assert not requirements_hold(job, small) and not small.matches(job)
    # A number counts by its truth; undefined, a string or no Requirements do not.
    for text, expected in [("2", True), ("0.0", False), ("undefined", False), ('"yes"', False)]:
        assert requirements_hold(ClassAd(f"[Requirements = {text}]"), slot) is expected
    assert not requirements_hold(ClassAd("[]"), slot)


def test_symmetric_match_needs_both_sides() -> None:
    job, slot = ClassAd(JOB), ClassAd(SLOT)
    assert symmetric_match(job, slot) and symmetric_match(slot, job)
    bob = ClassAd(JOB.replace("alice", "bob"))
    assert requirements_hold(bob, slot) and not symmetric_match(bob, slot)


def test_rank_is_a_real_and_zero_when_not_a_number() -> None:
    job, slot = ClassAd(JOB), ClassAd(SLOT)
    assert rank(slot, job) == 2.5
    assert rank(ClassAd("[Rank = TARGET.RequestMemory / 2]"), job) == 1024.0
    assert rank(ClassAd("[Rank = true]"), job) == 1.0
    assert rank(ClassAd('[Rank = "high"]'), job) == 0.0
    assert rank(job, slot) == 0.0  # no Rank


def test_attr_value_reads_constants_as_stored_and_evaluates_the_rest() -> None:
    ad = ClassAd('[Owner = "alice"; Memory = 2048; Twice = Memory * 2; T = relTime("1:00")]')
    assert attr_value(ad, "owner") == "alice"
    assert attr_value(ad, "twice") == 4096
    assert attr_value(ad, "t") == 60.0
    assert attr_value(ad, "nosuch") is None
    assert attr_value(ad, "Owner") is None  # the name is given in lower case


def test_compile_expressions_raises_what_compiling_raises() -> None:
    ad = ClassAd(JOB)
    compile_expressions(ad)  # all fine: nothing raised, and the ad evaluates as before
    assert ad.eval("Requirements") is Value.Undefined
    # A tree built by code, deeper than anything the parser lets through.
    node = Literal(1)
    for _ in range(sys.getrecursionlimit() * 2):
        node = Unary("-", node)
    with pytest.raises(RecursionError):
        compile_expressions(from_entries({"x": Entry("X", node)}))


# -- syntax ------------------------------------------------------------------------------


def test_the_tree_of_an_expression_is_made_of_public_node_classes() -> None:
    node = node_of(ExprTree("(MY.Memory >= 1024) && .Arch == TARGET.Arch"))
    assert type(node) is Binary and node.op == "&&"
    left = node.left
    assert type(left) is Paren and type(left.inner) is Binary and left.inner.op == ">="
    ref = left.inner.left
    assert type(ref) is AttrRef and ref.name == "Memory" and ref.base == AttrRef("MY")
    assert left.inner.right == Literal(1024) and left.inner.right != Literal(1024.0)
    assert node.right.left == AttrRef("Arch", absolute=True)  # type: ignore[attr-defined]
    assert children(node) == (node.left, node.right)
    assert node_of(ExprTree("a is b")) == Binary("=?=", AttrRef("a"), AttrRef("b"))


def test_operands_flattens_a_chain_and_its_parentheses() -> None:
    node = node_of(ExprTree("(a && (b && c)) && d || e"))
    assert [unparse(n) for n in operands(node, "||")] == ["(a && (b && c)) && d", "e"]
    first = operands(node, "||")[0]
    assert [unparse(n) for n in operands(first, "&&")] == ["a", "b", "c", "d"]
    long_chain = node_of(ExprTree(" && ".join(f"x{i}" for i in range(20_000))))
    assert len(operands(long_chain, "&&")) == 20_000


def test_unparse_is_what_repr_of_the_expression_prints() -> None:
    for text in ["a is b", 'strcat("x\\n", 1.5)', "{ 1,[ a = 1 ] }", "x ?: y", "l[0].b"]:
        expr = ExprTree(text)
        assert unparse(node_of(expr)) == repr(expr)


def test_node_of_and_expr_of_share_the_tree() -> None:
    expr = ExprTree("Memory * 2")
    assert expr_of(node_of(expr)) == expr
    assert node_of(expr_of(node_of(expr))) is node_of(expr)


def test_expr_of_with_a_scope_evaluates_there() -> None:
    ad = ClassAd("[Memory = 3]")
    node = node_of(ExprTree("Memory * 2"))
    assert expr_of(node, ad).eval() == 6
    assert expr_of(node).eval() is Value.Undefined
    assert expr_of(node).eval(ad) == 6


def test_to_node_is_what_setting_an_attribute_stores() -> None:
    for value in ["s", 3, 2.5, True, None, [1, "a"], {"a": 1}, ExprTree("x + 1")]:
        ad = ClassAd()
        ad["v"] = value
        assert entries(ad)["v"].node == to_node(value)
    assert to_node([1, 2]) == ListExpr((Literal(1), Literal(2)))
    assert to_node(ExprTree("x")) is node_of(ExprTree("x"))
    with pytest.raises(ClassAdValueError):
        to_node(2**64)


def test_evaluated_gives_the_value_with_list_items_evaluated() -> None:
    assert repr(evaluated(ExprTree("{1, 2 + 3}"))) == "{ 1,5 }"
    assert repr(ExprTree("{1, 2 + 3}").simplify()) == "{ 1,2 + 3 }"
    my, target = ClassAd("[A = 2]"), ClassAd("[B = 3]")
    assert repr(evaluated(ExprTree("A * TARGET.B"), my, target)) == "6"
    assert repr(evaluated(ExprTree("{A, {TARGET.B}}"), my, target)) == "{ 2,{ 3 } }"
    assert repr(evaluated(ExprTree("[a = 1 + 1]"))) == "[ a = 1 + 1 ]"
    assert repr(evaluated(ExprTree("nosuch"))) == "undefined"


def test_iter_ads_reads_each_syntax_with_offsets() -> None:
    text = "[a = 1]\n[b = 2]\n"
    assert [(dict(ad), end) for ad, end in iter_ads(text)] == [({"a": 1}, 7), ({"b": 2}, 15)]
    old = "A = 1\nB = 2\n\nC = 3\n"
    assert [dict(ad) for ad, _ in iter_ads(old, ParserType.Old)] == [{"A": 1, "B": 2}, {"C": 3}]
    assert [dict(ad) for ad, _ in iter_ads('{"a": 1} {"b": "x"}')] == [{"a": 1}, {"b": "x"}]


def test_iter_ads_names_the_file_of_a_syntax_error() -> None:
    with pytest.raises(ClassAdSyntaxError) as caught:
        list(iter_ads("A = 1\nB = = 2\n", origin="machines.ad"))
    assert "machines.ad" in str(caught.value)
    assert "line 2" in str(caught.value)


# -- analysis ----------------------------------------------------------------------------


def test_split_clauses_gives_the_top_level_conjuncts() -> None:
    node = node_of(ExprTree("(a > 1 && (b || c)) && d"))
    assert [unparse(n) for n in split_clauses(node)] == ["a > 1", "b || c", "d"]


def test_explain_match_shows_each_clause_and_the_values_it_saw() -> None:
    job = ClassAd(JOB)
    report = explain_match(job, ClassAd('[Memory = 1024; Requirements = true; Owner = "x"]'))
    assert not report.matched
    assert report.my_clauses == (
        ClauseResult(
            "TARGET.Memory >= RequestMemory",
            False,
            False,
            (("RequestMemory", "2048"), ("TARGET.Memory", "1024")),
        ),
    )
    assert [c.satisfied for c in report.target_clauses] == [True]
    report = explain_match(ClassAd(SLOT), job)
    assert report.matched and report.my_rank == 2.5
