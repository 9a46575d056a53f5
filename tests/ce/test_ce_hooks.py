"""A CE's job router runs its hooks beside its passes, as HTCondor's does: a job whose
TRANSLATE_JOB hook is slow waits for it alone, and the other jobs are routed meanwhile."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.testing import PersonalPool, run_cli, wait_for

from ._ce import ce_pool, jobs

ROUTE = """
JOB_ROUTER_ROUTE_NAMES = Site
JOB_ROUTER_ROUTE_Site @=jrt
  REQUIREMENTS JobUniverse == 5
  GridResource = "batch fork"
@jrt
"""


def _hook(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _submit(ce: PersonalPool, work: Path, keyword: str) -> str:
    sub = work / f"{keyword}.sub"
    sub.write_text(f'executable = /bin/true\n+HookKeyword = "{keyword}"\nqueue\n')
    status, out, err = run_cli(ce.home, "submit", str(sub))
    assert status == 0, err
    return out.split("cluster")[-1].strip().rstrip(".") + ".0"


def _routed(ce: PersonalPool, source: str) -> dict[str, object] | None:
    return next((a for a in jobs(ce) if a.get("RoutedFromJobId") == source), None)


@pytest.mark.timeout(180)
def test_a_slow_translate_hook_holds_up_its_own_job_only(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    gate = work / "gate"
    # The job ad follows the route's line and the separator: print it back, tagged.
    echo = "sed '1,/^------$/d'; echo 'TranslatedBy = \"%s\"'\n"
    slow = _hook(
        work / "slow.sh",
        f"touch {work}/started\nwhile [ ! -e {gate} ]; do sleep 0.1; done\n" + echo % "slow",
    )
    fast = _hook(work / "fast.sh", echo % "fast")
    ce = ce_pool(
        tmp_path / "ce",
        ROUTE,
        SLOW_HOOK_TRANSLATE_JOB=slow,
        FAST_HOOK_TRANSLATE_JOB=fast,
    )
    with ce:
        try:
            _slow_and_fast(ce, work, gate)
        finally:
            gate.touch()  # the slow hook ends, whatever happened


def _slow_and_fast(ce: PersonalPool, work: Path, gate: Path) -> None:
    waiting = _submit(ce, work, "SLOW")
    wait_for(
        lambda: (work / "started").exists(),
        timeout=60,
        what="the slow hook started",
    )
    fast_job = _submit(ce, work, "FAST")
    copy = wait_for(lambda: _routed(ce, fast_job), timeout=60, what="the fast job routed")
    assert copy["TranslatedBy"] == "fast"
    assert _routed(ce, waiting) is None  # its hook still runs
    gate.touch()
    copy = wait_for(lambda: _routed(ce, waiting), timeout=60, what="the slow job routed")
    assert copy["TranslatedBy"] == "slow"
