"""The job commands as users type them: output, messages and exit codes.

One daemon serves the module; vanilla jobs stay idle (no execute nodes yet), which
makes the queue's contents predictable, and local jobs run for real.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid.classad as classad
import htgrid.cli._wait as wait_cli
from htgrid.cli._wait import JobTally
from htgrid.eventlog import (
    ClusterRemoveEvent,
    ClusterSubmitEvent,
    EventLogReader,
    JobTerminatedEvent,
    SubmitEvent,
    UserLog,
)
from htgrid.testing import PersonalPool, run_cli, wait_for

ME = __import__("pwd").getpwuid(os.getuid()).pw_name
IDLE = "executable = /bin/echo\narguments = hello world\nqueue 3\n"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    with PersonalPool(tmp_path_factory.mktemp("pool"), kill_grace=2, fsync=False) as running:
        yield running


@pytest.fixture
def htgrid(pool: PersonalPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """`htgrid(*argv)` run from a fresh directory: (status, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    return lambda *argv: run_cli(pool.home, *argv)


def _submit(htgrid, text: str, *extra: str) -> int:  # type: ignore[no-untyped-def]
    Path("job.sub").write_text(text)
    rc, out, err = htgrid("submit", "job.sub", *extra)
    assert rc == 0, err
    return int(out.split()[-1].rstrip("."))


def _clean(htgrid, cluster: int) -> None:  # type: ignore[no-untyped-def]
    htgrid("rm", str(cluster))


# -- submit ----------------------------------------------------------------------------


def test_submit_says_what_condor_submit_says(htgrid) -> None:  # type: ignore[no-untyped-def]
    Path("job.sub").write_text(IDLE)
    rc, out, err = htgrid("submit", "job.sub")
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "Submitting job(s)..."
    assert lines[1].startswith("3 job(s) submitted to cluster ")
    _clean(htgrid, int(lines[1].split()[-1].rstrip(".")))


def test_assignments_and_queue_on_the_command_line(htgrid) -> None:  # type: ignore[no-untyped-def]
    Path("job.sub").write_text("executable = /bin/echo\narguments = $(word)\nqueue $(N)\n")
    rc, out, _ = htgrid("submit", "job.sub", "N=2", "word=hi")
    assert rc == 0 and "2 job(s) submitted" in out
    cluster = int(out.split()[-1].rstrip("."))
    rc, out, _ = htgrid("q", str(cluster), "-af", "ProcId", "Args")
    assert out == "0 hi\n1 hi\n"
    _clean(htgrid, cluster)
    Path("noqueue.sub").write_text("executable = /bin/echo\narguments = $(word)\n")
    rc, out, _ = htgrid("submit", "-dry-run", "-", "noqueue.sub", "-queue", "word in (a, b)")
    assert rc == 0
    assert out.count("ProcId=") == 2 and 'Args="a"' in out and 'Args="b"' in out
    rc, _, err = htgrid("submit", "job.sub", "-queue", "1")
    assert rc == 2 and "job.sub:3: -queue was given but the file has a queue statement" in err


def test_dry_run_needs_no_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("job.sub").write_text(IDLE)
    nowhere = tmp_path / "no-pool"
    rc, out, err = run_cli(nowhere, "submit", "-dry-run", "job.sub")
    assert (rc, err) == (0, "")
    assert out.startswith("Dry-Run job(s)\n")
    assert out.count("ProcId=") == 3
    assert 'Cmd="/bin/echo"' in out and "ClusterId=1" in out
    rc, out, _ = run_cli(nowhere, "submit", "-dry-run", "ads.txt", "job.sub")
    assert (rc, out) == (0, "")
    assert Path("ads.txt").read_text().count("ProcId=") == 3
    rc, _, err = run_cli(nowhere, "submit", "job.sub")
    assert rc == 1 and "htgrid up" in err


def test_submit_errors_name_the_file_and_line(htgrid) -> None:  # type: ignore[no-untyped-def]
    Path("bad.sub").write_text('executable = /bin/echo\narguments = "one two\nqueue\n')
    rc, out, err = htgrid("submit", "bad.sub")
    assert (rc, out) == (2, "")
    assert err.startswith("htgrid: bad.sub:3: Unterminated double-quote.")
    rc, _, err = htgrid("submit", "missing.sub")
    assert rc == 2 and "missing.sub" in err


def test_a_bad_proc_midway_queues_nothing(htgrid) -> None:  # type: ignore[no-untyped-def]
    # Proc 2000's value is bad: two batches of procs have gone to the daemon by then.
    items = ["true"] * 2000 + ["maybe"] + ["false"] * 10
    Path("items.txt").write_text("\n".join(items) + "\n")
    Path("job.sub").write_text("executable = /bin/true\nhold = $(h)\nqueue h from items.txt\n")
    _, before, _ = htgrid("q", "-af", "ClusterId", "ProcId")
    rc, out, err = htgrid("submit", "job.sub")
    assert rc == 2 and "maybe" in err, err
    assert out.startswith("Submitting job(s)..") and "submitted" not in out
    _, after, _ = htgrid("q", "-af", "ClusterId", "ProcId")
    assert after == before


def test_a_bad_materialization_limit_is_refused(htgrid) -> None:  # type: ignore[no-untyped-def]
    for line, said in (("max_materialize = 0", "max_materialize"), ("max_idle = x", "max_idle")):
        Path("job.sub").write_text(f"executable = /bin/true\n{line}\nqueue 3\n")
        rc, out, err = htgrid("submit", "job.sub")
        assert rc == 2 and "job.sub" in err and said in err, err
        assert "submitted" not in out


# -- q ------------------------------------------------------------------------------------


def test_q_batch_summary(htgrid, pool: PersonalPool) -> None:  # type: ignore[no-untyped-def]
    cluster = _submit(htgrid, IDLE)
    htgrid("hold", f"{cluster}.1")
    rc, out, err = htgrid("q", str(cluster))
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == ""
    assert lines[1].startswith("-- Schedd: htgrid@") and f"<{pool.config.socket}> @ " in lines[1]
    assert lines[2].split() == [
        "OWNER", "BATCH_NAME", "SUBMITTED", "DONE", "RUN", "IDLE", "HOLD", "TOTAL", "JOB_IDS",
    ]  # fmt: skip
    row = lines[3].split()
    assert row[0] == ME and row[1:3] == ["ID:", str(cluster)]
    assert row[5:] == ["_", "_", "2", "1", "3", f"{cluster}.0-2"]
    assert lines[4] == ""
    assert lines[5] == (
        "Total for query: 3 jobs; 0 completed, 0 removed, 2 idle, 0 running, 1 held, 0 suspended"
    )
    assert lines[6].startswith(f"Total for {ME}: ")
    assert lines[7].startswith("Total for all users: ")
    _clean(htgrid, cluster)


def test_q_nobatch_and_hold_views(htgrid) -> None:  # type: ignore[no-untyped-def]
    cluster = _submit(htgrid, IDLE)
    htgrid("hold", "-reason", "waiting for input", f"{cluster}.2")
    _, out, _ = htgrid("q", "-nobatch", str(cluster))
    lines = out.splitlines()
    assert lines[2].split() == ["ID", "OWNER", "SUBMITTED", "RUN_TIME", "ST", "PRI", "SIZE", "CMD"]
    rows = [line.split() for line in lines[3:6]]
    assert [r[0] for r in rows] == [f"{cluster}.{p}" for p in range(3)]
    assert [r[5] for r in rows] == ["I", "I", "H"]
    assert rows[0][4] == "0+00:00:00" and rows[0][-3:] == ["echo", "hello", "world"]
    _, out, _ = htgrid("q", "-hold", str(cluster))
    lines = out.splitlines()
    assert lines[2].split() == ["ID", "OWNER", "HELD_SINCE", "HOLD_REASON"]
    assert lines[3].startswith(f"{cluster}.2 ") and lines[3].endswith("waiting for input")
    assert len(lines) == 4 + 4  # one held job, a blank line, three totals
    _clean(htgrid, cluster)


def test_q_af_json_and_long(htgrid) -> None:  # type: ignore[no-untyped-def]
    cluster = _submit(htgrid, IDLE)
    rc, out, _ = htgrid("q", str(cluster), "-af", "ProcId", "Owner", "JobStatus == 1", "Foo")
    assert out.splitlines() == [f"{p} {ME} true undefined" for p in range(3)]
    rc, out, _ = htgrid("q", str(cluster), "-json")
    ads = json.loads(out)
    assert [ad["ProcId"] for ad in ads] == [0, 1, 2]
    assert ads[0]["Cmd"] == "/bin/echo" and ads[0]["Owner"] == ME
    rc, out, _ = htgrid("q", f"{cluster}.1", "-l")
    (ad,) = classad.parseAds(out, classad.ParserType.Old)
    assert (ad["ClusterId"], ad["ProcId"], ad["JobStatus"]) == (cluster, 1, 1)
    assert repr(ad.lookup("Requirements")).startswith("(TARGET.Arch")
    rc, out, _ = htgrid(
        "q", "-constraint", f"ClusterId == {cluster} && ProcId > 0", "-af", "ProcId"
    )
    assert out == "1\n2\n"
    rc, out, _ = htgrid("q", "-constraint", "ClusterId == -1", "-json")
    assert (rc, json.loads(out)) == (0, [])
    _clean(htgrid, cluster)


def test_q_in_a_terminal_draws_a_table(htgrid, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    cluster = _submit(htgrid, IDLE)
    monkeypatch.setattr("htgrid.cli._q.is_terminal", lambda: True)
    rc, out, _ = htgrid("q", "-nobatch", str(cluster))
    assert rc == 0
    assert "─" in out  # rich's rule under the header
    assert f"{cluster}.2" in out and "echo hello world" in out
    _clean(htgrid, cluster)


def test_a_bad_constraint_exits_2_with_its_column(htgrid) -> None:  # type: ignore[no-untyped-def]
    rc, out, err = htgrid("q", "-constraint", "JobStatus == ")
    assert (rc, out) == (2, "")
    assert "line 1, column 14" in err and "^" in err
    rc, _, err = htgrid("rm", "-constraint", "Owner ==")
    assert rc == 2 and "column 9" in err


# -- rm, hold, release, qedit -------------------------------------------------------------


def test_rm_hold_release_messages_and_exit_codes(htgrid) -> None:  # type: ignore[no-untyped-def]
    cluster = _submit(htgrid, IDLE)
    job = f"{cluster}.0"
    assert htgrid("hold", job) == (0, f"Job {job} held\n", "")
    assert htgrid("hold", job) == (1, "", f"Job {job} already held\n")
    assert htgrid("release", job) == (0, f"Job {job} released\n", "")
    assert htgrid("release", job) == (1, "", f"Job {job} not held to be released\n")
    assert htgrid("hold", str(cluster)) == (
        0,
        f"All jobs in cluster {cluster} have been held\n",
        "",
    )
    assert htgrid("release", "-constraint", f"ClusterId == {cluster} && ProcId == 1") == (
        0,
        f"All jobs matching constraint (ClusterId == {cluster} && ProcId == 1) have been released\n",
        "",
    )
    rc, out, err = htgrid("rm", "999.0", job)
    assert (rc, out, err) == (1, f"Job {job} marked for removal\n", "Job 999.0 not found\n")
    assert htgrid("rm", "999") == (1, "", "Couldn't find/remove all jobs in cluster 999\n")
    assert htgrid("rm", "-constraint", "Foo == 1") == (
        1,
        "",
        "Couldn't find/remove all jobs matching constraint (Foo == 1)\n",
    )
    assert htgrid("rm", str(cluster)) == (
        0,
        f"All jobs in cluster {cluster} have been marked for removal\n",
        "",
    )
    rc, _, err = htgrid("rm")
    assert rc == 2 and "say which jobs" in err
    other = _submit(htgrid, IDLE)
    assert htgrid("rm", "-all") == (0, "All jobs have been marked for removal\n", "")
    assert htgrid("q", str(other), "-af", "ProcId")[1] == ""
    assert htgrid("rm", "-all") == (1, "", "Couldn't find/remove all jobs\n")


def test_qedit(htgrid) -> None:  # type: ignore[no-untyped-def]
    cluster = _submit(htgrid, IDLE)
    rc, out, err = htgrid("qedit", str(cluster), "Note", '"checked"', "Weight", "2 * 21")
    assert (rc, err) == (0, "")
    assert out == (
        'Set attribute "Note" for 3 matching jobs.\nSet attribute "Weight" for 3 matching jobs.\n'
    )
    assert htgrid("q", str(cluster), "-af", "Note", "Weight")[1] == "checked 42\n" * 3
    rc, _, err = htgrid("qedit", "-constraint", f"ClusterId == {cluster}", "Weight", "2 *")
    assert rc == 2 and "column 4" in err
    rc, _, err = htgrid("qedit", f"{cluster}.0", "Owner", '"mallory"')
    assert rc == 2 and "Owner" in err
    assert htgrid("qedit", "999.0", "A", "1") == (1, "", "Job 999.0 not found\n")
    rc, _, err = htgrid("qedit", f"{cluster}.0", "Lonely")
    assert rc == 2 and "ATTR VALUE pairs" in err
    _clean(htgrid, cluster)


# -- history and wait ---------------------------------------------------------------------

LOCAL = """universe = local
executable = /bin/sh
arguments = "-c 'exit $(Process)'"
log = job.log
queue 2
"""


def test_history(htgrid) -> None:  # type: ignore[no-untyped-def]
    cluster = _submit(htgrid, LOCAL)
    wait_for(lambda: htgrid("history", str(cluster), "-af", "ProcId")[1].count("\n") == 2)
    _, out, _ = htgrid("history", str(cluster))
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "OWNER", "SUBMITTED", "RUN_TIME", "ST", "COMPLETED", "CMD"]
    assert sorted(line.split()[0] for line in lines[1:]) == [f"{cluster}.0", f"{cluster}.1"]
    assert all(line.split()[5] == "C" for line in lines[1:])
    _, out, _ = htgrid("history", str(cluster), "-af", "ProcId", "ExitCode")
    assert sorted(out.splitlines()) == ["0 0", "1 1"]
    assert len(json.loads(htgrid("history", "-limit", "1", "-json")[1])) == 1


def test_wait_for_a_log_a_job_and_a_timeout(htgrid) -> None:  # type: ignore[no-untyped-def]
    cluster = _submit(htgrid, LOCAL)
    assert htgrid("wait", "job.log") == (0, "All jobs done.\n", "")
    assert htgrid("wait", "job.log", f"{cluster}.1") == (0, "All jobs done.\n", "")
    assert htgrid("wait", f"{cluster}.0", "-wait", "20") == (0, "All jobs done.\n", "")
    Path("job.sub").write_text(
        "universe = local\nexecutable = /bin/sleep\narguments = 60\nlog = slow.log\nqueue\n"
    )
    rc, out, _ = htgrid("submit", "job.sub")
    slow = int(out.split()[-1].rstrip("."))
    assert htgrid("wait", "-wait", "0.3", "slow.log") == (1, "Time expired.\n", "")
    htgrid("rm", str(slow))
    assert htgrid("wait", "-wait", "20", "slow.log") == (0, "All jobs done.\n", "")  # removed
    rc, _, err = htgrid("wait", "nothing-here.log")
    assert rc == 2 and "no such event log" in err


def test_wait_for_a_job_without_a_log_asks_the_daemon(htgrid) -> None:  # type: ignore[no-untyped-def]
    cluster = _submit(htgrid, "universe = local\nexecutable = /bin/true\nqueue\n")
    assert htgrid("wait", str(cluster), "-wait", "20") == (0, "All jobs done.\n", "")
    rc, _, err = htgrid("wait", "98765")
    assert rc == 1 and "no job 98765" in err  # a negative answer, not bad usage


def test_wait_waits_for_a_factorys_cluster_removed_event(tmp_path: Path) -> None:
    log = UserLog(tmp_path / "job.log")
    reader = EventLogReader(log.path)
    tally = JobTally(lambda jid: jid.cluster == 12)
    log.append(ClusterSubmitEvent(cluster=12, timestamp=1, submit_host="<h>"))
    log.append(SubmitEvent(cluster=12, proc=0, timestamp=1, submit_host="<h>"))
    log.append(
        JobTerminatedEvent(
            cluster=12, proc=0, timestamp=2, terminated_normally=True, return_value=0
        )
    )
    for event in reader.read():
        tally.feed(event)
    assert not tally.finished(None)  # its one job is done, but more may be made
    log.append(ClusterRemoveEvent(cluster=12, timestamp=3, next_proc_id=1, completion=1))
    for event in reader.read():
        tally.feed(event)
    assert tally.finished(None)
    assert tally.summary().startswith("1 of 1 done")


def test_the_pools_job_default_lease_duration_is_the_lease_of_jobs_naming_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("job.sub").write_text(IDLE)
    home = tmp_path / "home"
    rc, out, err = run_cli(home, "submit", "-dry-run", "-", "job.sub")
    assert (rc, err) == (0, "") and "JobLeaseDuration=2400" in out  # condor_submit's
    home.mkdir()
    (home / "htgrid.conf").write_text("JOB_DEFAULT_LEASE_DURATION = 300\n")
    rc, out, err = run_cli(home, "submit", "-dry-run", "-", "job.sub")
    assert (rc, err) == (0, "") and "JobLeaseDuration=300" in out
    rc, out, err = run_cli(
        home, "submit", "-dry-run", "-", "job.sub", "-a", "job_lease_duration=90"
    )
    assert (rc, err) == (0, "") and "JobLeaseDuration=90" in out


def test_q_totals_say_what_the_batch_view_says(htgrid) -> None:  # type: ignore[no-untyped-def]
    # -totals of one's own or everyone's jobs come from the owners' counts alone; they
    # must be the totals the full summary gives, for every status and for -hold, -run.
    cluster = _submit(htgrid, IDLE)
    htgrid("hold", f"{cluster}.1")

    def totals(*argv: str) -> list[str]:
        rc, out, _ = htgrid("q", *argv)
        assert rc == 0
        return [line for line in out.splitlines() if line.startswith("Total for")]

    for view in ((), ("-hold",), ("-run",), ("-allusers",), ("-allusers", "-hold")):
        full = totals(*view)
        assert totals(*view, "-totals") == full, view
    held = totals("-hold", "-totals")[0]
    assert held.startswith("Total for query: 1 jobs;") and ", 1 held," in held
    assert totals("-run", "-totals")[0].startswith("Total for query: 0 jobs;")
    mine = totals("-totals")
    assert mine[0].replace("query", ME, 1) == mine[1]
    _clean(htgrid, cluster)


def test_wait_counts_a_job_leaving_between_its_two_reads_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A job with no log is followed through the queue, then the history: one that left
    # the queue between the two reads is in both, and is done.
    class Schedd:
        def __enter__(self) -> Schedd:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def query(self, spec: str, attrs: list[str]) -> list[classad.ClassAd]:
            return [classad.ClassAd({"ClusterId": 12, "ProcId": 0, "JobStatus": 2})]

        def history(self, spec: str, attrs: list[str]) -> list[classad.ClassAd]:
            return [classad.ClassAd({"ClusterId": 12, "ProcId": 0, "JobStatus": 4})]

    monkeypatch.setattr(wait_cli, "client", Schedd)
    tally = JobTally(lambda jid: jid.cluster == 12)
    wait_cli._follow_queue("12", tally)()
    assert tally.finished(None), tally.summary()
