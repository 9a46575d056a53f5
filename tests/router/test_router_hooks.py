"""The job router's hooks (<KEYWORD>_HOOK_TRANSLATE_JOB, _UPDATE_JOB_INFO, _JOB_FINALIZE,
_JOB_CLEANUP) with HTCondor's stdin/stdout contract, over a real queue."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.queue import Identity, JobId, JobNotFound, JobQueue, JobStatus
from htgrid.router import HookKind, HookRunner, JobRouter, RouterConfig, RouterHooks
from htgrid.testing import wait_for

from .test_router import ROUTES, Clock, only_routed, routed_of

ME = Identity(getpass.getuser())


def hook(tmp_path: Path, name: str, body: str) -> str:
    """A Python hook: `text` is its stdin, `out` the directory for what it saw."""
    path = tmp_path / name
    path.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\nout = pathlib.Path({str(tmp_path)!r})\n"
        f"text = sys.stdin.read()\n{body}"
    )
    path.chmod(0o755)
    return str(path)


def router(queue: JobQueue, **hooks: str) -> JobRouter:
    knobs = {
        **ROUTES,
        "ALLOW_ROOT_JOBS": "true",
        "JOB_ROUTER_HOOK_KEYWORD": "SITE",
        **{f"SITE_HOOK_{kind}": path for kind, path in hooks.items()},
        "SITE_ATTRS_TO_COPY": "BatchSiteState",
    }
    return JobRouter(queue, RouterConfig.from_knobs(knobs), clock=Clock())


def submit(queue: JobQueue, cpus: int = 8) -> JobId:
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "RequestCpus": cpus})
    return JobId(queue.submit(ME, ad), 0)


def test_the_translate_hook_gets_the_route_and_job_and_makes_the_routed_job(
    queue: JobQueue, tmp_path: Path
) -> None:
    translate = hook(
        tmp_path,
        "translate",
        'route, _, job = text.partition("\\n------\\n")\n'
        '(out / "route.txt").write_text(route)\n'
        '(out / "job.txt").write_text(job)\n'
        "sys.stdout.write(job + 'TranslatedBy = \"hook\"\\nRequestMemory = 4321\\n')\n",
    )
    src = submit(queue)
    router(queue, TRANSLATE_JOB=translate).cycle()
    copy = queue.get(only_routed(queue, src))
    assert copy["TranslatedBy"] == "hook" and copy["RequestMemory"] == 4321
    # The route's own transform still applies after the hook.
    assert copy["BatchQueue"] == "wide" and copy["GridResource"] == "batch slurm"
    assert (tmp_path / "route.txt").read_text() == (
        '[ Name = "Big"; TargetUniverse = 9; GridResource = "batch slurm" ]'
    )
    assert f"ClusterId = {src.cluster}\n" in (tmp_path / "job.txt").read_text()


def test_a_failing_translate_hook_leaves_the_job_unrouted_and_unclaimed(
    queue: JobQueue, tmp_path: Path
) -> None:
    src = submit(queue)
    router(queue, TRANSLATE_JOB=hook(tmp_path, "translate", "sys.exit(2)\n")).cycle()
    source = queue.get(src)
    assert not routed_of(queue, src) and source["JobStatus"] == JobStatus.IDLE
    assert source.get("Managed") is None
    garbage = hook(tmp_path, "garbage", 'print("this is not an ad")\n')
    router(queue, TRANSLATE_JOB=garbage).cycle()
    assert not routed_of(queue, src)


def test_update_job_info_sets_the_routed_job_and_attrs_to_copy_the_source(
    queue: JobQueue, tmp_path: Path
) -> None:
    update = hook(
        tmp_path,
        "update",
        '(out / "update.txt").write_text(text)\n'
        'print(\'BatchSiteState = "queued at the site"\')\nprint("JobStatus = 4")\n',
    )
    src = submit(queue)
    r = router(queue, UPDATE_JOB_INFO=update)
    r.cycle()
    copy = only_routed(queue, src)
    r.cycle()
    assert queue.get(copy)["BatchSiteState"] == "queued at the site"
    assert queue.get(copy)["JobStatus"] == JobStatus.IDLE  # not the hook's to set
    assert queue.get(src)["BatchSiteState"] == "queued at the site"  # SITE_ATTRS_TO_COPY
    assert f'RoutedFromJobId = "{src}"' in (tmp_path / "update.txt").read_text()


def test_finalize_and_cleanup_hooks_at_the_end_of_a_routed_job(
    queue: JobQueue, tmp_path: Path
) -> None:
    finalize = hook(
        tmp_path,
        "finalize",
        'source, _, dest = text.partition("------\\n")\n'
        '(out / "finalize.txt").write_text(text)\n'
        "print('FinalizedBy = \"hook\"')\n",
    )
    cleanup = hook(tmp_path, "cleanup", '(out / "cleanup.txt").write_text(text)\n')
    src = submit(queue)
    r = router(queue, JOB_FINALIZE=finalize, JOB_CLEANUP=cleanup)
    r.cycle()
    copy = only_routed(queue, src)
    queue.job_started(copy)
    queue.job_exited(copy, 0)
    r.cycle()
    with pytest.raises(JobNotFound):
        queue.get(src)  # completed, gone to the history
    done = queue.history(f"ClusterId == {src.cluster}")[0]
    assert done["FinalizedBy"] == "hook" and done["ExitCode"] == 0
    seen = (tmp_path / "finalize.txt").read_text()
    source_part, dest_part = seen.split("------\n")
    assert f"ClusterId = {src.cluster}\n" in source_part
    assert f"ClusterId = {copy.cluster}\n" in dest_part and "ExitCode = 0" in dest_part
    assert f'RoutedFromJobId = "{src}"' in (tmp_path / "cleanup.txt").read_text()


def test_a_failing_finalize_hook_sends_the_source_to_be_routed_again(
    queue: JobQueue, tmp_path: Path
) -> None:
    src = submit(queue)
    r = router(queue, JOB_FINALIZE=hook(tmp_path, "finalize", "sys.exit(3)\n"))
    r.cycle()
    first = only_routed(queue, src)
    queue.job_started(first)
    queue.job_exited(first, 0)
    r.cycle()
    assert queue.get(src)["JobStatus"] == JobStatus.IDLE
    r.cycle()
    assert only_routed(queue, src) != first


def test_hooks_in_threads_beside_the_passes_hold_up_their_own_pair_only(
    queue: JobQueue, tmp_path: Path
) -> None:
    """As the daemon runs them: a pass starts a finalize hook and goes on; the source
    completes at a pass after the hook ends (which rings the router)."""
    gate = tmp_path / "gate"
    finalize = hook(
        tmp_path,
        "finalize",
        "import time\n"
        # Waits for the gate (20 s at most: a pass that waited for it fails the test).
        f"for _ in range(400):\n    if pathlib.Path({str(gate)!r}).exists(): break\n"
        "    time.sleep(0.05)\n"
        "print('FinalizedBy = \"hook\"')\n",
    )
    cleanup = hook(tmp_path, "cleanup", '(out / "cleanup.txt").write_text(text)\n')
    rung: list[int] = []
    r = router(queue, JOB_FINALIZE=finalize, JOB_CLEANUP=cleanup)
    r.runner = HookRunner(workers=2, wake=lambda: rung.append(1))
    slow, other = submit(queue), submit(queue)
    r.cycle()
    for src in (slow, other):
        copy = only_routed(queue, src)
        queue.job_started(copy)
        queue.job_exited(copy, 0)
    try:
        r.cycle()  # both finalize hooks start; neither pair waits for them in the pass
        assert queue.get(slow)["JobStatus"] == JobStatus.IDLE  # not completed yet
        assert r.runner.running() == 2 and not rung
    finally:
        gate.touch()
    wait_for(lambda: len(rung) >= 2, timeout=30, what="the hooks ended")
    r.cycle()
    for src in (slow, other):
        assert queue.history(f"ClusterId == {src.cluster}")[0]["FinalizedBy"] == "hook"
    wait_for(lambda: (tmp_path / "cleanup.txt").exists(), timeout=30, what="the cleanup hook")


def test_htgrid_conf_takes_the_hooks_of_a_keyword(tmp_path: Path) -> None:
    (tmp_path / "htgrid.conf").write_text(
        "JOB_ROUTER_HOOK_KEYWORD = SITE\nSITE_HOOK_TRANSLATE_JOB = /opt/site/translate\n"
        "SITE_HOOK_JOB_CLEANUP = /opt/site/cleanup\nSITE_ATTRS_TO_COPY = A, B\n"
    )
    hooks = RouterHooks(RouterConfig.load(tmp_path).knobs)
    job = ClassAd({"Owner": "alice"})
    assert hooks.path(HookKind.TRANSLATE_JOB, job) == "/opt/site/translate"
    assert hooks.path(HookKind.UPDATE_JOB_INFO, job) is None
    assert hooks.attrs_to_copy(job) == ("A", "B")
    job["HookKeyword"] = "OTHER"  # the job's own keyword wins
    assert hooks.path(HookKind.TRANSLATE_JOB, job) is None


def test_the_shipped_classad2_hook_translates_a_routed_job(queue: JobQueue, tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "classad" / "route_hook.py"
    translate = tmp_path / "translate"
    translate.write_text(f"#!/bin/sh\nexec {sys.executable} {example}\n")
    translate.chmod(0o755)
    knobs = {
        "JOB_ROUTER_ROUTE_NAMES": "Slurm_Short",
        "JOB_ROUTER_ROUTE_Slurm_Short": 'GridResource = "batch slurm"',
        "ALLOW_ROOT_JOBS": "true",
        "JOB_ROUTER_HOOK_KEYWORD": "SITE",
        "SITE_HOOK_TRANSLATE_JOB": str(translate),
    }
    src = JobId(
        queue.submit(
            ME,
            ClassAd(
                {"Cmd": "/bin/true", "JobUniverse": 5, "RequestMemory": 512, "Requirements": True}
            ),
        ),
        0,
    )
    JobRouter(queue, RouterConfig.from_knobs(knobs), clock=Clock()).cycle()
    copy = queue.get(only_routed(queue, src))
    assert copy["BatchQueue"] == "short" and copy["RequestMemory"] == 2048
    assert copy.eval("BatchRuntime") == 7200 and copy["RoutedTo"] == "batch slurm"
    assert copy["GridResource"] == "batch slurm" and copy["SiteRoute"] == "Slurm_Short"
