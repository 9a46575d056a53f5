"""Grid Engine: parsers on output captured from Son of Grid Engine 8.1.9 (Debian 12),
then the back end against the real thing (.ci/sge-up.sh: one exec host, scheduling every
second, accounting flushed every second)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from htgrid.backends.batch._base import BatchJobSpec, JobState, NativeStatus
from htgrid.backends.batch._command import CountingRunner
from htgrid.backends.batch.sge import SGEBackend, parse_qacct, parse_qstat_xml, sge_state

T = TypeVar("T")

# --- parsers, on real output ------------------------------------------------------------

QSTAT_XML = """\
<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
    <job_list state="running">
      <JB_job_number>4</JB_job_number>
      <JAT_prio>0.50000</JAT_prio>
      <JB_name>walltime</JB_name>
      <JB_owner>root</JB_owner>
      <state>r</state>
      <JAT_start_time>2026-11-21T16:34:16</JAT_start_time>
      <queue_name>all.q@localhost</queue_name>
      <slots>1</slots>
    </job_list>
  </queue_info>
  <job_info>
    <job_list state="pending">
      <JB_job_number>5</JB_job_number>
      <JAT_prio>0.00000</JAT_prio>
      <JB_name>held</JB_name>
      <JB_owner>root</JB_owner>
      <state>hqw</state>
      <JB_submission_time>2026-11-21T16:34:16</JB_submission_time>
      <queue_name></queue_name>
      <slots>1</slots>
    </job_list>
  </job_info>
</job_info>
"""

# Two records from `qacct -j`, trimmed of the rusage lines.
QACCT = """\
==============================================================
qname        all.q
hostname     localhost
owner        root
jobname      walltime
jobnumber    4
failed       37  : qmaster enforced h_rt, h_cpu, or h_vmem limit
exit_status  137                  (Killed)
ru_wallclock 4s
category     -l h_rt=3
==============================================================
qname        all.q
hostname     localhost
owner        root
jobname      torm
jobnumber    6
failed       100 : assumedly after job
exit_status  137                  (Killed)
ru_wallclock 2s
category     NONE
==============================================================
qname        all.q
jobname      true
jobnumber    2
failed       0
exit_status  3
ru_wallclock 0s
"""


def test_parse_qstat_xml_and_states() -> None:
    jobs = parse_qstat_xml(QSTAT_XML)
    assert jobs == {"4": ("r", "walltime"), "5": ("hqw", "held")}
    assert [sge_state(c)[0] for c in ("qw", "hqw", "r", "t", "Eqw", "dr", "s", "Rr")] == [
        JobState.IDLE,
        JobState.HELD,
        JobState.RUNNING,
        JobState.RUNNING,
        JobState.HELD,
        JobState.REMOVED,
        JobState.SUSPENDED,
        JobState.RUNNING,
    ]


def test_parse_qacct() -> None:
    found = parse_qacct(QACCT, ["2", "4", "6", "9"])
    assert (found["4"].state, found["4"].reason, found["4"].exit_signal) == (
        JobState.COMPLETED,
        "walltime exceeded",
        9,
    )
    assert found["6"].state == JobState.REMOVED
    assert (found["2"].state, found["2"].exit_code) == (JobState.COMPLETED, 3)
    assert "9" not in found


# --- the real Grid Engine -----------------------------------------------------------------

# The real batch systems are one host's, with a CPU or two: their tests never run side by
# side under pytest -n (tests/README.md).
pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("batch-systems")]
sge = pytest.mark.usefixtures("sge_cluster")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def new_tag() -> str:
    return f"t{uuid.uuid4().hex[:12]}.0"


async def wait_until(
    backend: SGEBackend, nid: str, done: Callable[[NativeStatus], bool], seconds: float
) -> tuple[NativeStatus, set[JobState]]:
    seen: set[JobState] = set()
    deadline = time.monotonic() + seconds
    while True:
        status = (await backend.status([nid]))[nid]
        seen.add(status.state)
        if done(status):
            return status, seen
        assert time.monotonic() < deadline, f"job {nid} still {status} after {seconds}s"
        await asyncio.sleep(0.3)


def finished(s: NativeStatus) -> bool:
    return s.state in (JobState.COMPLETED, JobState.REMOVED)


@dataclass
class Env:
    registry: Path
    root: Path

    def backend(self, **kw: Any) -> SGEBackend:
        return SGEBackend(registry=self.registry, **kw)

    def spec(self, *args: str, **kw: Any) -> BatchJobSpec:
        tag = new_tag()
        job_dir = self.root / tag
        job_dir.mkdir()
        return BatchJobSpec(
            tag=tag,
            job_dir=job_dir,
            executable="/bin/sh",
            arguments=("-c", *args),
            stdout="out",
            stderr="err",
            **kw,
        )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, sge_cluster: None) -> Env:
    root = tmp_path_factory.mktemp("sge")
    return Env(registry=root / "registry", root=root)


@sge
def test_submit_status_transitions_and_exit_code(env: Env) -> None:
    backend = env.backend()
    s = env.spec(
        'sleep 2; echo "$GREETING $1"; exit 3', "sh", "world", environment={"GREETING": "hi"}
    )
    nid = run(backend.submit(s))
    status, seen = run(wait_until(backend, nid, finished, 60))
    assert (status.state, status.exit_code, status.exit_signal) == (JobState.COMPLETED, 3, None)
    assert JobState.RUNNING in seen
    assert (s.job_dir / "out").read_text() == "hi world\n"


@sge
def test_walltime_kill_is_reported_as_walltime(env: Env) -> None:
    backend = env.backend()
    nid = run(backend.submit(env.spec("sleep 300", runtime_seconds=3)))
    status, _ = run(wait_until(backend, nid, lambda s: s.source == "history", 60))
    # h_rt kills with SIGKILL: the wrapper writes nothing, qacct says why.
    assert (status.state, status.reason, status.exit_signal) == (
        JobState.COMPLETED,
        "walltime exceeded",
        9,
    )


@sge
def test_cancel_reports_removed(env: Env) -> None:
    backend = env.backend()
    nid = run(backend.submit(env.spec("sleep 300")))
    run(wait_until(backend, nid, lambda s: s.state == JobState.RUNNING, 60))
    run(backend.cancel(nid))
    status, _ = run(wait_until(backend, nid, lambda s: s.source == "history", 60))
    assert status.state == JobState.REMOVED
    run(backend.cancel(nid))  # gone already: not an error


@sge
def test_hold_and_resume(env: Env) -> None:
    backend = env.backend()
    nid = run(backend.submit(env.spec("exit 0", extra_args="-h")))
    run(wait_until(backend, nid, lambda s: s.state == JobState.HELD, 30))
    run(backend.resume(nid))
    status, _ = run(wait_until(backend, nid, finished, 60))
    assert (status.state, status.exit_code) == (JobState.COMPLETED, 0)


@sge
def test_find_by_tag_in_queue_then_history(env: Env) -> None:
    backend = env.backend()
    s = env.spec("sleep 1")
    nid = run(backend.submit(s))
    assert run(backend.find_by_tag(s.tag)) == nid
    run(wait_until(backend, nid, finished, 60))
    deadline = time.monotonic() + 30
    # Gone from qstat; found in qacct once accounting has flushed.
    while (found := run(backend.find_by_tag(s.tag))) is None:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert found == nid
    assert run(backend.find_by_tag(new_tag())) is None


@sge
def test_job_gone_from_queue_is_found_in_history(env: Env) -> None:
    backend = env.backend()
    nid = run(backend.submit(env.spec("exit 7")))
    status, _ = run(wait_until(backend, nid, finished, 60))
    assert (status.exit_code, status.source) == (7, "exit-file")
    # Without the exit-code file, qacct answers (within its flush time).
    (env.registry / "sge" / nid).unlink()
    status, _ = run(wait_until(backend, nid, lambda s: s.source == "history", 30))
    assert (status.state, status.exit_code) == (JobState.COMPLETED, 7)


@sge
def test_many_jobs_one_status_command(env: Env) -> None:
    runner = CountingRunner()
    backend = env.backend(runner=runner)

    async def scenario() -> None:
        specs = [env.spec("true", extra_args="-h") for _ in range(30)]
        ids = list(await asyncio.gather(*(backend.submit(s) for s in specs)))
        try:
            for subset in (ids[:3], ids):
                runner.commands.clear()
                found = await backend.status(subset)
                assert {s.state for s in found.values()} == {JobState.HELD}
                assert [c[0] for c in runner.commands] == ["qstat"]
        finally:
            await asyncio.gather(*(backend.cancel(nid) for nid in ids))

    run(scenario())
