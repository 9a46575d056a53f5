"""htgrid's schedd through the official `htcondor2.Schedd`, over CEDAR on its TLS API's
port, located through the collector as HTCondor's tools find a schedd: query, submit (the
jobs then run), act, edit and history, with the pool's tokens."""

from __future__ import annotations

import errno
import json
import math
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import classad2
import htcondor2
import pytest

from htgrid.classad import ClassAd
from htgrid.net.cedar import Reader, parse_ad
from htgrid.net.security import SecurityConfig
from htgrid.testing import WHOLE_POOL, PersonalPool, wait_for

from ._raw import RawCedar
from .conftest import Configure

ACT_ON_JOBS = 478
QMGMT_READ_CMD = 1111
SPOOL_JOB_FILES_WITH_PERMS = 488

FAST: dict[str, object] = {
    "NEGOTIATOR_INTERVAL": 2,
    "NEGOTIATOR_MIN_INTERVAL": 0.1,
    "NUM_CPUS": 4,
    "UPDATE_INTERVAL": 10,
    "SCHEDD_INTERVAL": 1,
    "ALIVE_INTERVAL": 2,
}
DAEMONS = tuple(d for d in WHOLE_POOL if d != "GRIDMANAGER")


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("cedar") / "pool"
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    with PersonalPool(home, kill_grace=2, fsync=False, daemons=DAEMONS, config=FAST) as pool:
        yield pool


def _token(pool: PersonalPool, user: str) -> str:
    return pool.token(f"{user}@{SecurityConfig.load(pool.home).trust_domain}")


def _schedd(pool: PersonalPool, condor: Configure, user: str = "root") -> htcondor2.Schedd:
    condor(pool.collector, token=_token(pool, user))
    collector = htcondor2.Collector(pool.collector)
    ads = wait_for(lambda: collector.locateAll(htcondor2.DaemonTypes.Schedd))
    return htcondor2.Schedd(ads[0])


def _idle_forever(tmp: Path) -> htcondor2.Submit:
    """Jobs no slot matches: they stay idle for act and edit to work on."""
    return htcondor2.Submit(
        {
            "executable": "/bin/true",
            "requirements": "false",
            "log": str(tmp / "idle.log"),
        }
    )


def _echo(tmp: Path, arguments: str, name: str) -> htcondor2.Submit:
    return htcondor2.Submit(
        {
            "executable": "/bin/echo",
            "arguments": arguments,
            "output": str(tmp / f"{name}.$(Process)"),
            "log": str(tmp / f"{name}.log"),
        }
    )


def _status(schedd: htcondor2.Schedd, cluster: int) -> list[int]:
    ads = schedd.query(f"ClusterId == {cluster}", ["ProcId", "JobStatus"])
    return [ad["JobStatus"] for ad in sorted(ads, key=lambda ad: ad["ProcId"])]


def test_submit_runs_the_jobs_and_history_has_them(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    schedd = _schedd(pool, condor)
    result = schedd.submit(_echo(tmp_path, "hello $(Process)", "out"), count=2)
    cluster = result.cluster()
    assert result.num_procs() == 2
    owners = {ad["Owner"] for ad in schedd.query(f"ClusterId == {cluster}", ["Owner"])}
    assert owners <= {"root"}
    done = wait_for(
        lambda: (
            len(h := schedd.history(f"ClusterId == {cluster}", ["ProcId", "ExitCode"], 10)) == 2
            and h
        ),
        timeout=120,
    )
    assert sorted((ad["ProcId"], ad["ExitCode"]) for ad in done) == [(0, 0), (1, 0)]
    assert (tmp_path / "out.1").read_text() == "hello 1\n"


def test_query_constraint_projection_limit_and_iteration(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    schedd = _schedd(pool, condor)
    cluster = schedd.submit(_idle_forever(tmp_path), count=3).cluster()
    ads = schedd.query(f"ClusterId == {cluster}", ["ClusterId", "ProcId", "Owner"])
    assert sorted(ad["ProcId"] for ad in ads) == [0, 1, 2]
    assert all(set(ad.keys()) <= {"ClusterId", "ProcId", "Owner", "ServerTime"} for ad in ads)
    assert len(schedd.query(f"ClusterId == {cluster}", ["ProcId"], limit=2)) == 2
    summary = schedd.query(f"ClusterId == {cluster}", opts=htcondor2.QueryOpt.SummaryOnly)
    assert [ad.get("JobsFound") for ad in summary] == [3]
    schedd.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


def test_act_hold_release_remove(pool: PersonalPool, condor: Configure, tmp_path: Path) -> None:
    schedd = _schedd(pool, condor)
    cluster = schedd.submit(_idle_forever(tmp_path), count=2).cluster()
    # (The bindings send a reason only when given as (text, code).)
    held = schedd.act(htcondor2.JobAction.Hold, [f"{cluster}.0"], ("by a test", 3))
    assert held["TotalSuccess"] == 1
    assert _status(schedd, cluster) == [5, 1]
    reason = schedd.query(f"ClusterId == {cluster} && ProcId == 0", ["HoldReason"])[0]
    assert reason["HoldReason"] == "by a test"
    released = schedd.act(htcondor2.JobAction.Release, f"ClusterId == {cluster}")
    assert released["TotalSuccess"] == 1
    assert _status(schedd, cluster) == [1, 1]
    removed = schedd.act(htcondor2.JobAction.Remove, [f"{cluster}.0", f"{cluster}.1"])
    assert removed["TotalSuccess"] == 2
    assert schedd.query(f"ClusterId == {cluster} && JobStatus != 3") == []


def test_edit_by_ids_and_constraint(pool: PersonalPool, condor: Configure, tmp_path: Path) -> None:
    schedd = _schedd(pool, condor)
    cluster = schedd.submit(_idle_forever(tmp_path), count=2).cluster()
    schedd.edit([f"{cluster}.0"], "Foo", '"bar baz"')
    assert schedd.edit(f"ClusterId == {cluster}", "Answer", "40 + 2") == 2
    ads = sorted(schedd.query(f"ClusterId == {cluster}", ["ProcId", "Foo", "Answer"]), key=str)
    by_proc = {ad["ProcId"]: ad for ad in ads}
    assert by_proc[0]["Foo"] == "bar baz"
    assert "Foo" not in by_proc[1]
    assert [by_proc[p].eval("Answer") for p in (0, 1)] == [42, 42]
    with pytest.raises(htcondor2.HTCondorException, match="Owner"):
        schedd.edit([f"{cluster}.0"], "Owner", '"mallory"')
    schedd.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


_AS_ANOTHER = """
import json, sys
import htcondor2
ad = htcondor2.Collector(sys.argv[1]).locateAll(htcondor2.DaemonTypes.Schedd)[0]
schedd = htcondor2.Schedd(ad)
result = schedd.act(htcondor2.JobAction.Remove, [sys.argv[2]])
try:
    schedd.edit([sys.argv[2]], "Foo", "1")
    edited = "edited"
except htcondor2.HTCondorException as exc:
    edited = str(exc)
print(json.dumps({"denied": result["TotalPermissionDenied"], "done": result["TotalSuccess"],
                  "edit": edited}))
"""


def test_another_user_may_not_act_on_or_edit_the_jobs(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    root = _schedd(pool, condor)
    cluster = root.submit(_idle_forever(tmp_path)).cluster()
    # A process of its own: the bindings keep one security session per daemon and
    # command for the whole process, whoever the configuration names later.
    condor(pool.collector, token=_token(pool, "mallory"))
    out = subprocess.run(
        [sys.executable, "-c", _AS_ANOTHER, pool.collector, f"{cluster}.0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert (answer["denied"], answer["done"]) == (1, 0)
    assert "mallory" in answer["edit"]
    audit = (pool.home / "log" / "AuditLog").read_text().splitlines()
    # The command asked for, not the last one the session's ValidCommands were checked for.
    assert next(line for line in audit if 'subject="mallory@' in line).split(" ")[1:4] == [
        "accepted",
        "CEDAR",
        "ACT_ON_JOBS",
    ]
    root = _schedd(pool, condor)
    assert _status(root, cluster) == [1]
    assert "Foo" not in root.query(f"ClusterId == {cluster}", ["Foo"])[0]
    root.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


def test_the_schedds_ad_names_its_cedar_address(pool: PersonalPool, condor: Configure) -> None:
    condor(pool.collector, token=_token(pool, "root"))
    ad = wait_for(
        lambda: htcondor2.Collector(pool.collector).locateAll(htcondor2.DaemonTypes.Schedd)
    )[0]
    host_port = pool.url.removeprefix("https://")
    assert ad["MyAddress"] == f"<{host_port}?noUDP>"
    assert isinstance(ad, classad2.ClassAd)


def test_htcondor_cli_job_status(pool: PersonalPool, condor: Configure, tmp_path: Path) -> None:
    """HTCondor's own command line (`htcondor job status`), configured by SCHEDD_HOST."""
    condor(
        pool.collector,
        token=_token(pool, "root"),
        extra=f"SCHEDD_HOST = htgrid@{socket.gethostname()}",
    )
    cluster = htcondor2.Schedd().submit(_idle_forever(tmp_path)).cluster()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from htcondor_cli.cli import main; main()",
            "job",
            "status",
            f"{cluster}.0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert f"Job {cluster}.0 is currently idle" in out.stdout + out.stderr  # it logs to stderr
    htcondor2.Schedd().act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


def _schedd_address(pool: PersonalPool) -> str:
    return pool.url.removeprefix("https://")


def _raw_act(pool: PersonalPool, job: str, action: int) -> tuple[RawCedar, ClassAd]:
    """An ACT_ON_JOBS of `job` by a bare client, up to the schedd's counts."""
    conn = RawCedar(_schedd_address(pool), ACT_ON_JOBS)
    request = ClassAd({"ActionIds": job, "JobAction": action, "ActionResultType": 2})
    conn.send_ad(request)
    return conn, conn.receive_ad()


def test_act_waits_for_the_clients_go_ahead(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    """As HTCondor's schedd: the counts come first, the action only after the client says
    it is still there; a client gone before that leaves the jobs as they were."""
    schedd = _schedd(pool, condor)
    cluster = schedd.submit(_idle_forever(tmp_path)).cluster()
    sched_log = pool.home / "log" / "SchedLog"
    conn, result = _raw_act(pool, f"{cluster}.0", 1)  # Hold
    with conn:
        assert (result["ActionResult"], result["result_total_1"]) == (1, 1)
        assert _status(schedd, cluster) == [1]
    wait_for(lambda: "no go-ahead from the client" in sched_log.read_text(), timeout=30)
    assert _status(schedd, cluster) == [1]
    conn, result = _raw_act(pool, f"{cluster}.0", 1)
    with conn:
        conn.send(conn.writer().int(1))
        assert conn.receive().int() == 1
    assert _status(schedd, cluster) == [5]
    # The official client's act goes through the same exchange.
    assert schedd.act(htcondor2.JobAction.Release, [f"{cluster}.0"])["TotalSuccess"] == 1
    assert _status(schedd, cluster) == [1]
    schedd.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


def test_late_materialization_makes_the_jobs_and_they_run(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    """A submit with max_materialize sends a digest and its items, no procs: the schedd
    makes the jobs, at most max_materialize at a time, and they run."""
    schedd = _schedd(pool, condor)
    submit = _echo(tmp_path, "late $(Process) $(item)", "late")
    submit["max_materialize"] = "2"
    submit.setQArgs("item in alpha, beta, gamma")
    cluster = schedd.submit(submit).cluster()
    assert len(schedd.query(f"ClusterId == {cluster}", ["ProcId"])) <= 2
    done = wait_for(
        lambda: len(h := schedd.history(f"ClusterId == {cluster}", ["ProcId"], 10)) == 3 and h,
        timeout=120,
    )
    assert sorted(ad["ProcId"] for ad in done) == [0, 1, 2]
    outputs = [(tmp_path / f"late.{p}").read_text() for p in range(3)]
    assert outputs == ["late 0 alpha\n", "late 1 beta\n", "late 2 gamma\n"]


def test_max_idle_keeps_the_rest_in_the_factory(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    schedd = _schedd(pool, condor)
    submit = _idle_forever(tmp_path)
    submit["max_idle"] = "1"
    submit["My.Which"] = '"$(Process)"'
    cluster = schedd.submit(submit, count=3).cluster()
    ads = schedd.query(f"ClusterId == {cluster}", ["ProcId", "Which", "JobMaterializeMaxIdle"])
    assert [(ad["ProcId"], ad["Which"], ad["JobMaterializeMaxIdle"]) for ad in ads] == [(0, "0", 1)]
    schedd.act(htcondor2.JobAction.Remove, [f"{cluster}.0"])
    ads = wait_for(lambda: schedd.query(f"ClusterId == {cluster} && JobStatus == 1", ["Which"]))
    assert [ad["Which"] for ad in ads] == ["1"]
    # A constraint that matches the cluster removes its factory too: no job is made after.
    schedd.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")
    assert schedd.query(f"ClusterId == {cluster} && JobStatus != 3", ["ProcId"]) == []


def test_a_read_only_queue_connection_reads_and_changes_nothing(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    """QMGMT_READ_CMD, as condor_ssh_to_job and HTCondor-C read the queue: job ads,
    attributes by type, scans by constraint; a call that would change the queue is
    refused with EACCES."""
    schedd = _schedd(pool, condor)
    submit = _idle_forever(tmp_path)
    submit["request_memory"] = "1536"
    cluster = schedd.submit(submit, count=2).cluster()
    with RawCedar(_schedd_address(pool), QMGMT_READ_CMD) as conn:

        def call(*args: int | str) -> Reader:
            w = conn.writer()
            for arg in args:
                w.int(arg) if isinstance(arg, int) else w.string(arg)
            conn.send(w)
            return conn.receive()

        def ad_of(r: Reader) -> ClassAd:
            return parse_ad(r.lines(), "a job ad")

        conn.send(conn.writer().int(10022))  # InitializeReadOnlyConnection: no answer
        r = call(10018, cluster, 1)  # GetJobAd
        assert r.int() == 0
        assert (ad_of(r)["ProcId"], r.remaining) == (1, 0)
        r = call(10009, cluster, 0, "JobStatus")  # GetAttributeInt
        assert (r.int(), r.int()) == (0, 1)
        r = call(10010, cluster, 0, "Owner")  # GetAttributeString
        assert (r.int(), r.text()) == (0, "root")
        r = call(10011, cluster, 0, "Requirements")  # GetAttributeExpr
        assert r.int() == 0
        assert r.text().startswith("(false) && ")
        r = call(10008, cluster, 0, "RequestMemory")  # GetAttributeFloat
        assert r.int() == 0
        assert math.ldexp(r.int() / 2147483647, r.int()) == pytest.approx(1536)
        r = call(10009, cluster, 0, "NoSuchAttribute")
        assert r.int() == -1
        procs = []
        for start in (1, 0, 0, 0):  # GetNextJobByConstraint
            r = call(10020, start, f"ClusterId == {cluster}")
            procs.append(ad_of(r)["ProcId"] if r.int() == 0 else None)
        assert procs == [0, 1, None, None]
        r = call(10013, 1)  # GetNextJob: the whole queue's first
        assert r.int() == 0
        assert "ProcId" in ad_of(r)
        r = call(10026, f"ClusterId == {cluster}", "ProcId")  # GetAllJobsByConstraint
        listed = []
        while r.int() == 0:
            listed.append(ad_of(r)["ProcId"])
        assert (listed, r.int(), r.remaining) == ([0, 1], errno.ENOENT, 0)
        r = call(10027, cluster, 0, "1", "Foo")  # SetAttribute
        assert (r.int(), r.int()) == (-1, errno.EACCES)
        r = call(10002)  # NewCluster
        assert (r.int(), r.int()) == (-1, errno.EACCES)
        conn.send(conn.writer().int(10028))  # CloseSocket
    assert "Foo" not in schedd.query(f"ClusterId == {cluster}", ["Foo"])[0]
    schedd.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")


NO_FILES = "does not transfer job files over CEDAR"


def test_spool_and_retrieve_are_refused_saying_why(
    pool: PersonalPool, condor: Configure, tmp_path: Path
) -> None:
    """htgrid's schedd takes and gives job files over HTTPS only: a spooling submit is
    refused before anything is queued, and retrieve fails with the reason the file
    transfer protocol carries, not a dropped connection."""
    schedd = _schedd(pool, condor)
    submit = _idle_forever(tmp_path)
    submit["arguments"] = "spooled-by-a-test"
    submit["transfer_input_files"] = str(tmp_path / "idle.log")
    with pytest.raises(htcondor2.HTCondorException, match=NO_FILES):
        schedd.submit(submit, spool=True)
    assert schedd.query('Args == "spooled-by-a-test"') == []
    cluster = schedd.submit(submit).cluster()
    with pytest.raises(htcondor2.HTCondorException, match=NO_FILES):
        schedd.retrieve(f"ClusterId == {cluster}")
    schedd.retrieve("ClusterId == -1")  # nothing to fetch: nothing said
    assert _status(schedd, cluster) == [1]
    # Schedd.spool needs a spooling submit's result: its command, from a bare client.
    with RawCedar(_schedd_address(pool), SPOOL_JOB_FILES_WITH_PERMS) as conn:
        conn.send(conn.writer().string("$CondorVersion: 25.14.1 $").int(1).int(cluster).int(0))
        go_ahead = conn.receive_ad()
    assert (go_ahead["Result"], go_ahead["TryAgain"]) == (-1, False)
    assert NO_FILES in go_ahead["HoldReason"]
    schedd.act(htcondor2.JobAction.Remove, f"ClusterId == {cluster}")
