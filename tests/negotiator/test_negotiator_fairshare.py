"""User priorities and fair share, with time passed in (no sleeping)."""

from __future__ import annotations

from collections import Counter

import pytest

from htgrid.negotiator import PriorityTable, negotiate

from ._pool import job, slot

DAY = 86400.0
T0 = 1_700_000_000.0


def test_real_priority_halves_each_half_life_without_usage() -> None:
    # cm-configuration.rst: "a user with a RUP of 10 has no running jobs, that user's RUP
    # would be 5 one day later, 2.5 two days later".
    table = PriorityTable().advanced(T0, {"alice": 10.0})
    for _ in range(40):  # ten days of steady use: the RUP settles at the usage
        table = table.advanced(table["alice"].last_update + 6 * 3600, {"alice": 10.0})
    assert table["alice"].real == pytest.approx(10.0, rel=1e-3)
    start = table["alice"].last_update
    assert start is not None
    table = table.advanced(start, {})
    table = table.advanced(start + DAY, {})
    assert table["alice"].real == pytest.approx(5.0, rel=1e-3)
    table = table.advanced(start + 2 * DAY, {})
    assert table["alice"].real == pytest.approx(2.5, rel=1e-3)
    table = table.advanced(start + 60 * DAY, {})
    assert table["alice"].real == 0.5  # the best a user can be
    assert table["alice"].accumulated_usage == pytest.approx(10 * 10 * DAY, rel=1e-3)


def test_equal_users_split_the_pool_and_factors_weigh_shares() -> None:
    slots = [slot(f"slot{i}@a") for i in range(9)]
    jobs = [job(1, p, "alice") for p in range(20)] + [job(2, p, "bob") for p in range(20)]
    even = negotiate(jobs, slots[:8], PriorityTable(), now=T0)
    assert Counter(m.submitter for m in even.matches) == {
        "alice@example.com": 4,
        "bob@example.com": 4,
    }
    # condor_userprio -setfactor bob 2000: bob's EUP doubles, his share halves.
    table = PriorityTable().with_factor("bob@example.com", 2000.0)
    weighed = negotiate(jobs, slots, table, now=T0)
    assert Counter(m.submitter for m in weighed.matches) == {
        "alice@example.com": 6,
        "bob@example.com": 3,
    }
    (alice, bob) = weighed.submitters
    assert (alice.effective_priority, bob.effective_priority) == (500.0, 1000.0)
    assert alice.share == pytest.approx(2 / 3)


def test_fair_share_between_two_users_over_cycles() -> None:
    slots = [slot(f"slot{i}@a") for i in range(10)]
    alice = [job(1, p, "alice") for p in range(100)]
    bob = [job(2, p, "bob") for p in range(100)]
    table = PriorityTable().advanced(T0, {})

    # A day of alice alone: she gets the whole pool.
    first = negotiate(alice, slots, table, now=T0)
    assert len(first.matches) == 10
    table = table.with_usage_added({"alice@example.com": 10.0}, T0)
    now = T0 + DAY
    table = table.advanced(now, {})  # her jobs end; bob shows up

    split = []
    for _ in range(24 * 6):  # six days of hourly cycles; every job runs one hour
        result = negotiate(alice + bob, slots, table, now=now)
        got = Counter(m.submitter for m in result.matches)
        split.append((got["alice@example.com"], got["bob@example.com"]))
        used = Counter[str]()
        for m in result.matches:
            used[m.submitter] += int(m.weight)
        table = table.with_usage_added(used, now)
        now += 3600
        table = table.advanced(now, {})
    # At first bob, with the better priority, gets nearly everything ...
    assert split[0] == (1, 9)
    # ... and as alice's usage decays and bob's grows, they meet at half each.
    assert all(a + b == 10 for a, b in split)
    assert split[-1] == (5, 5)
    assert [a for a, _ in split[:48]] == sorted(a for a, _ in split[:48])
