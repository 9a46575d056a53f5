"""Bad ClassAd text gets a clear error, and nothing but that error, whatever the input."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import htgrid.classad as classad
from htgrid import HTGridError
from htgrid.errors import ClassAdSyntaxError


def test_syntax_error_names_line_and_column_with_a_caret() -> None:
    with pytest.raises(ClassAdSyntaxError) as info:
        classad.ClassAd("[\n  a = 1;\n  b = 2 +;\n]")
    err = info.value
    assert (err.line, err.column) == (3, 10)
    assert "line 3, column 10: expected an expression but found ';'" in str(err)
    assert str(err).splitlines()[-2:] == ["      b = 2 +;", "             ^"]


def test_syntax_error_is_the_project_error_a_classad_exception_and_a_value_error() -> None:
    with pytest.raises(ClassAdSyntaxError) as info:
        classad.ExprTree("1 +")
    assert isinstance(info.value, HTGridError)
    assert isinstance(info.value, classad.ClassAdException)
    assert isinstance(info.value, ValueError)


def test_old_syntax_file_error_names_the_line() -> None:
    text = "A = 1\nB = 2\n\nC = 3\nD = (4\n"
    with pytest.raises(ClassAdSyntaxError) as info:
        list(classad.parseAds(text, classad.ParserType.Old))
    assert info.value.line == 5


@pytest.mark.parametrize(
    "text",
    ["010", "0x1F", "5.", "1.e3", '"abc', "a = ", "[a = 1, b = 2]", "{1,2,}", "f(,)", "1 /* x"],
)
def test_refused_literals_and_forms(text: str) -> None:
    with pytest.raises(ClassAdSyntaxError):
        classad.ExprTree(text)


def test_deep_nesting_is_refused_not_a_crash() -> None:
    classad.ExprTree("(" * 165 + "1" + ")" * 165)
    with pytest.raises(ClassAdSyntaxError, match="nested too deeply"):
        classad.ExprTree("(" * 100_000 + "1" + ")" * 100_000)
    with pytest.raises(ClassAdSyntaxError):
        classad.ExprTree("!" * 100_000 + "1")


def test_deep_attribute_chains_evaluate_to_error_not_a_crash() -> None:
    n = 20_000
    ad = classad.ClassAd({f"a{i}": classad.ExprTree(f"a{i + 1} + 1") for i in range(n)})
    ad[f"a{n}"] = 0
    assert ad.eval("a0") in (n, classad.Value.Error)
    assert classad.ExprTree("a" + ".b" * 5000).eval() in (
        classad.Value.Undefined,
        classad.Value.Error,
    )


_ALPHABET = st.sampled_from(
    [
        *list("abcxyzAB019_ .,;:?!=<>+-*/%&|^~()[]{}\"'\\\n\t"),
        "&&",
        "||",
        "=?=",
        "=!=",
        " is ",
        " isnt ",
        "true",
        "undefined",
        "error",
        "/*",
        "//",
    ]
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ALPHABET, max_size=40).map("".join))
def test_any_text_parses_or_raises_the_syntax_error_only(text: str) -> None:
    for parse in (classad.ExprTree, classad.ClassAd):
        try:
            result = parse(text)
        except ClassAdSyntaxError:
            continue
        # What parses must also print and evaluate without raising.
        repr(result)
        str(result)
        if isinstance(result, classad.ExprTree):
            result.eval(classad.ClassAd("[a = 1; b = {1, 2}; c = [d = 3]]"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_unicode_text_parses_or_raises_the_syntax_error_only(text: str) -> None:
    for parser in (classad.ParserType.Old, classad.ParserType.New, classad.ParserType.JSON):
        with contextlib.suppress(ClassAdSyntaxError):
            list(classad.parseAds(text, parser))
