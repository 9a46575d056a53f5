"""PBS (OpenPBS / PBS Professional): there is no PBS server to run here (Debian 12 has
none), so this tests the back end against captured-style output and fake commands.

The fixtures follow the documented output of `qstat -x -f -F json`:
- OpenPBS qstat(1B) man page, "-F json" and "-x" (openpbs/openpbs doc/man1/qstat.1B);
- a real `qstat -x -f -F json` record shown in buildtest's docs ("PBS" scheduler page,
  buildtest.readthedocs.io), which the field set below copies;
- job substates 91/92/93 (terminated/finished/failed) from openpbs/openpbs
  src/include/job.h, and Exit_status -29 = JOB_EXEC_KILL_WALLTIME (same header; the
  MetaCentrum PBS documentation lists it too);
- "qstat: Unknown Job Id <id>" with exit status 153 for ids the server does not know.
The fake qsub/qstat/qselect/qdel/qhold/qrls below keep their jobs in a JSON file and
answer in those formats.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from htgrid.backends.batch._base import BackendUnavailable, BatchJobSpec, JobState
from htgrid.backends.batch._command import CountingRunner
from htgrid.backends.batch.pbs import PBSBackend, parse_qstat_json

T = TypeVar("T")


def record(name: str, state: str, substate: int, **extra: Any) -> dict[str, Any]:
    """One job as `qstat -f -F json` shows it (fields as in the documented example)."""
    return {
        "Job_Name": name,
        "Job_Owner": "pbsuser@pbs",
        "resources_used": {
            "cpupercent": 0,
            "cput": "00:00:00",
            "mem": "5620kb",
            "ncpus": 1,
            "vmem": "25632kb",
            "walltime": "00:00:10",
        },
        "job_state": state,
        "queue": "workq",
        "server": "pbs",
        "Checkpoint": "u",
        "ctime": "Wed Mar 17 20:36:48 2021",
        "Error_Path": "pbs:/home/pbsuser/job.e40",
        "Hold_Types": "n",
        "Join_Path": "n",
        "Keep_Files": "n",
        "Mail_Points": "a",
        "mtime": "Wed Mar 17 20:36:58 2021",
        "Output_Path": "pbs:/home/pbsuser/job.o40",
        "Priority": 0,
        "qtime": "Wed Mar 17 20:36:48 2021",
        "Rerunable": "True",
        "Resource_List": {
            "ncpus": 1,
            "nodect": 1,
            "place": "scatter",
            "select": "1:ncpus=1",
            "walltime": "00:02:00",
        },
        "substate": substate,
        "Variable_List": {"PBS_O_HOME": "/home/pbsuser", "PBS_O_QUEUE": "workq"},
        "project": "_pbs_project_default",
        **extra,
    }


def document(jobs: dict[str, dict[str, Any]]) -> str:
    return json.dumps(
        {"timestamp": 1616013438, "pbs_version": "19.0.0", "pbs_server": "pbs", "Jobs": jobs},
        indent=4,
    )


QSTAT_JSON = document(
    {
        "40.pbs": record("done", "F", 92, Exit_status=0, run_count=1),
        "41.pbs": record("fail", "F", 93, Exit_status=3),
        "42.pbs": record(
            "wall", "F", 93, Exit_status=-29, comment="job killed: walltime 130 exceeded limit 120"
        ),
        "43.pbs": record("del", "F", 91, Exit_status=271),
        "44.pbs": record("sig", "F", 93, Exit_status=265),
        "45.pbs": record("run", "R", 42),
        "46.pbs": record("queued", "Q", 10),
        "47.pbs": record("held", "H", 20),
        "48.pbs": record("susp", "S", 45),
    }
)


def test_parse_qstat_json() -> None:
    ids = [f"{n}.pbs" for n in range(40, 49)]
    found = parse_qstat_json(QSTAT_JSON, [*ids, "99.pbs"])
    assert {k: v.state for k, v in found.items()} == {
        "40.pbs": JobState.COMPLETED,
        "41.pbs": JobState.COMPLETED,
        "42.pbs": JobState.COMPLETED,
        "43.pbs": JobState.REMOVED,
        "44.pbs": JobState.COMPLETED,
        "45.pbs": JobState.RUNNING,
        "46.pbs": JobState.IDLE,
        "47.pbs": JobState.HELD,
        "48.pbs": JobState.SUSPENDED,
    }
    assert (found["40.pbs"].exit_code, found["40.pbs"].wallclock_seconds) == (0, 10)
    assert found["41.pbs"].exit_code == 3
    assert found["42.pbs"].reason == "walltime exceeded"
    assert (found["44.pbs"].exit_code, found["44.pbs"].exit_signal) == (None, 9)
    # qsub's short server name against qstat's long one: matched on the sequence number.
    long = document({"12.pbs.example.com": record("x", "R", 42)})
    assert parse_qstat_json(long, ["12.pbs"])["12.pbs"].state == JobState.RUNNING


# --- fake PBS commands ---------------------------------------------------------------------

FAKE_PBS = r"""
import json, os, re, subprocess, sys

STATE = os.path.join(os.environ["FAKE_PBS"], "state.json")
prog, args = os.path.basename(sys.argv[0]).removesuffix(".py"), sys.argv[1:]
with open(STATE) as f:
    st = json.load(f)
with open(os.path.join(os.environ["FAKE_PBS"], "calls.log"), "a") as f:
    f.write(" ".join([prog, *args]) + "\n")
if st.get("down"):
    print(f"{prog}: cannot connect to server pbs (errno=111)", file=sys.stderr)
    sys.exit(2)
jobs = st["jobs"]

def save():
    with open(STATE, "w") as f:
        json.dump(st, f)

rc = 0
if prog == "qsub":
    script = args[-1]
    text = open(script).read()
    name = re.search(r"^#PBS -N (\S+)", text, re.M).group(1)
    jid = f"{st['next']}.pbs"
    st["next"] += 1
    jobs[jid] = {"Job_Name": name, "Job_Owner": "pbsuser@pbs", "queue": "workq",
                 "job_state": "H" if "-h" in args else "Q", "substate": 10}
    if os.environ.get("FAKE_PBS_RUN"):
        done = subprocess.run(["bash", script], env={**os.environ, "PBS_JOBID": jid},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        jobs[jid].update(job_state="F", substate=92, Exit_status=done.returncode)
    save()
    print(jid)
elif prog == "qstat" and "-B" in args:
    print("Server             Max   Tot   Que   Run   Hld   Wat   Trn   Ext Status")
    print("pbs                  0     3     1     1     1     0     0     0 Active")
elif prog == "qstat":
    ids = [a for a in args if re.match(r"\d+", a)]
    found = {}
    for jid in ids:
        if jid in jobs:
            found[jid] = jobs[jid]
        else:
            print(f"qstat: Unknown Job Id {jid}", file=sys.stderr)
            rc = 153
    print(json.dumps({"timestamp": 1616013438, "pbs_version": "2022.1.0",
                      "pbs_server": "pbs", "Jobs": found}, indent=4))
elif prog == "qselect":
    name = args[args.index("-N") + 1]
    for jid, job in jobs.items():
        if job["Job_Name"] == name:
            print(jid)
elif prog in ("qdel", "qhold", "qrls"):
    jid = args[-1]
    job = jobs.get(jid)
    if job is None:
        print(f"{prog}: Unknown Job Id {jid}", file=sys.stderr)
        rc = 153
    elif job["job_state"] == "F":
        print(f"{prog}: Job {jid} has finished", file=sys.stderr)
        rc = 35
    elif prog == "qdel":
        job.update(job_state="F", substate=91)
    elif prog == "qhold" and job["job_state"] == "R":
        print(f"qhold: Request invalid for state of job {jid}", file=sys.stderr)
        rc = 168
    else:
        job["job_state"] = "H" if prog == "qhold" else "Q"
    save()
sys.exit(rc)
"""


class FakePBS:
    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "state.json").read_text())
        return data

    def update(self, **changes: Any) -> None:
        (self.root / "state.json").write_text(json.dumps({**self.state, **changes}))

    def set_job(self, jid: str, **attrs: Any) -> None:
        state = self.state
        state["jobs"][jid].update(attrs)
        self.update(jobs=state["jobs"])


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePBS]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "fakepbs.py"
    program.write_text(FAKE_PBS)
    for name in ("qsub", "qstat", "qselect", "qdel", "qhold", "qrls"):
        # One program, told which command it is by the name it is run under.
        (bin_dir / f"{name}.py").symlink_to(program)
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} {bin_dir / name}.py "$@"\n')
        shim.chmod(0o755)
    (tmp_path / "state.json").write_text(json.dumps({"next": 100, "jobs": {}}))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PBS", str(tmp_path))
    yield FakePBS(tmp_path)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def make_spec(tmp_path: Path, tag: str, *args: str, **kw: Any) -> BatchJobSpec:
    job_dir = tmp_path / "jobs" / tag
    job_dir.mkdir(parents=True)
    return BatchJobSpec(
        tag=tag, job_dir=job_dir, executable="/bin/sh", arguments=("-c", *args), **kw
    )


def test_script_directives(fake: FakePBS, tmp_path: Path) -> None:
    backend = PBSBackend(registry=tmp_path / "reg")
    s = make_spec(
        tmp_path,
        "7.0",
        "true",
        runtime_seconds=3725,
        memory_mb=2000,
        cpus=4,
        nodes=2,
        gpus=2,
        queue="workq",
        project="p1",
        stdout="out",
    )
    assert run(backend.submit(s)) == "100.pbs"
    lines = [
        x
        for x in (s.job_dir / ".htgrid-job.pbs.sh").read_text().splitlines()
        if x.startswith("#PBS")
    ]
    assert lines == [
        "#PBS -N j7.0",
        "#PBS -S /bin/bash",
        f"#PBS -o {s.job_dir}/out",
        "#PBS -e /dev/null",
        "#PBS -q workq",
        "#PBS -A p1",
        "#PBS -l walltime=01:02:05",
        "#PBS -l select=2:ncpus=2:mem=1000mb:ngpus=1",
    ]


def test_lifecycle_through_fake_commands(fake: FakePBS, tmp_path: Path) -> None:
    runner = CountingRunner()
    backend = PBSBackend(registry=tmp_path / "reg", runner=runner)
    ids = [run(backend.submit(make_spec(tmp_path, f"{n}.0", "true"))) for n in range(5)]
    fake.set_job(ids[0], job_state="R", substate=42)
    fake.set_job(ids[1], job_state="F", substate=93, Exit_status=-29)
    runner.commands.clear()
    found = run(backend.status([*ids, "999.pbs"]))
    assert [c[0] for c in runner.commands] == ["qstat"]  # one query for all
    assert found[ids[0]].state == JobState.RUNNING
    assert (found[ids[1]].state, found[ids[1]].reason) == (JobState.COMPLETED, "walltime exceeded")
    assert found[ids[2]].state == JobState.IDLE
    assert found["999.pbs"].state == JobState.UNKNOWN
    # hold / release / cancel
    run(backend.hold(ids[2]))
    assert run(backend.status([ids[2]]))[ids[2]].state == JobState.HELD
    run(backend.resume(ids[2]))
    run(backend.cancel(ids[3]))
    assert run(backend.status([ids[3]]))[ids[3]].state == JobState.REMOVED
    run(backend.cancel(ids[3]))  # already finished: fine
    run(backend.cancel("998.pbs"))  # unknown: fine
    assert run(backend.find_by_tag("4.0")) == ids[4]
    assert run(backend.find_by_tag("nope.0")) is None


def test_exit_code_file_after_history_is_gone(
    fake: FakePBS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PBS_RUN", "1")  # the fake qsub runs the job script itself
    backend = PBSBackend(registry=tmp_path / "reg")
    nid = run(backend.submit(make_spec(tmp_path, "1.0", "exit 5")))
    assert run(backend.status([nid]))[nid].exit_code == 5
    fake.update(jobs={})  # the server's history has been purged
    found = run(backend.status([nid]))[nid]
    assert (found.state, found.exit_code, found.source) == (JobState.COMPLETED, 5, "exit-file")


def test_server_down_is_unavailable(fake: FakePBS, tmp_path: Path) -> None:
    backend = PBSBackend(registry=tmp_path / "reg")
    fake.update(down=True)
    with pytest.raises(BackendUnavailable):
        run(backend.status(["100.pbs"]))
    with pytest.raises(BackendUnavailable):
        run(backend.ping())
    with pytest.raises(BackendUnavailable):
        run(backend.submit(make_spec(tmp_path, "1.0", "true")))
