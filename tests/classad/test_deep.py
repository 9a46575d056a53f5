"""Long chains and deep nesting: any expression that parses also evaluates, prints,
flattens, compares, copies and is stored, and whatever nests too deeply is refused at
the door with the same limit wherever it enters.

classad2 (25.14.1) for comparison: a chain of about 400 operators and up evaluates to a
failure there ("failed to evaluate expression"), and attributes followed into each other
fail past about 150; a 20,000-deep `a.a.a` gives Error. Its parser refuses the deep
nesting htgrid refuses, at the same depths. It reads JSON of any depth (1,000-deep
arrays come back as a list it cannot parse again; 100,000 crash the process).
"""

from __future__ import annotations

import copy
import enum
import json
import pickle
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import classad2
import htcondor2  # noqa: F401 - HTCondor mode for classad2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import htgrid.classad as classad
from htgrid.classad.analysis import explain_match
from htgrid.errors import ClassAdSyntaxError, ClassAdValueError
from htgrid.negotiator._signature import RefCache
from htgrid.queue import Identity, JobQueue
from htgrid.queue._query import compile_constraint
from htgrid.submit import SubmitDescription, SubmitError

PLUS = " + ".join(["1"] * 50_000)
AND = " && ".join(["true"] * 50_000)
OR = " || ".join(["false"] * 50_000)
SELECT = ".".join(["a"] * 20_000)
LIMIT = "more than 500 levels"


def _ops(expr: classad.ExprTree, ad: classad.ClassAd) -> dict[str, Callable[[], Any]]:
    """Every operation on an expression, each giving something comparable."""
    ad = copy.copy(ad)
    ad["Expr"] = expr
    ad["Requirements"] = expr
    twin = classad.ExprTree(repr(expr) + " ")  # parsed apart, not the cached tree
    machine = classad.ClassAd({"Requirements": True})
    return {
        "eval": lambda: expr.eval(ad),
        "ad.eval": lambda: ad.eval("Expr"),
        "simplify": lambda: expr.simplify(ad).eval(),
        "repr parses back": lambda: classad.ExprTree(repr(expr)).eval(ad),
        "str parses back": lambda: classad.ExprTree(str(expr)).eval(ad),
        "repr of the ad parses back": lambda: classad.ClassAd(repr(ad)).eval("Expr"),
        "str of the ad parses back": lambda: classad.ClassAd(str(ad)).eval("Expr"),
        "printOld parses back": lambda: classad.parseOne(
            ad.printOld(), classad.ParserType.Old
        ).eval("Expr"),
        "printJson parses back": lambda: classad.parseOne(
            ad.printJson(), classad.ParserType.JSON
        ).eval("Expr"),
        "flatten": lambda: _value(ad.flatten(expr), ad),
        "externalRefs": lambda: ad.externalRefs(expr) and True,
        "internalRefs": lambda: ad.internalRefs(expr) and True,
        "==": lambda: expr == twin,
        "hash": lambda: hash(expr) == hash(twin),
        "copy": lambda: copy.copy(ad).eval("Expr"),
        "deepcopy": lambda: copy.deepcopy(ad).eval("Expr"),
        "pickle": lambda: pickle.loads(pickle.dumps(ad)).eval("Expr"),
        "pickle expr": lambda: pickle.loads(pickle.dumps(expr)).eval(ad),
        "matches": lambda: machine.matches(ad) or True,
        "why it matches": lambda: explain_match(ad, machine).my_clauses and True,
        "queue constraint": lambda: compile_constraint(repr(expr)).matches(ad) or True,
        "negotiator grouping": lambda: RefCache().key(expr._node) is not None,
        "unparse()": lambda: classad.ExprTree(classad.ExprTree("unparse(Expr)").eval(ad)).eval(ad),
        "eval()": lambda: classad.ExprTree("eval(unparse(Expr))").eval(ad),
        "unresolved()": lambda: classad.ExprTree("unresolved(Expr)").eval(ad) or True,
    }


def _value(flat: Any, ad: classad.ClassAd) -> Any:
    return flat.eval(ad) if isinstance(flat, classad.ExprTree) else flat


_EMPTY = classad.ClassAd()
_CHAINS: list[tuple[str, str, classad.ClassAd, Any]] = [
    ("50,000-term 1 + 1 + ...", PLUS, _EMPTY, 50_000),
    ("50,000-term true && ...", AND, _EMPTY, True),
    ("50,000-term false || ...", OR, _EMPTY, False),
    ("20,000-deep a.a.a...", SELECT, _EMPTY, classad.Value.Undefined),
    (
        "a.a.a... reaching a value",
        SELECT + ".x",
        classad.ClassAd({"a": classad.ExprTree("MY"), "x": 7}),
        7,
    ),
    (
        "x[0][0]...",
        "x" + "[0]" * 20_000 + "[1]",
        classad.ClassAd({"x": classad.ExprTree("{ x, 5 }")}),
        5,
    ),
    (
        "8,000 terms of mixed operators",
        " + ".join(["2 * 3 - 5"] * 8000) + " == 8000 && " + " && ".join(["y < 2"] * 8000),
        classad.ClassAd({"y": 1}),
        True,
    ),
]


@pytest.mark.parametrize(("name", "text", "ad", "want"), _CHAINS, ids=[c[0] for c in _CHAINS])
def test_a_long_chain_works_in_every_operation(
    name: str, text: str, ad: classad.ClassAd, want: Any
) -> None:
    expr = classad.ExprTree(text)
    results = {op: fn() for op, fn in _ops(expr, ad).items()}
    for op in ("eval", "ad.eval", "simplify", "repr parses back", "str parses back"):
        assert results[op] == want, op
    for op in ("repr of the ad parses back", "printOld parses back", "printJson parses back"):
        assert results[op] == want, op
    for op in ("copy", "deepcopy", "pickle", "pickle expr", "eval()", "unparse()"):
        assert results[op] == want, op
    assert results["=="] is True
    assert results["hash"] is True


def test_a_long_chain_prints_as_written() -> None:
    assert repr(classad.ExprTree(PLUS)) == PLUS
    assert repr(classad.ExprTree(SELECT)) == SELECT
    expr = classad.ExprTree("x" + "[0].a" * 5000)
    assert repr(expr) == "x" + "[0].a" * 5000
    assert classad.ClassAd({"e": expr}).printOld() == "e = x" + "[0].a" * 5000 + "\n"


def test_a_long_chain_flattens_what_the_ad_knows() -> None:
    ad = classad.ClassAd({"k": 1})
    flat = ad.flatten(classad.ExprTree(" + ".join(["k"] * 20_000) + " + z"))
    assert repr(flat) == "20000 + z"
    flat = ad.flatten(classad.ExprTree(" && ".join(["k == 1"] * 20_000) + " && z"))
    assert repr(flat) == "z"
    assert ad.flatten(classad.ExprTree(" && ".join(["k == 1"] * 20_000))) is True


def test_a_long_chain_names_its_references() -> None:
    ad = classad.ClassAd({"k": 1, "a": classad.ExprTree("MY")})
    expr = classad.ExprTree(" + ".join(f"k + v{i % 3}" for i in range(20_000)))
    assert ad.externalRefs(expr) == ["v0", "v1", "v2"]
    assert ad.internalRefs(expr) == ["k"]
    assert ad.externalRefs(classad.ExprTree(SELECT + ".q")) == ["q"]
    assert ad.internalRefs(classad.ExprTree(SELECT + ".k")) == ["a", "k"]


def test_a_long_chain_is_stored_in_the_queue_and_read_back(tmp_path: Path) -> None:
    job = classad.ClassAd({"Cmd": "/bin/true", "PeriodicHold": classad.ExprTree(AND)})
    with JobQueue.open(tmp_path, fsync=False) as queue:
        cluster = queue.submit(Identity("alice"), job)
    with JobQueue.open(tmp_path, fsync=False) as queue:
        stored = queue.get(f"{cluster}.0")
    assert stored.lookup("PeriodicHold") == classad.ExprTree(AND)
    assert stored.eval("PeriodicHold") is True


@pytest.mark.parametrize(
    ("chain", "want"),
    [
        ("true && undefined && false", False),  # undefined does not hide a false
        ("true && undefined && true", classad.Value.Undefined),
        ("false && error && undefined", False),  # nothing after a false is evaluated
        ("undefined && error && false", classad.Value.Error),
        ("true && 1 && 2.5", True),
        ('true && "x"', classad.Value.Error),
        ("false || undefined || true", True),
        ("true || error", True),
        ("undefined || false || undefined", classad.Value.Undefined),
        ("0 || 0.0 || 3", True),
        ("1 - 2 - 3 + 4", 0),
        ("10 / 3 * 3 % 4", 1),
        ("1 << 2 << 3 >> 1", 16),
        ('"a" == "A" == true', True),
    ],
)
def test_chains_keep_the_non_strict_rules(chain: str, want: Any) -> None:
    assert classad.ExprTree(chain).eval() == want
    assert classad2.ExprTree(chain).eval() == want


@pytest.mark.parametrize(
    "text",
    [
        " + ".join(["1"] * 350),
        " - ".join(["1"] * 350),
        " && ".join(["true"] * 349 + ["undefined"]),
        " && ".join(["undefined"] * 349 + ["false"]),
        " || ".join(["false"] * 349 + ["error"]),
        ".".join(["a"] * 350),
        ".".join(["a"] * 350) + ".x",
    ],
    ids=["plus", "minus", "and", "and-undefined", "or-error", "select", "select-value"],
)
def test_chains_classad2_can_evaluate_give_the_same_value(text: str) -> None:
    ours = classad.ExprTree(text).eval(classad.ClassAd({"a": classad.ExprTree("MY"), "x": 7}))
    theirs = classad2.ExprTree(text).eval(classad2.ClassAd({"a": classad2.ExprTree("MY"), "x": 7}))
    assert _canon(ours) == _canon(theirs)


_LITERALS = st.sampled_from(
    ["true", "false", "undefined", "error", "0", "1", "2", "-3", "0.5", '"a"', '"A"', "x", "y"]
)
_OPS = st.sampled_from(["&&", "||", "+", "-", "*", "/", "%", "==", "!=", "<", ">=", "=?=", "=!="])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_OPS, _LITERALS), min_size=1, max_size=12), _LITERALS)
def test_random_short_chains_evaluate_as_in_classad2(
    steps: list[tuple[str, str]], first: str
) -> None:
    text = first + "".join(f" {op} {lit}" for op, lit in steps)
    ours = classad.ExprTree(text).eval(classad.ClassAd({"x": 4, "y": classad.ExprTree("z")}))
    theirs = classad2.ExprTree(text).eval(classad2.ClassAd({"x": 4, "y": classad2.ExprTree("z")}))
    assert _canon(ours) == _canon(theirs), text


def _canon(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.name
    return (type(v).__name__, repr(v))


# -- the nesting limit --------------------------------------------------------------

# Each form of nesting, as deep as the parser takes it (a bracket counts 3 of the 500
# levels, a unary operator, ?: or ternary branch 1; an expression starts at 3).
_DEEPEST: list[tuple[str, Callable[[int], str], int]] = [
    ("parentheses", lambda n: "(" * n + "1" + ")" * n, 165),
    ("lists", lambda n: "{" * n + "1" + "}" * n, 165),
    ("nested ads", lambda n: "[a = " * n + "1" + "]" * n, 165),
    ("calls", lambda n: "int(" * n + "1" + ")" * n, 165),
    ("subscripts", lambda n: "x[" * n + "0" + "]" * n, 165),
    ("unary minus", lambda n: "- " * n + "x", 497),
    ("not", lambda n: "!" * n + "x", 497),
    ("ternaries", lambda n: "x ? " * n + "1" + " : 2" * n, 497),
    ("?:", lambda n: " ?: ".join(["x"] * (n + 1)), 497),
]


@pytest.mark.parametrize(("form", "make", "deepest"), _DEEPEST, ids=[d[0] for d in _DEEPEST])
def test_the_deepest_nesting_parsed_works_in_every_operation(
    form: str, make: Callable[[int], str], deepest: int
) -> None:
    text = make(deepest)
    classad2.ExprTree(text)  # the official parser takes it too
    expr = classad.ExprTree(text)
    ad = classad.ClassAd({"x": 1})
    want = expr.eval(ad)
    results = {op: fn() for op, fn in _ops(expr, ad).items()}
    for op in ("repr parses back", "str parses back", "repr of the ad parses back"):
        assert results[op] == want, op
    for op in ("printOld parses back", "printJson parses back", "pickle", "copy", "eval()"):
        assert results[op] == want, op
    # The same depth in an ad, in old syntax and from JSON.
    assert classad.ClassAd(f"[ e = {text} ]").lookup("e") == expr
    assert classad.parseOne(f"e = {text}\n", classad.ParserType.Old).lookup("e") == expr
    in_json = json.dumps({"e": "\\/Expr(" + text + ")\\/"}).replace("\\\\/", "\\/")
    assert classad.parseOne(in_json, classad.ParserType.JSON).lookup("e") == expr


@pytest.mark.parametrize(("form", "make", "deepest"), _DEEPEST, ids=[d[0] for d in _DEEPEST])
def test_one_level_more_is_refused_with_the_limit_and_the_place(
    form: str, make: Callable[[int], str], deepest: int
) -> None:
    text = make(deepest + 1)
    with pytest.raises(classad2.ClassAdException):
        classad2.ExprTree(text)  # refused by the official parser too
    for parse in (
        lambda: classad.ExprTree(text),
        lambda: classad.ClassAd(f"[ e = {text} ]"),
        lambda: classad.parseOne(f"e = {text}\n", classad.ParserType.Old),
    ):
        with pytest.raises(ClassAdSyntaxError, match=LIMIT) as info:
            parse()
        assert info.value.offset > 0  # where the limit was passed, not the start


def test_json_nests_as_deep_as_brackets_do() -> None:
    def nested(n: int) -> str:
        return '{"e": ' + "[" * n + "1" + "]" * n + "}"

    ad = classad.parseOne(nested(165), classad.ParserType.JSON)
    assert classad.ExprTree(repr(ad.lookup("e"))) == ad.lookup("e")
    with pytest.raises(ClassAdSyntaxError, match=LIMIT):
        classad.parseOne(nested(166), classad.ParserType.JSON)
    with pytest.raises(ClassAdSyntaxError, match=LIMIT):
        classad.parseOne(nested(100_000), classad.ParserType.JSON)
    # An expression inside JSON arrays starts as deep as it stands: alone it would parse.
    inner = "(" * 164 + "1" + ")" * 164
    classad.ExprTree(inner)
    text = '{"e": [["\\/Expr(' + inner + ')\\/"]]}'
    with pytest.raises(ClassAdSyntaxError, match=LIMIT):
        classad.parseOne(text, classad.ParserType.JSON)
    assert classad.parseOne(text.replace("[[", "[").replace("]]", "]"), classad.ParserType.JSON)


def test_python_values_nest_as_deep_as_brackets_do() -> None:
    def nested(n: int) -> Any:
        value: Any = 1
        for _ in range(n):
            value = [value]
        return value

    ad = classad.ClassAd()
    ad["ok"] = nested(165)
    assert classad.ClassAd(repr(ad)) == ad
    for too_deep in (nested(166), nested(100_000), {"a": nested(165)}):
        with pytest.raises(ClassAdValueError, match=LIMIT):
            ad["bad"] = too_deep
    inner = classad.ClassAd({"deep": classad.ExprTree("(" * 165 + "1" + ")" * 165)})
    with pytest.raises(ClassAdValueError, match=LIMIT):
        ad["bad"] = inner  # one bracket more than its attribute alone
    with pytest.raises(ClassAdValueError, match=LIMIT):
        classad.ExprTree(inner)
    assert "bad" not in ad


def test_the_submit_language_takes_the_same_chains_and_depths(tmp_path: Path) -> None:
    def job_ad(requirements: str) -> classad.ClassAd:
        text = f"executable = /bin/true\nrequirements = {requirements}\n+Policy = {AND}\nqueue\n"
        desc = SubmitDescription.from_text(text, cwd=str(tmp_path))
        (job,) = desc.jobs(1, owner="alice", qdate=1_700_000_000)
        return job.ad

    # Submit puts the user's requirements in parentheses of its own, as condor_submit.
    deepest = "(" * 164 + "TARGET.Memory > 0" + ")" * 164
    ad = job_ad(deepest + " && " + " && ".join(["true"] * 8000))
    assert ad.eval("Policy") is True
    assert classad.ExprTree(repr(ad.lookup("Requirements"))) == ad.lookup("Requirements")
    with pytest.raises(SubmitError, match="Parse error"):
        job_ad("(" + deepest + ")")


# -- attributes followed into each other ---------------------------------------------


def test_a_long_chain_of_attributes_is_an_error_value_not_a_crash() -> None:
    def chain(n: int) -> classad.ClassAd:
        ad = classad.ClassAd({f"a{i}": classad.ExprTree(f"a{i + 1} + 1") for i in range(n)})
        ad[f"a{n}"] = 0
        return ad

    assert chain(900).eval("a0") == 900  # classad2 fails to evaluate past ~150
    long = chain(20_000)
    assert long.eval("a0") is classad.Value.Error
    assert long.flatten(classad.ExprTree("a0 + z")) is not None
    assert long.externalRefs(classad.ExprTree("a0")) == [""]
    assert len(long.internalRefs(classad.ExprTree("a0"))) == 20_001


def test_every_operation_works_in_a_thread() -> None:
    # Daemons evaluate in worker threads, whose stacks are no bigger than the main one.
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _name, text, ad, want in _CHAINS[:4]:
                expr = classad.ExprTree(text)
                for fn in _ops(expr, ad).values():
                    fn()
                assert expr.eval(ad) == want
        except BaseException as err:  # reported below, in the test's thread
            failures.append(err)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert not failures
