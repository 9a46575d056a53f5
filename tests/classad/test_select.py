"""select_attrs gives what a whole parse gives for the attributes asked, however the ad
is written; what it cannot split safely goes to the parser."""

from __future__ import annotations

import random

import pytest

import htgrid.classad as classad

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
