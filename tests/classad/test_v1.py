"""Scripts written for the version-1 `classad` module run on `htgrid.classad`.

HTCondor 24.0's module (the oracle venv, .venv-oracle24) is the judge: the same probes
(v1_probes.py) and the 2013 blog post's job-router hook run there and here, and give
the same. Where version 1 and classad2 disagree, htgrid's choice is tested on its own
below (the module docstring of htgrid.classad says which).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

import classad2
import htcondor2  # noqa: F401 - HTCondor mode for classad2
import pytest

import htgrid.classad as classad

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ORACLE_PYTHON = ROOT / ".venv-oracle24" / "bin" / "python"
EXAMPLES = ROOT / "examples" / "classad"

# Where htgrid deliberately does more than version 1 did: what it gives instead.
_ACCEPTED_MORE = {
    # Version 1 could not index a list that a function returned; htgrid can.
    "getitem(evaluated list)": [["str", "c"], []],
}


def _need_oracle() -> None:
    if not ORACLE_PYTHON.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("the HTCondor 24.0 oracle venv is missing: run tests/submit/oracle24.sh")
        pytest.skip("no HTCondor 24.0 oracle venv (.venv-oracle24): run tests/submit/oracle24.sh")


def _run(
    python: str | Path, script: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    # The htgrid these tests import, whichever checkout that is.
    src = Path(classad.__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONWARNINGS="default")
    return subprocess.run(
        [str(python), str(script), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )


def test_the_version_1_api_gives_what_htcondor_24_gives() -> None:
    _need_oracle()
    theirs = json.loads(_run(ORACLE_PYTHON, HERE / "v1_probes.py", "oracle").stdout)
    ours = json.loads(_run(sys.executable, HERE / "v1_probes.py", "htgrid").stdout)
    assert ours.keys() == theirs.keys()
    differ = {name for name in theirs if ours[name] != theirs[name]}
    assert differ == set(_ACCEPTED_MORE), {n: (theirs[n], ours[n]) for n in differ}
    for name, given in _ACCEPTED_MORE.items():
        assert ours[name] == given


def _hook_output(python: str | Path, script: Path) -> tuple[dict[str, str], list[str]]:
    stdin = (EXAMPLES / "route_hook_v1_input.txt").read_text()
    done = _run(python, script, stdin=stdin)
    ad = classad2.parseOne(done.stdout, classad2.ParserType.Old)
    warned = [line for line in done.stderr.splitlines() if "Warning" in line]
    return {k.lower(): repr(ad.lookup(k)) for k in ad}, warned


def test_the_2013_blog_hook_runs_as_with_the_version_1_module(tmp_path: Path) -> None:
    _need_oracle()
    source = (EXAMPLES / "route_hook_v1.py").read_text()
    assert "import htgrid.classad as classad\n" in source
    assert "classad.parseOld(sys.stdin)" in source
    official = tmp_path / "route_hook_v1_classad.py"
    official.write_text(source.replace("import htgrid.classad as classad\n", "import classad\n"))

    ours, our_warnings = _hook_output(sys.executable, EXAMPLES / "route_hook_v1.py")
    theirs, their_warnings = _hook_output(ORACLE_PYTHON, official)

    assert ours == theirs
    assert ours["accountinggroup"] == '"cms.alice"'
    assert ours["gridresource"] == '"condor localhost localhost"'
    assert ours["universe"] == "5"
    # Both warn that parseOld is deprecated, on the hook's line.
    assert [w.split(": ", 1)[1] for w in our_warnings] == [
        w.split(": ", 1)[1] for w in their_warnings
    ]
    assert len(our_warnings) == 1


# -- htgrid's choices where version 1 and classad2 differ --------------------------


def test_equality_of_two_expressions_is_classad2s() -> None:
    a, b = classad.ExprTree("a + 1"), classad.ExprTree("a+1")
    assert (a == b) is True  # a bool, as classad2 (version 1 built `a + 1 == a + 1`)
    assert (a != classad.ExprTree("a")) is True
    assert {a: 1}[b] == 1
    assert (a == classad2.ExprTree("a + 1")) is False  # another library's object


def test_equality_with_a_value_is_version_1s_expression_with_classad2s_truth() -> None:
    built = classad.Attribute("Owner") == "alice"
    assert repr(built) == 'Owner == "alice"'
    assert built.eval(classad.ClassAd({"Owner": "alice"})) is True
    assert not built  # classad2: an expression is never equal to a str
    assert bool(classad.ExprTree("1") == 1) is bool(classad2.ExprTree("1") == 1)
    assert bool(classad.ExprTree("1") != 1) is bool(classad2.ExprTree("1") != 1)
    assert (classad.ExprTree("1") == None) is False  # noqa: E711 - what is tested
    assert (classad.ExprTree("1") == object()) is False


def test_undefined_and_error_are_false_as_conditions() -> None:
    ad = classad.ClassAd("[ x = y + 1; e = 1 / 0 ]")
    assert not ad.eval("x")  # version 1; classad2's IntEnum values were true
    assert not ad.eval("e")
    assert ad.eval("x") == classad2.Value.Undefined == classad.Value.Undefined


def test_an_expression_from_an_ad_evaluates_in_it_unless_given_another() -> None:
    ad = classad.ClassAd("[ a = 1; b = a + 1 ]")
    b = ad.lookup("b")
    # Version 1; classad2 evaluates it in no ad (undefined, which is also == 2).
    assert type(b.eval()) is int and b.eval() == 2
    assert type(ad["b"].simplify().eval()) is int
    assert classad2.ClassAd("[ a = 1; b = a + 1 ]").lookup("b").eval() is classad2.Value.Undefined
    assert b.eval(classad.ClassAd({"a": 10})) == 11
    assert classad.ExprTree("a + 1").eval() is classad.Value.Undefined


def test_parse_next_past_the_last_ad_is_none_as_in_classad2() -> None:
    # Version 1 raised StopIteration: no answer suits both kinds of loop.
    assert classad.parseNext("") is None
    assert classad2.parseNext("") is None


def test_parse_old_takes_blank_lines_and_comments_version_1_refused() -> None:
    with pytest.warns(DeprecationWarning, match="parseOld is deprecated"):
        ad = classad.parseOld("# job\nA = 1\n\n// note\nB = A + 1\n")
    assert ad.eval("B") == 2


def test_the_deprecated_parsers_warn_as_version_1_did() -> None:
    with pytest.warns(DeprecationWarning, match=r"parse\(string\) is deprecated"):
        classad.parse("[ a = 1 ]")
    with pytest.warns(DeprecationWarning, match="parseOldAds is deprecated"):
        assert [ad["a"] for ad in classad.parseOldAds(["a = 1\n", "\n", "a = 2\n"])] == [1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        classad.parseOne("a = 1\n")  # the replacements do not warn
        list(classad.parseAds("[ a = 1 ]"))


def test_built_expressions_print_what_they_mean() -> None:
    # Version 1 printed `(a + b) * 2` as `a + b * 2`, which parses as something else.
    ad = classad.ClassAd({"a": 1, "b": 2, "c": 3})
    for built, text in [
        (classad.ExprTree("a + b") * 2, "(a + b) * 2"),
        (classad.Attribute("a") - classad.ExprTree("b - c"), "a - (b - c)"),
        (classad.ExprTree("a - b") - classad.Attribute("c"), "a - b - c"),
        (classad.Attribute("a").and_(classad.ExprTree("b || c")), "a && (b || c)"),
        (classad.ExprTree("a ? b : c") + 1, "(a ? b : c) + 1"),
    ]:
        assert repr(built) == text
        assert classad.ExprTree(text).eval(ad) == built.eval(ad)


def test_a_chain_built_term_by_term_is_as_long_as_the_script_makes_it() -> None:
    expr = classad.Attribute("Cpus") >= 1
    for i in range(8000):
        expr = expr.and_(classad.Attribute("Memory") > i)
    ad = classad.ClassAd({"Cpus": 4, "Memory": 9000})
    assert expr.eval(ad) is True
    assert classad.ExprTree(repr(expr)).eval(ad) is True


def test_a_built_expression_too_deep_to_parse_back_is_refused() -> None:
    expr = classad.Attribute("x")
    with pytest.raises(classad.ClassAdValueError, match="nested too deeply"):
        for _ in range(1000):
            expr = 1 - expr  # each step puts the previous one in parentheses
    assert classad.ExprTree(repr(expr)).sameAs(expr)


def test_a_syntax_error_is_caught_as_every_era_caught_it() -> None:
    for caught in (
        classad.ClassAdParseError,
        classad.ClassAdException,
        ValueError,
        SyntaxError,
        RuntimeError,
    ):
        with pytest.raises(caught):
            classad.ExprTree("a +")
    try:
        classad.ClassAd("[ a = ]")
    except SyntaxError as err:
        printed = "".join(traceback.format_exception_only(type(err), err))
    assert "line 1, column 7: expected an expression but found ']'" in printed
    assert "^" in printed


def test_functions_registered_in_python_are_called_from_expressions() -> None:
    calls: list[Any] = []

    def record(*args: Any) -> Any:
        calls.append(args)
        return len(args)

    classad.register(record, "recordCall")
    ad = classad.ClassAd('[ n = recordCall(1, "a", {1, 2}, x + 1); x = 2 ]')
    assert ad.eval("n") == 4
    (args,) = calls
    assert args[:3] == (1, "a", [1, 2])
    assert isinstance(args[3], classad.ExprTree) and repr(args[3]) == "x + 1"
    # An expression parsed and evaluated before the function existed finds it later.
    early = classad.ExprTree("laterFunction(2)")
    assert early.eval() is classad.Value.Error
    classad.register(lambda x: x * 10, "laterFunction")
    assert early.eval() == 20
    with pytest.raises(classad.ClassAdOSError):
        classad.registerLibrary("/nonexistent/libfuncs.so")
