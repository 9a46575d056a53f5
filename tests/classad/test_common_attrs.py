"""common_attrs: what a batch of ads shares goes once, and each ad comes back whole."""

from __future__ import annotations

import htgrid.classad as classad


def _overlay(common: classad.ClassAd, part: classad.ClassAd) -> dict[str, str]:
    ad = classad.ClassAd()
    ad.update(common)
    ad.update(part)
    return {name: repr(ad.lookup(name)) for name in ad}


def _whole(ad: classad.ClassAd) -> dict[str, str]:
    return {name: repr(ad.lookup(name)) for name in ad}


def test_shared_values_go_once_and_each_ad_comes_back_whole() -> None:
    texts = [
        '[ Cmd = "a"; N = 1; R = 0.0; F = true; L = { 1, 2 }; E = x + 1; P = 1; own = 7 ]',
        '[ Cmd = "a"; N = 1.0; R = -0.0; F = 1; L = { 1, 2 }; E = x + 1; P = 2 ]',
        '[ cmd = "a"; N = 1; R = 0.0; F = true; L = {1,2}; E = x + 1; P = 3; Extra = "z" ]',
    ]
    ads = [classad.ClassAd(text) for text in texts]
    common, parts = classad.common_attrs(ads, frozenset({"e"}))
    # Cmd is spelled differently in one ad; N, R and F differ in type or sign; L is
    # written differently in one; E stays in each ad because it was asked to.
    assert list(common) == []
    two_common, _ = classad.common_attrs(ads[:2])
    assert sorted(two_common) == ["Cmd", "E", "L"]
    for ad, part in zip(ads, parts, strict=True):
        assert _overlay(common, part) == _whole(ad)


def test_a_batch_of_job_ads_keeps_only_what_differs() -> None:
    ads = [
        classad.ClassAd(f'[ Cmd = "job.sh"; Args = "{i}"; Requirements = Memory > 10; P = {i} ]')
        for i in range(3)
    ]
    common, parts = classad.common_attrs(ads)
    assert repr(common) == '[ Cmd = "job.sh"; Requirements = Memory > 10 ]'
    assert [repr(part) for part in parts] == [f'[ Args = "{i}"; P = {i} ]' for i in range(3)]
    assert classad.common_attrs([]) == (classad.ClassAd(), [])
