"""`htgrid reconfig` (condor_reconfig): a CE's running daemons read htgrid.conf again, with
no restart: the job router its routes, the schedd its SYSTEM_PERIODIC_* policy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from htgrid.queue import JobStatus
from htgrid.testing import PersonalPool, run_cli, wait_for

from ._ce import ce_pool, jobs


def _route(tag: str) -> str:
    return (
        "JOB_ROUTER_ROUTE_NAMES = Site\n"
        "JOB_ROUTER_ROUTE_Site @=jrt\n"
        "  REQUIREMENTS JobUniverse == 5\n"
        '  GridResource = "batch fork"\n'
        f'  SET SiteRoute "{tag}"\n'
        "@jrt\n"
    )


def _submit(ce: PersonalPool, work: Path, name: str, universe: str) -> str:
    sub = work / f"{name}.sub"
    sub.write_text(
        f"universe = {universe}\nexecutable = /bin/sleep\narguments = 300\n"
        f"initialdir = {work}\nqueue\n"
    )
    status, out, err = run_cli(ce.home, "submit", str(sub))
    assert status == 0, err
    return out.split("cluster")[-1].strip().rstrip(".")


def _routed_copy(ce: PersonalPool, cluster: str) -> dict[str, object]:
    return wait_for(
        lambda: next(
            (a for a in jobs(ce) if a.get("RoutedFromJobId") == f"{cluster}.0"),
            None,
        ),
        timeout=60,
        what=f"job {cluster}.0 routed",
    )


def _pids(ce: PersonalPool) -> tuple[object, ...]:
    with ce.client() as schedd:
        master = schedd.health()["pid"]
    return master, ce.child_pid("job_router"), ce.child_pid("collector")


@pytest.mark.timeout(180)
def test_reconfig_makes_the_ce_take_a_new_route_and_policy_without_a_restart(
    tmp_path: Path,
) -> None:
    """htgrid.conf is rewritten with its old modification time (as `cp -p`, or a
    configuration manager that keeps times, leaves it): only the reconfig tells."""
    ce = ce_pool(tmp_path / "ce", _route("before"))
    work = tmp_path / "work"
    work.mkdir()
    with ce:
        first = _submit(ce, work, "first", "vanilla")
        assert _routed_copy(ce, first)["SiteRoute"] == "before"
        local = _submit(ce, work, "local", "local")
        wait_for(
            lambda: any(
                a.get("ClusterId") == int(local) and a.get("JobStatus") == JobStatus.RUNNING
                for a in jobs(ce)
            ),
            timeout=60,
            what="the local job running",
        )
        before = _pids(ce)
        assert None not in before

        conf = ce.home / "htgrid.conf"
        stat = conf.stat()
        text = conf.read_text().replace(_route("before"), _route("after"))
        conf.write_text(text + "SYSTEM_PERIODIC_HOLD = JobUniverse == 12\n")
        os.utime(conf, ns=(stat.st_atime_ns, stat.st_mtime_ns))

        status, out, err = run_cli(ce.home, "reconfig")
        assert status == 0, err
        assert f'Sent "Reconfig" command to local master (pid {before[0]})' in out
        # condor_reconfig is asynchronous: a job submitted before the router read the
        # routes again would take the old ones.
        router_log = ce.home / "log" / "JobRouterLog"
        wait_for(
            lambda: "routes reloaded" in router_log.read_text(),
            timeout=60,
            what="the router's reconfig",
        )
        second = _submit(ce, work, "second", "vanilla")
        assert _routed_copy(ce, second)["SiteRoute"] == "after"
        held = wait_for(
            lambda: next(
                (
                    a
                    for a in jobs(ce)
                    if a.get("ClusterId") == int(local) and a.get("JobStatus") == JobStatus.HELD
                ),
                None,
            ),
            timeout=60,
            what="the local job held by the new SYSTEM_PERIODIC_HOLD",
        )
        assert "SYSTEM_PERIODIC_HOLD" in str(held["HoldReason"])
        assert _pids(ce) == before  # no daemon was restarted
        assert _routed_copy(ce, first)["SiteRoute"] == "before"  # a routed job stays as it is


def test_reconfig_without_a_daemon_says_so(tmp_path: Path) -> None:
    status, _, err = run_cli(tmp_path, "reconfig")
    assert status == 1 and "no daemon runs" in err
