"""The Python API of classad2, as both modules must present it.

Part 1 ports htcondor/htcondor src/condor_tests/test_python_bindings_classad.py
(the classad2 binding tests): every test takes the module under test as the
`mod` fixture, parametrized over [classad2, htgrid.classad], and asserts the
facts the HTCondor test asserts.  The tests HTCondor marks xfail because
classad2 lacks the feature (register(), Attribute, Function, int()/float() of an
ExprTree) are not ported; pickling works in classad2 25.x and is asserted.

Part 2 is differential: small API scenarios run through both modules and their
canonical results (see _support) must be equal.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import pickle
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from . import _deliberate, _support

os.environ["TZ"] = "UTC"
time.tzset()

ORACLE = _support.load_oracle()
OURS = _support.load_ours()  # fails this module while htgrid.classad cannot be imported


@pytest.fixture(params=["classad2", "htgrid"])
def mod(request: pytest.FixtureRequest) -> ModuleType:
    return ORACLE if request.param == "classad2" else OURS


@pytest.fixture
def ad(mod: ModuleType) -> Any:
    return mod.ClassAd()


# ---------------------------------------------------------------------------
# Part 1: test_python_bindings_classad.py
# ---------------------------------------------------------------------------

EQUAL_ADS: list[Callable[[ModuleType], tuple[Any, Any]]] = [
    lambda m: (m.ClassAd(), m.ClassAd()),
    lambda m: (m.ClassAd({"foo": "bar"}), m.ClassAd({"foo": "bar"})),
]

UNEQUAL_ADS: list[Callable[[ModuleType], tuple[Any, Any]]] = [
    lambda m: (m.ClassAd(), m.ClassAd({"foo": "bar"})),
    lambda m: (m.ClassAd(), None),
    lambda m: (m.ClassAd(), {}),
    lambda m: (m.ClassAd(), []),
    lambda m: (m.ClassAd({"foo": "2"}), m.ClassAd({"foo": 2})),
    lambda m: (m.ClassAd({"foo": m.ExprTree("1 + 1")}), m.ClassAd({"foo": 2})),
    lambda m: ("foo", m.ClassAd({"foo": "bar"})),
    lambda m: ({"foo": "bar"}, m.ClassAd({"foo": "bar"})),
    lambda m: (1, m.ClassAd({"foo": "bar"})),
    lambda m: (1.2, m.ClassAd({"foo": "bar"})),
    lambda m: (True, m.ClassAd({"foo": "bar"})),
    lambda m: (False, m.ClassAd({"foo": "bar"})),
    lambda m: (None, m.ClassAd({"foo": "bar"})),
    lambda m: (None, m.ClassAd({"foo": m.Value.Undefined})),
]


@pytest.mark.parametrize("make", EQUAL_ADS)
def test_equality(mod: ModuleType, make: Callable[[ModuleType], tuple[Any, Any]]) -> None:
    a, b = make(mod)
    assert a == b
    assert b == a
    assert (a != b) is False
    assert (b != a) is False


@pytest.mark.parametrize("make", UNEQUAL_ADS)
def test_inequality(mod: ModuleType, make: Callable[[ModuleType], tuple[Any, Any]]) -> None:
    a, b = make(mod)
    assert (a == b) is False
    assert (b == a) is False
    assert a != b
    assert b != a


@pytest.mark.parametrize("arg", ['[foo = "1"; bar = 2]', {"foo": "1", "bar": 2}])
def test_constructor(mod: ModuleType, arg: Any) -> None:
    ad = mod.ClassAd(arg)
    assert ad["foo"] == "1"
    assert ad["bar"] == 2


def test_raise_key_error_for_missing_key(ad: Any) -> None:
    with pytest.raises(KeyError):
        ad["missing"]


ROUNDTRIP_VALUES: list[Callable[[ModuleType], Any]] = [
    lambda m: 4,
    lambda m: "2 + 2",
    lambda m: [1, 2, 3],
    lambda m: {"a": 1, "b": "wiz"},
    lambda m: {"outer": ["inner"]},
    lambda m: True,
    lambda m: False,
    lambda m: m.Value.Undefined,
]


@pytest.mark.parametrize("make", ROUNDTRIP_VALUES)
def test_value_roundtrip_through_assignment(
    mod: ModuleType, ad: Any, make: Callable[[ModuleType], Any]
) -> None:
    value = make(mod)
    ad["key"] = value
    if isinstance(value, dict):
        assert dict(ad["key"]) == value
    else:
        assert ad["key"] == value


@pytest.mark.parametrize("make", [lambda m: 1, lambda m: "2", lambda m: m.ExprTree("2 + 2")])
def test_round_trip_through_pickle(
    mod: ModuleType, ad: Any, make: Callable[[ModuleType], Any]
) -> None:
    ad["key"] = make(mod)
    loaded = pickle.loads(pickle.dumps(ad))
    assert ad == loaded


def test_exprtree_repr(mod: ModuleType, ad: Any) -> None:
    ad["key"] = mod.ExprTree("2 + 3")
    assert repr(ad["key"]) == "2 + 3"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2 + 3", 5),
        ("2 * 3", 6),
        ("2 + 3 == 5", True),
        ("2 + 3 == 6", False),
        (r'regexps("foo (bar)", "foo bar", "\\1")', "bar"),
        ("a", "Undefined"),
        ("a + b", "Undefined"),
    ],
)
def test_exprtree_eval(mod: ModuleType, ad: Any, expression: str, expected: Any) -> None:
    ad["key"] = mod.ExprTree(expression)
    if expected == "Undefined":
        expected = mod.Value.Undefined
    assert ad["key"].eval() == expected


def test_exprtree_eval_with_references(mod: ModuleType, ad: Any) -> None:
    ad["ref"] = 1
    ad["key"] = mod.ExprTree("2 + ref")
    assert ad["key"].eval(ad) == 3


LOOKUP_VALUES: list[Callable[[ModuleType], Any]] = [
    lambda m: 1,
    lambda m: "2",
    lambda m: True,
    lambda m: False,
    lambda m: [1, 2, 3],
    lambda m: {"a": 1, "b": "wiz"},
    lambda m: {"outer": ["inner"]},
    lambda m: m.Value.Undefined,
    lambda m: m.Value.Error,
]


@pytest.mark.parametrize("make", LOOKUP_VALUES)
def test_lookup_always_returns_an_exprtree(
    mod: ModuleType, ad: Any, make: Callable[[ModuleType], Any]
) -> None:
    ad["key"] = make(mod)
    assert isinstance(ad.lookup("key"), mod.ExprTree)


def test_get_with_present_key(ad: Any) -> None:
    ad["key"] = 1
    assert ad.get("key", 0) == 1


def test_get_with_missing_key(ad: Any) -> None:
    assert ad.get("key", 0) == 0


def test_get_with_missing_key_and_no_default(ad: Any) -> None:
    assert ad.get("key") is None


def test_setdefault_on_present_key(ad: Any) -> None:
    ad["key"] = "bar"
    assert ad.setdefault("key", "foo") == "bar"


def test_setdefault_on_missing_key(ad: Any) -> None:
    assert ad.setdefault("key", "foo") == "foo"


@pytest.mark.parametrize(
    "make", [lambda m: {"key": 1}, lambda m: [("key", 1)], lambda m: m.ClassAd({"key": 1})]
)
def test_update_from_blank(mod: ModuleType, ad: Any, make: Callable[[ModuleType], Any]) -> None:
    ad.update(make(mod))
    assert ad["key"] == 1


def test_update_overwrites_existing_values(ad: Any) -> None:
    ad["key"] = "foo"
    ad.update({"key": "bar"})
    assert ad["key"] == "bar"


def test_update_from_an_ad_keeps_expressions_and_spellings(mod: ModuleType) -> None:
    ad = mod.ClassAd('[ Key = 1; other = x + 1; Kept = "s" ]')
    ad.update(mod.ClassAd("[ KEY = y * 2; Other = { 1, [ a = b ] }; New = undefined ]"))
    # The names already there keep their spelling; the values are the other ad's, as
    # written (an expression stays one).
    assert {name: repr(ad.lookup(name)) for name in ad} == {
        "Key": "y * 2",
        "other": "{ 1,[ a = b ] }",
        "Kept": '"s"',
        "New": "undefined",
    }
    assert ad.eval("Key") == mod.Value.Undefined


def test_abstime_evals_to_datetime(mod: ModuleType) -> None:
    assert mod.ExprTree('absTime("2013-11-12T07:50:23+0000")').eval() == datetime.datetime(
        year=2013,
        month=11,
        day=12,
        hour=7,
        minute=50,
        second=23,
        tzinfo=datetime.UTC,
    )


def test_reltime(mod: ModuleType) -> None:
    assert mod.ExprTree("relTime(5)").eval() == 5


@pytest.mark.parametrize(("text", "expected"), [("foo", '"foo"'), ('"foo', r'"\"foo"')])
def test_quote(mod: ModuleType, text: str, expected: str) -> None:
    assert mod.quote(text) == expected


@pytest.mark.parametrize("text", ["foo", '"foo', r"\"foo"])
def test_quote_unquote_is_symmetric(mod: ModuleType, text: str) -> None:
    assert mod.unquote(mod.quote(text)) == text


def test_evaluate_in_context_of_ad_with_matching_key(mod: ModuleType, ad: Any) -> None:
    expr = mod.ExprTree("foo")
    ad["foo"] = "bar"
    assert expr.eval(ad) == "bar"


def test_evaluate_in_context_of_ad_without_matching_key(mod: ModuleType, ad: Any) -> None:
    expr = mod.ExprTree("foo")
    ad["no"] = "bar"
    assert expr.eval(ad) == mod.Value.Undefined


@pytest.mark.parametrize(
    ("left", "right", "matches"),
    [
        ("[foo = 3]", "[requirements = other.foo == 3]", True),
        ("[requirements = other.foo == 3]", "[foo = 3]", False),
    ],
)
def test_matches(mod: ModuleType, left: str, right: str, matches: bool) -> None:
    assert mod.ClassAd(left).matches(mod.ClassAd(right)) is matches


@pytest.mark.parametrize(
    ("left", "right", "matches"),
    [
        ("[foo = 3]", "[requirements = other.foo == 3]", False),
        ("[requirements = other.foo == 3]", "[foo = 3]", False),
        ("[requirements = other.foo == 3]", "[requirements = other.bar == 1; foo = 3]", False),
        (
            "[requirements = other.foo == 3; bar = 1]",
            "[requirements = other.bar == 1; foo = 3]",
            True,
        ),
    ],
)
def test_symmetric_match(mod: ModuleType, left: str, right: str, matches: bool) -> None:
    assert mod.ClassAd(left).symmetricMatch(mod.ClassAd(right)) is matches


def test_internal_refs(mod: ModuleType, ad: Any) -> None:
    ad["bar"] = 2
    assert ad.internalRefs(mod.ExprTree("foo =?= bar")) == ["bar"]


def test_external_refs(mod: ModuleType, ad: Any) -> None:
    ad["bar"] = 2
    assert ad.externalRefs(mod.ExprTree("foo =?= bar")) == ["foo"]


AD_STRINGS = {
    "old-style": """
        foo = "bar"

        foo = "wiz"

        /* this is a comment */
        """,
    "new-style": """
        [
        foo = "bar";
        ]
        [
        foo = "wiz";
        ]
        /* this is a comment */
        """,
}


@pytest.fixture(params=sorted(AD_STRINGS))
def ad_string(request: pytest.FixtureRequest) -> str:
    return textwrap.dedent(AD_STRINGS[request.param]).strip()


@pytest.fixture
def ad_file(tmp_path: Path, ad_string: str) -> Path:
    path = tmp_path / "ad"
    path.write_text(ad_string)
    return path


def test_parse_ads_from_string(mod: ModuleType, ad_string: str) -> None:
    ads = list(mod.parseAds(ad_string))
    assert ads[0]["foo"] == "bar"
    assert ads[1]["foo"] == "wiz"


def test_parse_ads_from_file_like_object(mod: ModuleType, ad_file: Path) -> None:
    with ad_file.open(mode="r") as handle:
        ads = list(mod.parseAds(handle))
    assert ads[0]["foo"] == "bar"
    assert ads[1]["foo"] == "wiz"


def test_parse_next_ad_from_file_like_object(mod: ModuleType, ad_file: Path) -> None:
    with ad_file.open(mode="r") as handle:
        ads = [mod.parseNext(handle), mod.parseNext(handle)]
    assert ads[0]["foo"] == "bar"
    assert ads[1]["foo"] == "wiz"


def test_parse_one_ad_from_string(mod: ModuleType, ad_string: str) -> None:
    assert mod.parseOne(ad_string)["foo"] == "wiz"


def test_parse_one_ad_from_file_like_object(mod: ModuleType, ad_file: Path) -> None:
    with ad_file.open(mode="r") as handle:
        assert mod.parseOne(handle)["foo"] == "wiz"


@pytest.mark.parametrize(("text", "parser"), [("[foo = 1]", "New"), ("foo = 1", "Old")])
def test_can_parse_ads_across_pipes(mod: ModuleType, text: str, parser: str) -> None:
    r, w = os.pipe()
    with open(w, mode="w") as wf:
        wf.write(text)
    with open(r) as rf:
        parsed = mod.parseNext(rf, getattr(mod.ParserType, parser))
    assert parsed["foo"] == 1


def test_output_of_printJson_can_be_parsed(mod: ModuleType, ad: Any) -> None:
    ad["int"] = 5
    ad["float"] = 6.5
    ad["string"] = "foo"
    ad["expr"] = mod.ExprTree("2 + 3")
    ad["undefined"] = mod.Value.Undefined
    ad["error"] = mod.Value.Error
    assert json.loads(ad.printJson()) == {
        "int": 5,
        "float": 6.5,
        "string": "foo",
        "expr": "/Expr(2 + 3)/",
        "undefined": None,
        "error": "/Expr(error)/",
    }


# ---------------------------------------------------------------------------
# Part 2: differential API scenarios
# ---------------------------------------------------------------------------


def _stored(value: Callable[[ModuleType], Any]) -> Callable[[ModuleType], Any]:
    """Store a Python value in an ad; report the stored expression and what [] gives."""

    def run(m: ModuleType) -> Any:
        ad = m.ClassAd()
        ad["k"] = value(m)
        return [ad.lookup("k"), ad["k"], ad.eval("k")]

    return run


def _keys(text: str) -> Callable[[ModuleType], Any]:
    return lambda m: sorted(m.ClassAd(text))


def _parse_stream(fn: str, text: str, parser: str | None = None) -> Callable[[ModuleType], Any]:
    def run(m: ModuleType) -> Any:
        stream = io.StringIO(text)
        args: list[Any] = [stream]
        if parser is not None:
            args.append(getattr(m.ParserType, parser))
        result = getattr(m, fn)(*args)
        if fn == "parseAds":
            result = list(result)
        return [result, stream.tell()]

    return run


def _mutations(m: ModuleType) -> Any:
    ad = m.ClassAd("[a = 1; b = 2; c = 3]")
    popped = ad.pop("a")
    ad["B"] = 20
    del ad["c"]
    return [popped, len(ad), sorted(ad), ad["b"], "a" in ad, "B" in ad, ad.get("b")]


def _items(m: ModuleType) -> Any:
    ad = m.ClassAd('[a = 1; b = "x"; c = a + 1; d = {1, 2}; e = [f = 1]]')
    return sorted([key, value] for key, value in ad.items())


def _values_of_dict_ad(m: ModuleType) -> Any:
    ad = m.ClassAd({"i": 1, "f": 2.5, "s": "x", "b": True, "n": None, "l": [1, "a"], "d": {"x": 1}})
    return ad


API_CASES: dict[str, Callable[[ModuleType], Any]] = {
    "ClassAd() is empty": lambda m: [len(m.ClassAd()), list(m.ClassAd())],
    "ClassAd(None)": lambda m: m.ClassAd(None),
    "ClassAd(dict of every kind)": _values_of_dict_ad,
    "ClassAd(int) raises": lambda m: m.ClassAd(5),
    "ClassAd(list) raises": lambda m: m.ClassAd([("a", 1)]),
    "ClassAd(garbage) raises": lambda m: m.ClassAd("garbage"),
    "ClassAd(old syntax) raises": lambda m: m.ClassAd("a = 1"),
    "ClassAd(trailing junk)": lambda m: m.ClassAd("[a = 1] extra"),
    "ClassAd(two ads)": lambda m: m.ClassAd("[a = 1][b = 2]"),
    "ClassAd(empty string)": lambda m: m.ClassAd(""),
    "keys are case-insensitive": lambda m: [
        m.ClassAd("[Foo = 1]")["foo"],
        "FOO" in m.ClassAd("[Foo = 1]"),
        list(m.ClassAd("[Foo = 1]")),
    ],
    "key spelling of the first definition wins": lambda m: [
        list(m.ClassAd("[Foo = 1; foo = 2]")),
        m.ClassAd("[Foo = 1; foo = 2]")["FOO"],
    ],
    "setitem keeps the old spelling": lambda m: (lambda ad: (ad.__setitem__("FOO", 2), list(ad)))(
        m.ClassAd("[Foo = 1]")
    )[1],
    "keys of a mixed ad": _keys('[a = 1; B = 2; Zeta = 3; alpha = 4; "x" = 5]'),
    "keys sorted": _keys("[a = 1; B = 2; Zeta = 3; alpha = 4; 'x y' = 5]"),
    "mutations": _mutations,
    "items": _items,
    "values": lambda m: sorted(
        str(v) for v in m.ClassAd('[a = 1; b = "x"; c = a + 1; d = {1, 2}]').values()
    ),
    "getitem of an expression is an ExprTree": lambda m: m.ClassAd("[a = 1 + 1]")["a"],
    "getitem of a list literal": lambda m: m.ClassAd("[a = {1, b}]")["a"],
    "getitem of a nested ad": lambda m: m.ClassAd("[a = [b = 1]]")["a"],
    "getitem of undefined": lambda m: m.ClassAd("[a = undefined]")["a"],
    "getitem of error": lambda m: m.ClassAd("[a = error]")["a"],
    "getitem of absTime": lambda m: m.ClassAd("[a = absTime(0)]")["a"],
    "getitem of relTime": lambda m: m.ClassAd("[a = relTime(5)]")["a"],
    "getitem of a negative literal": lambda m: m.ClassAd("[a = -5]")["a"],
    "getitem with a non-str key": lambda m: m.ClassAd("[a = 1]")[1],
    "setitem with a non-str key": lambda m: m.ClassAd().__setitem__(1, 2),
    "delitem of a missing key": lambda m: m.ClassAd().__delitem__("nope"),
    "lookup of a missing key": lambda m: m.ClassAd().lookup("nope"),
    "lookup with a non-str key": lambda m: m.ClassAd().lookup(5),
    "eval of a missing key": lambda m: m.ClassAd().eval("nope"),
    "eval of a list attr": lambda m: m.ClassAd("[a = {1, x}; x = 2]").eval("a"),
    "eval of a nested ad attr": lambda m: m.ClassAd("[a = [b = x]; x = 2]").eval("a"),
    "eval sees sibling attributes": lambda m: m.ClassAd("[a = b * 2; b = 21]").eval("a"),
    "store int": _stored(lambda m: 1),
    "store float": _stored(lambda m: 2.5),
    "store negative zero": _stored(lambda m: -0.0),
    "store nan": _stored(lambda m: float("nan")),
    "store inf": _stored(lambda m: float("inf")),
    "store -inf": _stored(lambda m: float("-inf")),
    "store string with quotes": _stored(lambda m: 'q"s\\t'),
    "store string with newline": _stored(lambda m: "a\nb"),
    "store non-ascii string": _stored(lambda m: "café"),
    "store True": _stored(lambda m: True),
    "store None": _stored(lambda m: None),
    "store nested list": _stored(lambda m: [1, [2, "x"], {"a": 1}]),
    "store nested dict": _stored(lambda m: {"a": {"b": 1}}),
    "store tuple": _stored(lambda m: (1, 2)),
    "store ExprTree": _stored(lambda m: m.ExprTree("a + 1")),
    "store ClassAd": _stored(lambda m: m.ClassAd("[x = 1]")),
    "store Value.Error": _stored(lambda m: m.Value.Error),
    "store Value.Undefined": _stored(lambda m: m.Value.Undefined),
    "store naive datetime": _stored(lambda m: datetime.datetime(2020, 1, 2, 3, 4, 5)),
    "store utc datetime": _stored(
        lambda m: datetime.datetime(2020, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    ),
    "store min int64": _stored(lambda m: -(2**63)),
    "store max int64": _stored(lambda m: 2**63 - 1),
    "store object raises": _stored(lambda m: object()),
    "ExprTree(None)": lambda m: m.ExprTree(None),
    "ExprTree(ExprTree)": lambda m: m.ExprTree(m.ExprTree("1 + 1")),
    "ExprTree(int)": lambda m: m.ExprTree(5),
    "ExprTree('') raises": lambda m: m.ExprTree(""),
    "ExprTree('1 +') raises": lambda m: m.ExprTree("1 +"),
    "ExprTree equality": lambda m: [
        m.ExprTree("1") == m.ExprTree("1"),
        m.ExprTree("a + 1") == m.ExprTree("a+1"),
        m.ExprTree("A") == m.ExprTree("a"),
        m.ExprTree("(1)") == m.ExprTree("1"),
        m.ExprTree("1 + 1") == m.ExprTree("2"),
        # An expression in htgrid (version-1 scripts build constraints so), with
        # classad2's truth.
        bool(m.ExprTree("1") == 1),
        bool(m.ExprTree("1") != 1),
        m.ExprTree("1") != m.ExprTree("2"),
    ],
    "ClassAd equality": lambda m: [
        m.ClassAd("[a = 1; b = 2]") == m.ClassAd("[b = 2; a = 1]"),
        m.ClassAd("[a = 1]") == m.ClassAd("[A = 1]"),
        m.ClassAd("[a = 1]") == {"a": 1},
        m.ClassAd("[a = 1 + 1]") == m.ClassAd("[a = 2]"),
    ],
    "eval(scope=int) raises": lambda m: m.ExprTree("1").eval(5),
    "eval(target=dict) raises": lambda m: m.ExprTree("1").eval(m.ClassAd(), {}),
    "eval(target only)": lambda m: m.ExprTree("x").eval(target=m.ClassAd("[x = 1]")),
    "eval(scope kw)": lambda m: m.ExprTree("x").eval(scope=m.ClassAd("[x = 1]")),
    "simplify(no scope)": lambda m: m.ExprTree("1 + 2").simplify(),
    "simplify(scope)": lambda m: m.ExprTree("x + y").simplify(m.ClassAd("[x = 1]")),
    "flatten(non-ExprTree) raises": lambda m: m.ClassAd().flatten("x"),
    "externalRefs(non-ExprTree) raises": lambda m: m.ClassAd().externalRefs("x"),
    "internalRefs(non-ExprTree) raises": lambda m: m.ClassAd().internalRefs("x"),
    "matches(non-ClassAd) raises": lambda m: m.ClassAd().matches({}),
    "symmetricMatch(non-ClassAd) raises": lambda m: m.ClassAd().symmetricMatch(5),
    "formatOld is printOld": lambda m: m.ClassAd("[a = 1]").formatOld(),
    "formatJson is printJson": lambda m: m.ClassAd("[a = 1]").formatJson(),
    "repr(ClassAd) parses back": lambda m: m.ClassAd(repr(m.ClassAd('[a = 1; b = "x"; c = {1}]'))),
    "str(ClassAd) parses back": lambda m: m.ClassAd(str(m.ClassAd("[a = [b = 1]; c = {1, 2}]"))),
    "pickle round trip": lambda m: pickle.loads(pickle.dumps(m.ClassAd("[a = 1; b = x + 1]"))),
    "Value members": lambda m: [[v.name, int(v)] for v in m.Value],
    "ParserType members": lambda m: [[p.name, int(p)] for p in m.ParserType],
    "Parser is ParserType": lambda m: m.Parser is m.ParserType,
    "parseAds(StringIO, New)": _parse_stream("parseAds", "[a = 1][b = 2]", "New"),
    "parseAds(StringIO, Old)": _parse_stream("parseAds", "a = 1\n\nb = 2\n", "Old"),
    "parseAds(StringIO, auto)": _parse_stream("parseAds", "[a = 1]\n[b = 2]\n"),
    "parseOne(StringIO)": _parse_stream("parseOne", "[a = 1][b = 2]"),
    "parseNext(StringIO) needs a fileno": _parse_stream("parseNext", "[a = 1][b = 2]", "New"),
    "parseAds is lazy": lambda m: type(m.parseAds("[a = 1]")).__name__,
    "quote(non-str) raises": lambda m: m.quote(5),
    "unquote(non-str) raises": lambda m: m.unquote(5),
}


@pytest.mark.parametrize("name", sorted(API_CASES))
def test_api_scenario(name: str) -> None:
    scenario = API_CASES[name]

    def run(m: ModuleType, hint: Any = None) -> Any:
        try:
            return _support.canon_value(m, _as_value(scenario(m)))
        except Exception as exc:
            return ["raises", _support.exception_token(m, exc, hint)]

    expected = run(ORACLE)
    actual = run(OURS, expected)
    if name in _deliberate.API_REASONS:
        assert actual != expected, f"no longer differs from classad2: drop {name!r}"
        assert actual[0] != "raises" or actual[1] == "ClassAdException", actual
        return
    assert actual == expected, (
        f"htgrid.classad differs from classad2 in {name!r}\n"
        f"  classad2: {_support.describe(expected)}\n"
        f"  htgrid:   {_support.describe(actual)}"
    )


def _as_value(result: Any) -> Any:
    """Turn tuples from the scenarios into lists so canon_value walks them."""
    if isinstance(result, tuple):
        return [_as_value(item) for item in result]
    if isinstance(result, list):
        return [_as_value(item) for item in result]
    return result
