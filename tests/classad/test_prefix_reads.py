"""Ads read or printed one after another that share their beginning (a cluster's jobs, as
a grid manager sends them) read and print exactly as each does alone."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from htgrid.classad import ClassAd
from htgrid.classad._parser import parse_new_ad_whole
from htgrid.classad._unparse import unparse
from htgrid.errors import ClassAdException

# Pieces chosen to trip a splitter: `;` and `]` inside strings, escaped quotes, nested
# ads and lists, a repeated name in another case, blank pieces, expressions.
PIECES = [
    'MyType = "Job"',
    "ClusterId = 12",
    'Cmd = "/bin/sh; echo ]"',
    'Args = "say \\"hi; there\\""',
    'Requirements = (Memory >= 1024) && (Arch == "X86_64")',
    'Env = [ A = 1; B = "x;y" ]',
    'Files = { "a;b", "c]" }',
    "clusterid = 13",
    "",
    "Rank = ifThenElse(x > 1, 2, 3)",
    "Lease = 1795742709",
    "Ratio = 0.5",
    "Flag = true",
    "Nothing = undefined",
]


def _text(pieces: list[str]) -> str:
    return "[ " + "; ".join(pieces) + " ]"


def _alone(text: str) -> list[tuple[str, str, object]]:
    ad = ClassAd._from_pairs(parse_new_ad_whole(text).attrs)
    return [(key, e.name, e.node) for key, e in ad._attrs.items()]


def _read(text: str) -> list[tuple[str, str, object]]:
    return [(key, e.name, e.node) for key, e in ClassAd(text)._attrs.items()]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=12),
    st.lists(
        st.tuples(st.integers(0, 11), st.sampled_from([*PIECES, "ProcId = 7", "Tag = 'q'"])),
        min_size=1,
        max_size=6,
    ),
)
def test_each_ad_of_a_run_reads_as_it_reads_alone(
    base: list[str], edits: list[tuple[int, str]]
) -> None:
    run = [base]
    for where, piece in edits:  # each next ad: the last with one piece changed or added
        ad = list(run[-1])
        if where < len(ad):
            ad[where] = piece
        else:
            ad.append(piece)
        run.append(ad)
    for pieces in run:
        text = _text(pieces)
        try:
            expected = _alone(text)
        except ClassAdException:
            with pytest.raises(ClassAdException):
                ClassAd(text)
            continue
        assert _read(text) == expected


def test_a_bad_piece_after_shared_ones_gives_the_parsers_error() -> None:
    good = _text(["A = 1", "B = 2", "C = 3"])
    bad = _text(["A = 1", "B = 2", "C = (3"])
    assert dict(ClassAd(good)) == {"A": 1, "B": 2, "C": 3}

    with pytest.raises(ClassAdException) as raised:
        ClassAd(bad)
    with pytest.raises(ClassAdException) as alone:
        parse_new_ad_whole(bad)
    assert str(raised.value) == str(alone.value)


def test_a_string_that_ends_where_a_piece_did_is_not_taken_for_it() -> None:
    # The second ad's text matches the first's up to `A = "x` only: no piece is shared.
    ClassAd('[ A = "x"; B = 1 ]')

    ad = ClassAd('[ A = "x; B = 1" ]')

    assert dict(ad) == {"A": "x; B = 1"}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([p for p in PIECES if p]), min_size=0, max_size=10),
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 99)), min_size=1, max_size=6),
)
def test_each_ad_of_a_run_prints_as_it_prints_alone(
    base: list[str], edits: list[tuple[int, int]]
) -> None:
    # As a grid manager builds them: one ad's attributes copied (their entries shared),
    # then one set or added per job.
    ad = ClassAd(_text(base)) if base else ClassAd()
    for where, value in edits:
        job = copy.copy(ad)
        names = list(job.keys())
        job[names[where] if where < len(names) else f"Own{where}"] = value
        assert repr(job) == unparse(job._node())
        assert ClassAd(repr(job)) == job
        ad = job if value % 2 else ad
