"""json_texts writes each ad as printJson does, however many entries the ads share."""

from __future__ import annotations

import random

import pytest

import htgrid.classad as classad

# What JSON writes in its own ways: reals, escapes, nesting, and expressions as strings.
_VALUES = [
    "0.1",
    "1e300",
    "-0.0",
    "false",
    "error",
    '"with \\"quotes\\" and \\\\ backslash"',
    '"unicode \u00e9 and \\t tab"',
    '{ 1, 2.5, "x", { } }',
    "[ Inner = 1; Other = { 2, [ ] } ]",
    "JobStatus == 4 && (JobLeaseExpiration =?= undefined || time() < JobLeaseExpiration)",
    'ifThenElse(A, "a", B)',
    "RequestMemory * 1024",
]


def _ads(rng: random.Random) -> list[classad.ClassAd]:
    cluster = classad.ClassAd(
        "[" + "; ".join(f"C{n} = {rng.choice(_VALUES)}" for n in range(rng.randint(0, 12))) + "]"
    )
    ads = []
    for proc in range(rng.randint(1, 6)):
        own = classad.ClassAd(
            "[" + "; ".join(f"P{n} = {rng.choice(_VALUES)}" for n in range(rng.randint(0, 4))) + "]"
        )
        ad = classad.ClassAd()
        # The store's overlay: the cluster's entries shared by every job's ad, then the
        # job's own (one of them may hide a cluster attribute of the same name).
        ad._attrs = {**cluster._attrs, **own._attrs}
        if proc % 2 and cluster._attrs:
            ad["C0"] = proc  # a job's own value where the others share the cluster's
        ads.append(ad)
    return ads


@pytest.mark.parametrize("seed", range(100))
def test_each_ad_is_written_as_print_json_writes_it(seed: int) -> None:
    ads = _ads(random.Random(seed))

    assert classad.json_texts(ads) == [ad.printJson() for ad in ads]


def test_no_ads_no_texts() -> None:
    assert classad.json_texts([]) == []
    assert classad.json_texts([classad.ClassAd()]) == [classad.ClassAd().printJson()]


def test_one_value_shared_at_three_depths_is_written_at_each_depth() -> None:
    # The same node (the parser's cache shares them between ads) at three indents: the
    # lines written once are reused only at their own depth and under their own name.
    shared = classad.ExprTree("{ 1, 2 }")
    inner = classad.ClassAd({"A": shared})
    middle = classad.ClassAd({"A": shared, "C": inner})
    outer = classad.ClassAd({"A": shared, "B": middle, "Z": shared})

    expected = classad.ClassAd(
        "[ A = { 1, 2 }; B = [ A = { 1, 2 }; C = [ A = { 1, 2 } ] ]; Z = { 1, 2 } ]"
    )
    for _ in range(2):  # written fresh, then from what was written
        assert outer.printJson() == expected.printJson()
    assert outer.printJson().count('"A": [\n        1,') == 1  # the deepest, indented so
