"""printJson reuses the lines it wrote for values the ads share (the same node), and
writes every ad as it would have written it alone."""

from __future__ import annotations

import random

import pytest

import htgrid.classad as classad
import htgrid.classad._tojson as json_module  # the writer, with its caches

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


def _forget() -> None:
    json_module._LINES.clear()
    json_module._ENTRY_LINES.clear()


def _alone(ad: classad.ClassAd) -> str:
    _forget()  # nothing written before: this ad's text from scratch
    return ad.printJson()


@pytest.mark.parametrize("seed", range(100))
def test_each_ad_is_written_as_it_would_be_alone(seed: int) -> None:
    ads = _ads(random.Random(seed))
    _forget()

    together = [ad.printJson() for ad in ads]  # the shared values' lines reused

    assert together == [_alone(ad) for ad in ads]


def test_an_empty_ad() -> None:
    assert classad.ClassAd().printJson() == "{\n}"


def test_one_value_shared_at_three_depths_is_written_at_each_depth() -> None:
    # The same node (the parser's cache shares them between ads) at three indents: the
    # lines written once are reused only at their own depth and under their own name.
    shared = classad.ExprTree("{ 1, 2 }")
    inner = classad.ClassAd({"A": shared})
    middle = classad.ClassAd({"A": shared, "C": inner})
    outer = classad.ClassAd({"A": shared, "B": middle, "Z": shared})

    expected = _alone(
        classad.ClassAd(
            "[ A = { 1, 2 }; B = [ A = { 1, 2 }; C = [ A = { 1, 2 } ] ]; Z = { 1, 2 } ]"
        )
    )
    _forget()
    for _ in range(2):  # written fresh, then from what was written
        assert outer.printJson() == expected
    assert outer.printJson().count('"A": [\n        1,') == 1  # the deepest, indented so


def test_an_entry_shared_by_many_ads_is_written_once_and_a_new_one_afresh() -> None:
    # The queue's job ads share their cluster's entries: each is written once; a job's
    # own value for one of those names is a new entry, written as itself.
    cluster = classad.ClassAd({"Cmd": "/bin/true", "RequestMemory": classad.ExprTree("2 * 64")})
    jobs = []
    for proc in range(3):
        ad = classad.ClassAd()
        ad._attrs = dict(cluster._attrs)
        ad["ProcId"] = proc
        jobs.append(ad)
    jobs[2]["Cmd"] = "/bin/false"
    _forget()

    texts = [ad.printJson() for ad in jobs]

    assert texts == [_alone(ad) for ad in jobs]
    assert '"Cmd": "/bin/false"' in texts[2] and '"Cmd": "/bin/true"' in texts[0]
    _forget()
    for ad in jobs:
        ad.printJson()
    assert len(json_module._ENTRY_LINES) == 2 + 3 + 1  # cluster's, ProcIds, the new Cmd
