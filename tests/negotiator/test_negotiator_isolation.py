"""One bad job or slot ad does not stop a negotiation cycle, and a failing cycle does not
stop the negotiator: the bad job is reported for the queue to hold, the bad ad left out,
everything else matched as usual, each logged once.

The failure is injected where the cycle evaluates one ad (a bug that ad alone meets);
the deep chain is a real trigger of today (a Requirements too deep to compile).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

import htgrid.negotiator._cycle as cycle_module
import htgrid.negotiator.daemon as daemon_module
from htgrid.classad import ClassAd
from htgrid.negotiator import CycleResult, negotiate
from htgrid.negotiator.daemon import Negotiator
from htgrid.queue import JobId

from ._pool import job, slot

NOW = 1_700_000_000.0


def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evaluating the Requirements of an ad with `Poison = true` raises."""
    real = cycle_module.requirements_hold

    def requirements_hold(my: ClassAd, target: ClassAd) -> bool:
        if my.get("Poison") is True:
            raise TypeError("a bug this ad alone meets")
        return bool(real(my, target))

    monkeypatch.setattr(cycle_module, "requirements_hold", requirements_hold)


def test_a_job_that_cannot_be_evaluated_is_reported_and_the_others_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    poison(monkeypatch)
    jobs = [job(1, 0), job(2, 0, owner="bob", extra="Poison = true"), job(3, 0, owner="carol")]
    jobs += [job(2, 1, owner="bob", extra="Poison = true")]  # its autocluster's next job
    result = negotiate(jobs, [slot(f"s{i}@a") for i in range(3)], now=NOW)

    assert sorted(str(m.job_id) for m in result.matches) == ["1.0", "3.0"]
    assert [(f.job_id, f.problem, f.held) for f in result.failures] == [
        (JobId(2, 0), "internal error (TypeError: a bug this ad alone meets)", False),
        (JobId(2, 1), "internal error (TypeError: a bug this ad alone meets)", False),
    ]
    assert result.rejections == ()  # the bad jobs are not "unmatched": they are out
    assert result.bad_machines == ()


def test_a_slot_that_cannot_be_evaluated_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    poison(monkeypatch)
    slots = [slot("bad@a", extra="Poison = true\nKFlops = 99999999"), slot("good@a")]
    result = negotiate([job(1, 0)], slots, now=NOW)

    assert [m.machine for m in result.matches] == ["good@a"]
    assert [(b.name, b.problem) for b in result.bad_machines] == [
        ("bad@a", "internal error (TypeError: a bug this ad alone meets)")
    ]
    assert result.failures == ()


def test_a_requirements_too_deep_to_compile_spoils_only_its_own_job() -> None:
    deep = "Requirements = " + " + ".join(["1"] * 8000) + " > 0"
    jobs = [job(1, 0, extra=deep), job(2, 0, owner="bob")]
    result = negotiate(jobs, [slot("s1@a"), slot("s2@a")], now=NOW)
    matched = sorted(str(m.job_id) for m in result.matches)
    # Should the evaluator learn to take such a chain, job 1.0 simply matches too.
    if result.failures:
        assert matched == ["2.0"]
        assert [str(f.job_id) for f in result.failures] == ["1.0"]
    else:
        assert matched == ["1.0", "2.0"]


class Queue:
    def __init__(self, jobs: list[ClassAd]) -> None:
        self.jobs = jobs
        self.reports: list[CycleResult] = []

    async def idle_jobs(self) -> Sequence[ClassAd]:
        return self.jobs

    async def report(self, result: CycleResult) -> None:
        self.reports.append(result)


class Machines:
    def __init__(self, ads: list[ClassAd]) -> None:
        self.ads = ads

    async def machine_ads(self) -> Sequence[ClassAd]:
        return self.ads

    async def room_ads(self) -> Sequence[ClassAd]:
        return self.ads


class Clock:
    def __init__(self, cycles: int) -> None:
        self.now = NOW
        self.left = cycles

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0) or 60.0
        self.left -= 1
        if self.left <= 0:
            raise asyncio.CancelledError


def run_cycles(negotiator: Negotiator) -> None:
    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await negotiator.run()

    asyncio.run(main())


def test_a_cycle_that_fails_is_logged_once_and_the_next_cycles_come(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> CycleResult:
        calls.append(1)
        raise KeyError("a bug no one ad can be blamed for")

    monkeypatch.setattr(daemon_module, "negotiate", failing)
    caplog.set_level(logging.INFO, logger="htgrid.negotiator")
    negotiator = Negotiator(Queue([job(1, 0)]), Machines([slot("s@a")]), clock=Clock(4))
    run_cycles(negotiator)

    assert len(calls) == 4  # the negotiator went on cycling: no crash, no restart
    failed = [r for r in caplog.records if "negotiation cycle failed" in r.getMessage()]
    assert len(failed) == 1
    assert negotiator.failing == "internal error (KeyError: 'a bug no one ad can be blamed for')"


def test_a_bad_slot_ad_is_logged_once_over_many_cycles(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    poison(monkeypatch)
    caplog.set_level(logging.INFO, logger="htgrid.negotiator")
    queue = Queue([job(1, p) for p in range(3)])
    machines = Machines([slot("bad@a", extra="Poison = true"), slot("good@a")])
    run_cycles(Negotiator(queue, machines, clock=Clock(3)))

    assert len(queue.reports) == 3
    assert all([m.machine for m in r.matches] in (["good@a"], []) for r in queue.reports)
    left_out = [r for r in caplog.records if "bad@a is left out" in r.getMessage()]
    assert len(left_out) == 1
