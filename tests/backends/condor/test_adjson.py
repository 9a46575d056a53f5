"""The condor GAHP writes a status ad's JSON form in new ClassAd syntax without parsing
it: whatever the ad holds, the line reads back as the ad the JSON form stands for."""

from __future__ import annotations

import random
from typing import Any

import pytest

import htgrid.classad as classad
from htgrid.classad import adjson

_EXPRESSIONS = [
    "JobStatus == 4 && (JobLeaseExpiration =?= undefined || time() < JobLeaseExpiration)",
    'ifThenElse(A > 0, "a;b", "c]d")',
    "(StageInFinish > 0) =!= true && time() > QDate + 86400",
    'strcat("\\"quoted\\"", Owner)',
    'member("x", { "x", "y" })',
    "MY.RequestMemory * 2",
]
_STRINGS = ["plain", "", 'a "quote"', "back\\slash", "new\nline", "tab\tand ünicode", "/Expr(1)/"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(9 if depth < 2 else 7)
    if choice == 0:
        return rng.randint(-(2**40), 2**40)
    if choice == 1:
        return rng.choice([0.1, 2.5, -3.25, 1e20, 1.5e-7, 1234567.0])
    if choice == 2:
        return rng.choice([True, False])
    if choice == 3:
        return None
    if choice in (4, 5):
        return rng.choice(_STRINGS)
    if choice == 6:
        expr = classad.ExprTree(rng.choice(_EXPRESSIONS))
        return classad.ClassAd({"X": expr}).printJson()  # the form the daemon sends
    if choice == 7:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"N{n}": _value(rng, depth + 1) for n in range(rng.randint(0, 3))}


def _json_ad(rng: random.Random) -> str:
    parts = []
    for n in range(rng.randint(1, 12)):
        value = _value(rng)
        if isinstance(value, str) and value.startswith("{"):  # an expression's ad: its X
            text = value.split(":", 1)[1].strip().rstrip("}").strip()
        else:
            text = adjson.dumps(value)
        parts.append(f'"Attr{n}": {text}')
    return "{" + ", ".join(parts) + "}"


@pytest.mark.parametrize("seed", range(150))
def test_the_line_reads_back_as_the_json_ad(seed: int) -> None:
    text = _json_ad(random.Random(seed))
    expected = classad.parseOne(text, classad.ParserType.JSON)

    line = adjson.ad_text(adjson.loads(text))

    assert line is not None and "\n" not in line
    got = classad.ClassAd(line)
    assert sorted(got.keys()) == sorted(expected.keys())
    for name in expected:
        assert repr(got.lookup(name)) == repr(expected.lookup(name)), (name, line)


@pytest.mark.parametrize(
    "ad",
    [{"odd name": 1}, {"true": 1}, {"Big": 2**70}, {"Inf": float("inf")}],
)
def test_what_it_does_not_take_on_is_left_to_the_parser(ad: dict[str, Any]) -> None:
    assert adjson.ad_text(ad) is None


def test_values_equal_in_python_keep_their_own_types_from_ad_to_ad() -> None:
    # The parts are remembered from ad to ad; 1, true, 1.0 and "1" are four values.
    lines = [adjson.ad_text({"A": value, "B": "same"}) for value in (1, True, 1.0, "1", 1, True)]

    assert lines == [
        '[ A = 1; B = "same" ]',
        '[ A = true; B = "same" ]',
        '[ A = 1.0; B = "same" ]',
        '[ A = "1"; B = "same" ]',
        '[ A = 1; B = "same" ]',
        '[ A = true; B = "same" ]',
    ]
    assert adjson.ad_text({"A": 1, "true": 1}) is None  # a bad name after a known part
