"""Differential conformance: every recorded case runs through classad2 and htgrid.classad.

The case files (cases/*.json) hold the inputs and, for each case, the canonical
result the oracle gave when the file was built.  At run time each case is
evaluated by BOTH modules and the two canonical results must be equal; the live
oracle result must also still equal the recorded one (a changed oracle pin shows
up as a failure here, not as a silent change of what "conformant" means).

HTGRID_CONFORMANCE_SELFTEST=1 makes the module under test the oracle itself,
which validates the harness and the recorded results.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from . import _deliberate, _support

os.environ["TZ"] = "UTC"
time.tzset()

ORACLE = _support.load_oracle()
OURS = _support.load_ours()  # fails this module while htgrid.classad cannot be imported

CASES = _support.load_case_files()
DELIBERATE = _deliberate.load()


@pytest.mark.parametrize(
    ("label", "case"),
    [(_support.case_label(source, case), case) for source, case in CASES],
    ids=[_support.case_label(source, case) for source, case in CASES],
)
def test_case(label: str, case: dict[str, Any]) -> None:
    expected = _support.run_case(ORACLE, case)
    actual = _support.run_case(OURS, case, hint=expected)
    deliberate = DELIBERATE.get(_deliberate.key_of(label, case))
    if deliberate is not None:
        assert actual == deliberate["htgrid"], (
            f"htgrid no longer gives its pinned answer for a deliberate difference\n"
            f"  why it differs: {deliberate['reason']}\n"
            f"  pinned:   {_support.describe(deliberate['htgrid'])}\n"
            f"  htgrid:   {_support.describe(actual)}"
        )
        assert actual != expected, f"no longer differs from classad2: drop {label!r}"
    else:
        assert actual == expected, (
            f"htgrid.classad differs from classad2\n"
            f"  case:     {_support.describe(case)}\n"
            f"  classad2: {_support.describe(expected)}\n"
            f"  htgrid:   {_support.describe(actual)}"
        )
    assert expected == case["oracle"], (
        f"classad2 no longer gives the recorded result (oracle pin changed?)\n"
        f"  case:     {_support.describe(case)}\n"
        f"  recorded: {_support.describe(case['oracle'])}\n"
        f"  classad2: {_support.describe(expected)}"
    )


def test_case_files_are_present() -> None:
    assert len(CASES) >= 1000, f"only {len(CASES)} conformance cases were loaded"
