"""LSF: there is no LSF to run here (it is not free software), so this tests the back end
against documented output and fake commands.

The fixtures follow IBM Spectrum LSF 10.1 documentation:
- bjobs -o (custom fields, field names) and bjobs -json (the {"COMMAND", "JOBS",
  "RECORDS"} document; LSF 10.1.0.2+): ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/
  bjobs.o.1.html and bjobs.json.1.html;
- LSB_BJOBS_CONSISTENT_EXIT_CODE ("Job <123> is not found", exit 255):
  lsf_config_ref/lsf.conf.lsb_bjobs_consistent_exit_code.5.html;
- bhist -l (event history, lines wrapped at 80 columns): lsf_command_ref/bhist.1.html;
- exit reasons TERM_RUNLIMIT / TERM_OWNER as bjobs -l and the JSON EXIT_REASON show them.
The fake bsub/bjobs/bhist/bkill/bstop/bresume/bqueues keep their jobs in a JSON file.
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
from htgrid.backends.batch.lsf import LSFBackend, parse_bhist, parse_bjobs_json

T = TypeVar("T")

BJOBS_JSON = """\
{
  "COMMAND":"bjobs",
  "JOBS":7,
  "RECORDS":[
    {"JOBID":"22005","STAT":"DONE","EXIT_CODE":"","EXIT_REASON":"","JOB_NAME":"ls -l","RUN_TIME":"1 second(s)"},
    {"JOBID":"22006","STAT":"EXIT","EXIT_CODE":"3","EXIT_REASON":"","JOB_NAME":"a","RUN_TIME":"12 second(s)"},
    {"JOBID":"22007","STAT":"EXIT","EXIT_CODE":"140","EXIT_REASON":"TERM_RUNLIMIT: job killed after reaching LSF run time limit","JOB_NAME":"b","RUN_TIME":"601 second(s)"},
    {"JOBID":"22008","STAT":"EXIT","EXIT_CODE":"130","EXIT_REASON":"TERM_OWNER: job killed by owner","JOB_NAME":"c","RUN_TIME":"5 second(s)"},
    {"JOBID":"22009","STAT":"RUN","EXIT_CODE":"","EXIT_REASON":"","JOB_NAME":"d","RUN_TIME":"16038 second(s)"},
    {"JOBID":"22010","STAT":"PSUSP","EXIT_CODE":"","EXIT_REASON":"","JOB_NAME":"hold_job","RUN_TIME":"0 second(s)"},
    {"JOBID":"22011","STAT":"PEND","EXIT_CODE":"","EXIT_REASON":"","JOB_NAME":"e","RUN_TIME":"0 second(s)"},
    {"JOBID":"22012","ERROR":"Job <22012> is not found"}
  ]
}
"""

BHIST = """\

Job <1234>, User <user1>, Project <default>, Command <sleep 300>
Mon Oct 28 10:02:11 2024: Submitted from host <hostA>, to Queue <normal>, CWD <$H
                     OME/work>;
Mon Oct 28 10:02:12 2024: Dispatched 1 Task(s) on Host(s) <hostB>, Allocated 1 Sl
                     ot(s) on Host(s) <hostB>;
Mon Oct 28 10:02:12 2024: Starting (Pid 12345);
Mon Oct 28 10:12:12 2024: Exited with exit code 140. The CPU time used is 0.1 sec
                     onds;
Mon Oct 28 10:12:12 2024: Completed <exit>; TERM_RUNLIMIT: job killed after reac
                     hing LSF run time limit;

Summary of time in seconds spent in various states by  Mon Oct 28 10:12:12 2024
  PEND     PSUSP    RUN      USUSP    SSUSP    UNKWN    TOTAL
  1        0        600      0        0        0        601
------------------------------------------------------------------------------

Job <1235>, User <user1>, Project <default>, Command <./run.sh>
Mon Oct 28 11:00:00 2024: Submitted from host <hostA>, to Queue <normal>, CWD <$H
                     OME/work>;
Mon Oct 28 11:00:05 2024: Done successfully. The CPU time used is 2.0 seconds;

Summary of time in seconds spent in various states by  Mon Oct 28 11:00:05 2024
  PEND     PSUSP    RUN      USUSP    SSUSP    UNKWN    TOTAL
  1        0        4        0        0        0        5
------------------------------------------------------------------------------

Job <1236>, User <user1>, Project <default>, Command <sleep 1000>
Mon Oct 28 12:00:00 2024: Submitted from host <hostA>, to Queue <normal>, CWD <$H
                     OME/work>;
Mon Oct 28 12:00:09 2024: Signal <KILL> requested by user or administrator <user1>;
Mon Oct 28 12:00:09 2024: Exited by signal 9. The CPU time used is 0.0 seconds;
Mon Oct 28 12:00:09 2024: Completed <exit>; TERM_OWNER: job killed by owner;
------------------------------------------------------------------------------

Job <1237>, User <user1>, Project <default>, Command <sleep 1000>
Mon Oct 28 12:00:00 2024: Submitted from host <hostA>, to Queue <normal>, CWD <$H
                     OME/work>;
"""


def test_parse_bjobs_json() -> None:
    found = parse_bjobs_json(BJOBS_JSON, [str(n) for n in range(22005, 22013)])
    assert {k: v.state for k, v in found.items()} == {
        "22005": JobState.COMPLETED,
        "22006": JobState.COMPLETED,
        "22007": JobState.COMPLETED,
        "22008": JobState.REMOVED,
        "22009": JobState.RUNNING,
        "22010": JobState.HELD,
        "22011": JobState.IDLE,
    }
    assert (found["22005"].exit_code, found["22006"].exit_code) == (0, 3)
    assert found["22007"].reason == "walltime exceeded"
    assert found["22009"].wallclock_seconds == 16038


def test_parse_bhist_long_format() -> None:
    found = parse_bhist(BHIST, ["1234", "1235", "1236", "1237"])
    assert (found["1234"].state, found["1234"].reason, found["1234"].exit_code) == (
        JobState.COMPLETED,
        "walltime exceeded",
        140,
    )
    assert (found["1235"].state, found["1235"].exit_code) == (JobState.COMPLETED, 0)
    assert found["1236"].state == JobState.REMOVED
    assert "1237" not in found  # no end in this log: not final


# --- fake LSF commands ---------------------------------------------------------------------

FAKE_LSF = r"""
import json, os, re, subprocess, sys

STATE = os.path.join(os.environ["FAKE_LSF"], "state.json")
prog, args = os.path.basename(sys.argv[0]).removesuffix(".py"), sys.argv[1:]
with open(STATE) as f:
    st = json.load(f)
if st.get("down"):
    print("LSF is down. Please wait ...", file=sys.stderr)
    sys.exit(255)
jobs = st["jobs"]

def save():
    with open(STATE, "w") as f:
        json.dump(st, f)

def emit(records):
    print(json.dumps({"COMMAND": "bjobs", "JOBS": len(records), "RECORDS": records}, indent=2))

rc = 0
if prog == "bsub":
    text = sys.stdin.read()
    name = re.search(r"^#BSUB -J (\S+)", text, re.M).group(1)
    jid = str(st["next"])
    st["next"] += 1
    jobs[jid] = {"JOBID": jid, "STAT": "PSUSP" if "-H" in args else "PEND", "EXIT_CODE": "",
                 "EXIT_REASON": "", "JOB_NAME": name, "RUN_TIME": "0 second(s)"}
    if os.environ.get("FAKE_LSF_RUN"):
        done = subprocess.run(["bash"], input=text, text=True, env={**os.environ, "LSB_JOBID": jid},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        jobs[jid].update(STAT="DONE" if done.returncode == 0 else "EXIT",
                         EXIT_CODE=str(done.returncode) if done.returncode else "")
    save()
    print(f"Job <{jid}> is submitted to default queue <normal>.")
elif prog == "bjobs" and "-J" in args:
    name = args[args.index("-J") + 1]
    hits = [{"JOBID": j["JOBID"]} for j in jobs.values() if j["JOB_NAME"] == name]
    if hits:
        emit(hits)
    else:
        print(f"Job <{name}> is not found", file=sys.stderr)
        rc = 255
elif prog == "bjobs":
    fields = args[args.index("-o") + 1].upper().split()
    ids = [a for a in args if a.isdigit()]
    records = []
    for jid in ids:
        if jid in jobs:
            records.append({k: jobs[jid].get(k, "") for k in fields})
        else:
            records.append({"JOBID": jid, "ERROR": f"Job <{jid}> is not found"})
    emit(records)
elif prog == "bhist":
    for jid in [a for a in args if a.isdigit()]:
        print(st.get("history", {}).get(jid, ""))
elif prog in ("bkill", "bstop", "bresume"):
    jid = args[-1]
    job = jobs.get(jid)
    if job is None:
        print(f"Job <{jid}>: No matching job found", file=sys.stderr)
        rc = 255
    elif job["STAT"] in ("DONE", "EXIT"):
        print(f"Job <{jid}>: Job has already finished", file=sys.stderr)
        rc = 255
    elif prog == "bkill":
        job.update(STAT="EXIT", EXIT_CODE="130", EXIT_REASON="TERM_OWNER: job killed by owner")
    else:
        job["STAT"] = {"bstop": {"PEND": "PSUSP", "RUN": "USUSP"},
                       "bresume": {"PSUSP": "PEND", "USUSP": "RUN"}}[prog].get(job["STAT"], job["STAT"])
    save()
elif prog == "bqueues":
    print("QUEUE_NAME      PRIO STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN  SUSP")
    print("normal           30  Open:Active       -    -    -    -     0     0     0     0")
sys.exit(rc)
"""


class FakeLSF:
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
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLSF]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "fakelsf.py"
    program.write_text(FAKE_LSF)
    for name in ("bsub", "bjobs", "bhist", "bkill", "bstop", "bresume", "bqueues"):
        # One program, told which command it is by the name it is run under.
        (bin_dir / f"{name}.py").symlink_to(program)
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} {bin_dir / name}.py "$@"\n')
        shim.chmod(0o755)
    (tmp_path / "state.json").write_text(json.dumps({"next": 500, "jobs": {}}))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LSF", str(tmp_path))
    yield FakeLSF(tmp_path)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def make_spec(tmp_path: Path, tag: str, *args: str, **kw: Any) -> BatchJobSpec:
    job_dir = tmp_path / "jobs" / tag
    job_dir.mkdir(parents=True)
    return BatchJobSpec(
        tag=tag, job_dir=job_dir, executable="/bin/sh", arguments=("-c", *args), **kw
    )


def test_script_directives(fake: FakeLSF, tmp_path: Path) -> None:
    backend = LSFBackend(registry=tmp_path / "reg")
    s = make_spec(
        tmp_path,
        "7.0",
        "true",
        runtime_seconds=3725,
        memory_mb=2000,
        cpus=8,
        nodes=2,
        gpus=2,
        queue="normal",
        project="p1",
        stdout="out",
        stderr="err",
    )
    assert run(backend.submit(s)) == "500"
    text = (s.job_dir / ".htgrid-job.lsf.sh").read_text()
    assert [x for x in text.splitlines() if x.startswith("#BSUB")] == [
        "#BSUB -J 7.0",
        f"#BSUB -cwd {s.job_dir}",
        f"#BSUB -oo {s.job_dir}/out",
        f"#BSUB -eo {s.job_dir}/err",
        "#BSUB -q normal",
        "#BSUB -P p1",
        "#BSUB -W 1:03",
        "#BSUB -M 2000MB",
        "#BSUB -n 8",
        '#BSUB -R "span[ptile=4]"',
        '#BSUB -gpu "num=1"',
    ]


def test_lifecycle_through_fake_commands(fake: FakeLSF, tmp_path: Path) -> None:
    runner = CountingRunner()
    backend = LSFBackend(registry=tmp_path / "reg", runner=runner)
    ids = [run(backend.submit(make_spec(tmp_path, f"{n}.0", "true"))) for n in range(5)]
    fake.set_job(ids[0], STAT="RUN")
    fake.set_job(ids[1], STAT="EXIT", EXIT_CODE="140", EXIT_REASON="TERM_RUNLIMIT: job killed")
    runner.commands.clear()
    found = run(backend.status(ids))
    assert [c[0] for c in runner.commands] == ["bjobs"]  # one query for all
    assert found[ids[0]].state == JobState.RUNNING
    assert (found[ids[1]].state, found[ids[1]].reason) == (JobState.COMPLETED, "walltime exceeded")
    assert found[ids[2]].state == JobState.IDLE
    run(backend.hold(ids[2]))
    assert run(backend.status([ids[2]]))[ids[2]].state == JobState.HELD
    run(backend.resume(ids[2]))
    assert run(backend.status([ids[2]]))[ids[2]].state == JobState.IDLE
    run(backend.cancel(ids[3]))
    assert run(backend.status([ids[3]]))[ids[3]].state == JobState.REMOVED
    run(backend.cancel(ids[3]))  # already finished: fine
    assert run(backend.find_by_tag("4.0")) == ids[4]
    assert run(backend.find_by_tag("nope.0")) is None


def test_history_then_exit_file(
    fake: FakeLSF, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CountingRunner()
    backend = LSFBackend(registry=tmp_path / "reg", runner=runner)
    monkeypatch.setenv("FAKE_LSF_RUN", "1")  # the fake bsub runs the job script itself
    ran = run(backend.submit(make_spec(tmp_path, "1.0", "exit 5")))
    monkeypatch.delenv("FAKE_LSF_RUN")
    old = run(backend.submit(make_spec(tmp_path, "2.0", "true")))
    # Both are past CLEAN_PERIOD: bjobs forgot them; bhist still has the older one.
    fake.update(jobs={}, history={old: BHIST.replace("1234", old)})
    runner.commands.clear()
    found = run(backend.status([ran, old, "9999"]))
    assert (found[ran].exit_code, found[ran].source) == (5, "exit-file")
    assert (found[old].reason, found[old].source) == ("walltime exceeded", "history")
    assert found["9999"].state == JobState.UNKNOWN
    assert [c[0] for c in runner.commands] == ["bjobs", "bhist"]
    assert runner.commands[1][-2:] == (old, "9999")  # only what the file did not explain


def test_lsf_down_is_unavailable(fake: FakeLSF, tmp_path: Path) -> None:
    backend = LSFBackend(registry=tmp_path / "reg")
    fake.update(down=True)
    with pytest.raises(BackendUnavailable):
        run(backend.status(["500"]))
    with pytest.raises(BackendUnavailable):
        run(backend.ping())
    with pytest.raises(BackendUnavailable):
        run(backend.submit(make_spec(tmp_path, "1.0", "true")))
