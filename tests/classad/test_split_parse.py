"""An ad read through the splitter and the expression cache is the ad a whole parse
gives, and an ad that does not parse fails with the whole parse's error and place."""

from __future__ import annotations

import random

import pytest

import htgrid.classad as classad
from htgrid.classad._parser import parse_new_ad, parse_new_ad_whole

_VALUES = [
    "1",
    "-7",
    "3--2",
    "2.5",
    "true",
    "undefined",
    "error",
    '"plain"',
    '"with ; semicolon and ] bracket"',
    '"escaped \\" quote; ]"',
    '{ 1, "a;b", [ X = 1; Y = "]" ] }',
    "[ Inner = 1; Other = { 2, 3 } ]",
    'ifThenElse(JobStatus == 4, "done;", "not ]")',
    "(A + B) * (C - 1)",
    "A is undefined || B isnt 3",
    "A =?= B && C =!= D",
    "X ?: 3",
    "time() < QDate + 3600",
    "'Quoted Name' + 1",
    'strcat("(", "[", "{")',
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


def _ad(rng: random.Random, broken: bool) -> str:
    pieces = []
    for n in range(rng.randint(0, 20)):
        name = rng.choice(_NAMES) if rng.random() < 0.15 else f"Attr{n}"
        op = rng.choice(["=", " = ", "=", "==", "=?="]) if broken else rng.choice(["=", " = "])
        value = rng.choice(_BROKEN) if broken and rng.random() < 0.2 else rng.choice(_VALUES)
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
    text = _ad(rng, broken=seed % 3 == 0)

    assert _outcome(parse_new_ad, text) == _outcome(parse_new_ad_whole, text), text


@pytest.mark.parametrize("depth", [163, 164, 165, 166])
def test_nesting_is_limited_as_deep_as_in_the_whole_parse(depth: int) -> None:
    # The limit counts the ad's own bracket: at 165 the value alone would still parse.
    value = "(" * depth + "1" + ")" * depth
    text = f"[ A = {value}; B = 2 ]"

    assert _outcome(parse_new_ad, text) == _outcome(parse_new_ad_whole, text)
    assert (_outcome(parse_new_ad, text)[0] == "error") == (depth >= 165)
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
