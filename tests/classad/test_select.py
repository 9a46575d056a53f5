"""The splitter's two users: select_attrs gives what a whole parse gives for the
attributes asked, and an ad read through the splitter and the expression cache is the
ad a whole parse gives (an ad that does not parse fails with the whole parse's error);
what the splitter cannot split safely goes to the parser."""

from __future__ import annotations

import random

import pytest

import htgrid.classad as classad
from htgrid.classad._parser import parse_new_ad, parse_new_ad_whole

_VALUES = [
    "1",
    "-7",
    "2.5",
    "true",
    "undefined",
    '"plain"',
    '"with ; semicolon and ] bracket"',
    '"escaped \\" quote; ]"',
    '{ 1, "a;b", [ X = 1; Y = "]" ] }',
    "[ Inner = 1; Other = { 2, 3 } ]",
    'ifThenElse(JobStatus == 4, "done;", "not ]")',
    "(A + B) * (C - 1)",
    "time() < QDate + 3600",
    "'Quoted Name' + 1",
    'strcat("(", "[", "{")',
]


def _ad(rng: random.Random) -> tuple[str, dict[str, str]]:
    attrs = {f"Attr{n}": rng.choice(_VALUES) for n in range(rng.randint(1, 25))}
    spaces = rng.choice(["", " ", "\n  "])
    body = f";{spaces}".join(f"{name} = {value}" for name, value in attrs.items())
    return f"[{spaces}{body}{rng.choice(['', ';'])}{spaces}]", attrs


@pytest.mark.parametrize("seed", range(200))
def test_the_attributes_asked_for_are_those_a_whole_parse_gives(seed: int) -> None:
    rng = random.Random(seed)
    text, attrs = _ad(rng)
    wanted = [*rng.sample(sorted(attrs), rng.randint(1, len(attrs))), "Missing"]
    whole = classad.ClassAd(text)

    chosen = classad.select_attrs(text, [name.lower() for name in wanted])

    assert sorted(chosen.keys()) == sorted(name for name in wanted if name in whole)
    for name in chosen:
        assert repr(chosen.lookup(name)) == repr(whole.lookup(name)), (name, text)


@pytest.mark.parametrize(
    "text",
    [
        "[ A = 1; /* a comment; B = 2 */ B = 3 ]",
        "[ A = 1; // to the end\n B = 3 ]",
        "[ 'B' = 3; A = 1 ]",
        "[ A = 1; B = 3; B = 4 ]",
    ],
)
def test_what_the_splitter_is_unsure_of_is_parsed_whole(text: str) -> None:
    assert repr(classad.select_attrs(text, ["B"])) == repr(
        classad.ClassAd({"B": classad.ClassAd(text)["B"]})
    )


@pytest.mark.parametrize(
    "text", ["A = 1", '[ A = 1; B = "open ]', "[ A = (1; B = 2 ]", "[ A = 1 ]]", "[ B = ]"]
)
def test_an_ad_that_does_not_parse_is_refused(text: str) -> None:
    with pytest.raises(classad.ClassAdSyntaxError):
        classad.select_attrs(text, ["A", "B"])


# ---- the whole ad through the splitter ---------------------------------------------------

_MORE_VALUES = [
    "3--2",
    "error",
    "A is undefined || B isnt 3",
    "A =?= B && C =!= D",
    "X ?: 3",
    "!Done",
    'absTime("2025-01-01T00:00:00Z")',
]
# Each of these breaks the ad (or the splitter's nerve); the whole parse must decide.
_BROKEN = [
    "",
    "(1",
    "1 B = 2",
    '"open',
    "= 1",
    "1 ]",
    "[",
    "/* c */ 1",
    "1 // c\n",
    "'Name",
]
_NAMES = ["Attr", "attr", "ATTR", "true", "Is", "error", "_x", "a1"]


def _whole_ad(rng: random.Random, broken: bool) -> str:
    pieces = []
    for n in range(rng.randint(0, 20)):
        name = rng.choice(_NAMES) if rng.random() < 0.15 else f"Attr{n}"
        op = rng.choice(["=", " = ", "=", "==", "=?="]) if broken else rng.choice(["=", " = "])
        value = (
            rng.choice(_BROKEN)
            if broken and rng.random() < 0.2
            else rng.choice(_VALUES + _MORE_VALUES)
        )
        pieces.append(f"{name}{op}{value}")
    spaces = rng.choice(["", " ", "\n  "])
    body = rng.choice([";", f";{spaces}", ";;"]).join(pieces)
    return f"{spaces}[{spaces}{body}{rng.choice(['', ';'])}{spaces}]{spaces}"


def _outcome(parse: object, text: str) -> tuple[str, ...]:
    try:
        node = parse(text)  # type: ignore[operator]
    except classad.ClassAdSyntaxError as err:
        return ("error", str(err), repr(getattr(err, "offset", None)))
    return tuple(f"{name}={value!r}" for name, value in node.attrs)


@pytest.mark.parametrize("seed", range(300))
def test_the_split_parse_gives_what_the_whole_parse_gives(seed: int) -> None:
    rng = random.Random(seed)
    text = _whole_ad(rng, broken=seed % 3 == 0)

    assert _outcome(parse_new_ad, text) == _outcome(parse_new_ad_whole, text), text


@pytest.mark.parametrize("depth", [163, 164, 165, 166])
def test_nesting_is_limited_as_deep_as_in_the_whole_parse(depth: int) -> None:
    # The ad's own bracket does not count (as in classad2): a value nests as deep in an
    # ad as alone, so an attribute printed alone or in its ad parses back either way.
    value = "(" * depth + "1" + ")" * depth
    text = f"[ A = {value}; B = 2 ]"

    assert _outcome(parse_new_ad, text) == _outcome(parse_new_ad_whole, text)
    assert (_outcome(parse_new_ad, text)[0] == "error") == (depth >= 166)
    if depth == 165:
        classad.ExprTree(value)  # parses alone


def test_a_repeated_name_keeps_its_first_spelling_and_last_value() -> None:
    ad = classad.ClassAd("[ Foo = 1; FOO = 2 ]")

    assert list(ad) == ["Foo"] and ad["foo"] == 2


def test_an_error_points_into_the_whole_ad() -> None:
    text = "[ A = 1; B = (2 + ; C = 3 ]"
    with pytest.raises(classad.ClassAdSyntaxError) as err:
        classad.ClassAd(text)

    assert str(err.value) == _outcome(parse_new_ad_whole, text)[1]


# ---- a flat ad in one regular expression -------------------------------------------------

_FLAT_VALUES = [
    "1",
    "2.5",
    '"plain"',
    '"semi ; colon"',
    '"escaped \\" quote; x = 1"',
    'ifThenElse(JobStatus == 4, "done;", f(g(1)))',
    "(A + B) * (C - (D / 2))",
    "time() < QDate + 3600",
    "A =?= B && C =!= undefined",
    "",
]
# Each makes the one expression give up (or would split wrongly if it did not).
_UNFLAT = ["(1; B = 2)", "((((1))))", '"open', "1)", "(1", "'Quoted'", "{ 1 }", "[ X = 1 ]"]


@pytest.mark.parametrize("seed", range(300))
def test_a_flat_ad_splits_as_its_pieces_do(seed: int) -> None:
    from htgrid.classad._split import _flat_pairs, _piece_pairs

    rng = random.Random(seed)
    odd = seed % 2 == 1
    pieces = []
    for n in range(rng.randint(1, 30)):
        name = rng.choice(_NAMES) if odd and rng.random() < 0.1 else f"Attr{n}"
        op = rng.choice(["=", " = ", "==", "=?="]) if odd and rng.random() < 0.1 else " = "
        value = rng.choice(_UNFLAT if odd and rng.random() < 0.1 else _FLAT_VALUES)
        pieces.append(f"{name}{op}{value}")
    sep = rng.choice([";", "; ", ";\n  ", ";;"] if odd else [";", "; ", ";\n  "])
    text = f"[ {sep.join(pieces)}{rng.choice(['', ';', ' '])} ]"

    flat = _flat_pairs(text)

    if flat is not None:
        assert flat == _piece_pairs(text), text
    if not odd:
        assert flat is not None, text  # a clean flat ad takes the quick way
