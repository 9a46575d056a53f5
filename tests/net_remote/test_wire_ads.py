"""Job ads read from the API's JSON: the literal-only shortcut reads as the ClassAd parser."""

from __future__ import annotations

import json

import pytest

from htgrid.classad import ClassAd, ParserType, parseOne
from htgrid.net import BadRequest
from htgrid.net._wire import ad_from_json, loads

TEXTS = [
    '{"ClusterId": 12, "ProcId": 3, "JobStatus": 4}',
    '{"Rank": 1.0, "Zero": 0, "Small": -9223372036854775808, "Big": 9223372036854775807}',
    '{"Cmd": "/bin/true", "Args": "a \\"quoted\\" \\\\ back", "Name": "\\u00e9t\\u00e9"}',
    '{"On": true, "Off": false, "Gone": null, "Tiny": 1e-300, "Huge": 1.5e300}',
    '{"Req": "\\/Expr(RequestCpus > 1 && Owner == \\"x\\")\\/", "Cpus": 2}',
    '{"Env": "\\/Expr(\\"A=1\\")\\/"}',
    '{"List": [1, "two", 3.0], "Nested": {"Inner": 1}}',
    '{"Mixed": "X", "mixed": "y"}',
    "{}",
]


def parsed(text: str) -> ClassAd:
    """What the ClassAd parser makes of the JSON text (the reference)."""
    return parseOne(text, ParserType.JSON)


@pytest.mark.parametrize("text", TEXTS)
def test_each_ad_reads_as_the_parser_reads_it(text: str) -> None:
    ad = ad_from_json(loads(text))
    want = parsed(text)
    assert repr(ad) == repr(want)
    for name in want:
        # Types too: 1 stays an integer and 1.0 a real, an expression stays unevaluated.
        assert type(ad.lookup(name)) is type(want.lookup(name))
        assert repr(ad.lookup(name)) == repr(want.lookup(name))


@pytest.mark.parametrize(
    "text", ['{"Over": 9223372036854775808}', '{"Under": [1, -9223372036854775809]}']
)
def test_an_integer_past_64_bits_is_refused_not_read_as_zero(text: str) -> None:
    # The ClassAd parser reads it as 0 (HTCondor's lexer does): a request is refused
    # instead, naming the attribute, rather than storing a value the client did not send.
    with pytest.raises(BadRequest, match=r"attribute (Over|Under) is -?9223372036854775\d+, past"):
        ad_from_json(loads(text))


def test_an_expression_is_not_read_as_a_string() -> None:
    ad = ad_from_json(loads('{"Req": "\\/Expr(1 + 2)\\/"}'))
    assert ad.eval("Req") == 3
    assert repr(ad.lookup("Req")) == "1 + 2"


def test_strings_that_only_look_like_markers_stay_strings() -> None:
    text = json.dumps({"Note": "/Expr(1)/", "Other": "Expr(x)"})
    ad = ad_from_json(loads(text))
    assert ad["Note"] == "/Expr(1)/"
    assert ad["Other"] == "Expr(x)"
