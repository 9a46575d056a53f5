"""The one ClassAd JSON codec (htgrid.classad.adjson), the way each of its users reads and
writes: the APIs (`loads` + `ad_from_object`), the collector (`json_members`), the condor
GAHP (`loads` + `ad_text`, `dumps`) and the parser (ParserType.JSON) agree on every ad."""

from __future__ import annotations

import json
import math
import random

import pytest

from htgrid.classad import ClassAd, ExprTree, ParserType, adjson, parseAds, parseOne
from htgrid.errors import ClassAdSyntaxError

_EXPRESSIONS = [
    "RequestMemory * 1024",
    'ifThenElse(A > 0, "a;b", "c]d")',
    "JobStatus == 4 && (JobLeaseExpiration =?= undefined || time() < JobLeaseExpiration)",
    'strcat("\\"quoted\\"", Owner)',
    "MY.Disk >= 100 ? error : { 1, 2 }",
]
_STRINGS = ["", "plain", 'a "quote"', "back\\slash", "new\nline", "été ünicode", "/Expr(1)/"]
_FLOATS = [0.1, -0.0, 2.5, 1e300, 1.5e-7, 1234567.0, -3.25e-300]


def _value(rng: random.Random, depth: int = 0) -> str:
    """A value in new ClassAd syntax."""
    choice = rng.randrange(8 if depth < 3 else 6)
    if choice == 0:
        return str(rng.choice([0, 1, -1, 2**63 - 1, -(2**63), rng.randint(-(2**40), 2**40)]))
    if choice == 1:
        return repr(rng.choice(_FLOATS))
    if choice == 2:
        return rng.choice(["true", "false", "undefined"])
    if choice == 3:
        return json.dumps(rng.choice(_STRINGS), ensure_ascii=False)
    if choice in (4, 5):
        return rng.choice(_EXPRESSIONS)
    if choice == 6:
        return "{ " + ", ".join(_value(rng, depth + 1) for _ in range(rng.randint(0, 3))) + " }"
    inner = "; ".join(f"N{n} = {_value(rng, depth + 1)}" for n in range(rng.randint(0, 3)))
    return f"[ {inner} ]"


def _ad(seed: int) -> ClassAd:
    rng = random.Random(seed)
    return ClassAd(
        "[ " + "; ".join(f"Attr{n} = {_value(rng)}" for n in range(rng.randint(1, 10))) + " ]"
    )


@pytest.mark.parametrize("seed", range(120))
def test_every_reader_reads_an_ad_as_it_was_written(seed: int) -> None:
    ad = _ad(seed)
    text = adjson.ad_to_json(ad)
    assert text == ad.printJson()
    parsed = parseOne(text, ParserType.JSON)  # the reference: the ClassAd parser
    assert repr(parsed) == repr(ad)
    decoded = adjson.loads(text)
    assert repr(adjson.ad_from_object(decoded)) == repr(ad)
    line = adjson.ad_text(decoded)
    assert line is not None and repr(ClassAd(line)) == repr(ad)
    # dumps writes what loads read, expressions marked again.
    assert repr(parseOne(adjson.dumps(decoded), ParserType.JSON)) == repr(ad)
    # The collector's members, joined, are the same object.
    members = adjson.json_members(ad)
    assert list(members) == [name.lower() for name in ad]
    assert json.loads("{" + ", ".join(members.values()) + "}") == json.loads(text)


def test_an_array_of_ads_reads_back_ad_by_ad() -> None:
    ads = [_ad(seed) for seed in range(5)]
    text = adjson.ads_to_json(ads)
    wanted = [repr(ad) for ad in ads]
    assert [repr(adjson.ad_from_object(obj)) for obj in adjson.loads(text)] == wanted
    assert [repr(ad) for ad in parseAds(text, ParserType.JSON)] == wanted


def test_an_expression_stays_an_expression_and_a_lookalike_string_a_string() -> None:
    text = json.dumps({"Look": "/Expr(1 + 2)/"}).rstrip("}") + ', "Req": "\\/Expr(1 + 2)\\/"}'
    decoded = adjson.loads(text)
    assert decoded["Req"] == adjson.EXPR_MARK + "1 + 2)/"
    assert decoded["Look"] == "/Expr(1 + 2)/"
    ad = adjson.ad_from_object(decoded)
    assert isinstance(ad["Req"], ExprTree) and ad.eval("Req") == 3
    assert ad["Look"] == "/Expr(1 + 2)/"
    assert adjson.ad_text(decoded) == '[ Look = "/Expr(1 + 2)/"; Req = 1 + 2 ]'
    # (the closing `)/` is read either way: only the opening marker is written escaped)
    assert adjson.dumps(decoded) == '{"Look":"/Expr(1 + 2)/","Req":"\\/Expr(1 + 2)/"}'


@pytest.mark.parametrize("number", [2**63, -(2**63) - 1, 10**30])
def test_an_integer_past_64_bits_reads_as_zero_as_htcondor_reads_it(number: int) -> None:
    # The codec reads as HTCondor's reader does; an API refuses such a request before
    # (net._wire.ad_from_json, tests/net_remote/test_wire_ads.py).
    text = f'{{"Big": {number}, "In": [{number}]}}'
    assert adjson.ad_from_object(adjson.loads(text)) == parseOne(text, ParserType.JSON)
    assert adjson.ad_from_object(adjson.loads(text))["Big"] == 0
    # The GAHP's line leaves it to the parser rather than write what does not read back.
    assert adjson.ad_text(adjson.loads(text)) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"Cmd": "a\\u0000b"}', "Cmd: a string may not hold a NUL character"),
        ('{"A\\u0000": 1}', "'A\\x00': an attribute name may not hold a NUL character"),
        ('{"Ad": {"In": ["x\\u0000"]}}', "Ad: In: a string may not hold a NUL character"),
        ('{"Req": "\\/Expr(1 +)\\/"}', "Req: bad expression in JSON"),
    ],
)
def test_what_a_classad_cannot_hold_is_refused_naming_the_attribute(text: str, reason: str) -> None:
    with pytest.raises(ClassAdSyntaxError) as parsed:
        parseOne(text, ParserType.JSON)
    with pytest.raises(ClassAdSyntaxError) as decoded:
        adjson.ad_from_object(adjson.loads(text))
    assert decoded.value.reason == parsed.value.reason
    assert decoded.value.reason.startswith(reason)


@pytest.mark.parametrize("number", [*_FLOATS, math.inf, -math.inf, math.nan])
def test_reals_read_back_exactly(number: float) -> None:
    decoded = adjson.ad_from_object(adjson.loads(ClassAd({"R": number}).printJson()))
    if math.isfinite(number):
        back = decoded["R"]
        assert back == number and math.copysign(1, back) == math.copysign(1, number)
        assert ClassAd(adjson.ad_text({"R": number}) or "")["R"] == number
    else:  # JSON has no such number: written as the expression that makes it
        assert isinstance(decoded["R"], ExprTree)
        value = decoded.eval("R")
        assert value == number or (math.isnan(value) and math.isnan(number))
        assert adjson.ad_text({"R": number}) is None


def test_nested_ads_and_lists_keep_their_shape() -> None:
    ad = ClassAd('[ L = { 1, "two", { 3.5, [ X = undefined ] }, [ ] }; A = [ B = [ C = { } ] ] ]')
    decoded = adjson.loads(ad.printJson())
    assert decoded == {"L": [1, "two", [3.5, {"X": None}], {}], "A": {"B": {"C": []}}}
    assert repr(adjson.ad_from_object(decoded)) == repr(ad)
    assert repr(ClassAd(adjson.ad_text(decoded) or "")) == repr(ad)


def test_names_differing_in_case_keep_the_first_spelling_and_the_last_value() -> None:
    for text in ('{"Mixed": "X", "mixed": "y"}', '{"Mixed": "X", "mixed": "\\/Expr(1)\\/"}'):
        assert repr(adjson.ad_from_object(adjson.loads(text))) == repr(
            parseOne(text, ParserType.JSON)
        )
