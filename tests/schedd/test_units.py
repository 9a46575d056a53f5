"""The daemon's pieces on their own: launch specs, config, problems, the log reader."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from htgrid.classad import ClassAd
from htgrid.errors import ClassAdSyntaxError, HTGridError, UsageError
from htgrid.eventlog import (
    EventLogReader,
    JobAbortedEvent,
    JobHeldEvent,
    JobTerminatedEvent,
    SubmitEvent,
    format_event,
)
from htgrid.net._errors import PROBLEMS, ApiError, DaemonUnavailable
from htgrid.net._problems import from_problem, to_problem
from htgrid.pool import MARKER, LaunchError, LaunchSpec, PoolError
from htgrid.queue import HoldReasonCode, JobId, JobNotFound
from htgrid.schedd import ScheddConfig
from htgrid.submit import SubmitError

JOB = JobId(7, 3)


def _spec(**attrs: object) -> LaunchSpec:
    ad = ClassAd({"Iwd": "/work", "Cmd": "run.sh", **attrs})
    return LaunchSpec.from_ad(JOB, ad, "pool", 10.0)


def test_launch_spec_from_a_job_ad() -> None:
    spec = _spec(
        Arguments="one two' 'words ''",
        Environment="A=1 B=x' 'y",
        In="in.txt",
        Out="/abs/out",
        KillSig="SIGINT",
        RemoveKillSig=9,
        JobMaxVacateTime=3,
    )
    assert spec.argv == ("/work/run.sh", "one", "two words", "")
    assert spec.env == {"A": "1", "B": "x y", MARKER: "pool:7.3"}
    assert (spec.cwd, spec.stdin, spec.stdout, spec.stderr) == (
        "/work",
        "/work/in.txt",
        "/abs/out",
        "/dev/null",
    )
    assert (spec.kill_signal, spec.hold_signal, spec.remove_signal) == (
        signal.SIGINT,
        signal.SIGINT,
        signal.SIGKILL,
    )
    assert spec.vacate_time == 3.0


def test_launch_spec_old_syntax_and_defaults() -> None:
    spec = _spec(Args="a  b", Env="X=1;Y=2", KillSig="bogus", JobMaxVacateTime=-1)
    assert spec.argv[1:] == ("a", "b")
    assert spec.env["X"] == "1" and spec.env["Y"] == "2"
    assert spec.kill_signal == signal.SIGTERM
    assert spec.vacate_time == 10.0


def test_a_job_with_a_proxy_finds_it_in_x509_user_proxy() -> None:
    """As HTCondor's starter tells the job: the proxy's path, from its Iwd."""
    assert _spec(x509userproxy="x509up_u1000").env["X509_USER_PROXY"] == "/work/x509up_u1000"
    assert _spec(x509userproxy="/tmp/x509up").env["X509_USER_PROXY"] == "/tmp/x509up"
    assert "X509_USER_PROXY" not in _spec().env


def test_launch_spec_refuses_a_job_it_cannot_run() -> None:
    with pytest.raises(LaunchError) as caught:
        LaunchSpec.from_ad(JOB, ClassAd({"Cmd": "/bin/true"}), "pool", 1)
    assert caught.value.code == HoldReasonCode.IwdError
    with pytest.raises(LaunchError) as caught:
        LaunchSpec.from_ad(JOB, ClassAd({"Iwd": "/"}), "pool", 1)
    assert caught.value.code == HoldReasonCode.FailedToCreateProcess


def test_config_file(tmp_path: Path) -> None:
    assert ScheddConfig.load(tmp_path) == ScheddConfig(tmp_path)
    (tmp_path / "htgrid.conf").write_text(
        "# knobs\nPERIODIC_EXPR_INTERVAL = 5\n\njob_max_vacate_time=2.5\n"
        "START_LOCAL_UNIVERSE_LIMIT = 4\nQUEUE_FSYNC = false\n"
    )
    config = ScheddConfig.load(tmp_path)
    assert (config.periodic_interval, config.kill_grace, config.max_local_jobs, config.fsync) == (
        5.0,
        2.5,
        4,
        False,
    )
    assert config.socket == tmp_path / "run" / "schedd.sock"
    for text, message in (
        ("SCHEDD_NAMES = x\n", "htgrid.conf:1: expected NAME = value"),
        ("\nQUEUE_FSYNC = maybe\n", "htgrid.conf:2: QUEUE_FSYNC must be true or false"),
        ("PERIODIC_EXPR_INTERVAL = 0\n", "must be positive"),
    ):
        (tmp_path / "htgrid.conf").write_text(text)
        with pytest.raises(PoolError, match=message):
            ScheddConfig.load(tmp_path)


@pytest.mark.parametrize("cls", [cls for cls, _ in PROBLEMS])
def test_every_error_class_comes_back_as_itself(cls: type[HTGridError]) -> None:
    if cls is ClassAdSyntaxError:
        error: HTGridError = ClassAdSyntaxError("expected )", text="a &&\n (b", offset=8)
    elif cls is SubmitError:
        error = SubmitError("bad universe", path="job.sub", line=4)
    else:
        error = cls("something")
    doc = to_problem(error)
    assert doc["error"] == cls.__name__
    back = from_problem(doc["status"], doc)
    assert type(back) is cls
    assert str(back) == str(error)


def test_unknown_problems_become_api_errors() -> None:
    class Odd(JobNotFound):
        pass

    doc = to_problem(Odd("gone"))
    assert (doc["error"], doc["status"]) == ("JobNotFound", 404)  # the nearest known class
    assert isinstance(from_problem(500, {"error": "KeyError", "detail": "x"}), ApiError)
    assert isinstance(from_problem(502, "<html>"), ApiError)
    assert isinstance(from_problem(400, {"error": "ClassAdSyntaxError"}), ApiError)
    assert to_problem(DaemonUnavailable())["status"] == 503
    assert to_problem(UsageError("x"))["status"] == 400


def test_the_log_reader_returns_whole_events_only(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    texts = [
        format_event(SubmitEvent(cluster=7, proc=0, timestamp=1e9, submit_host="<h>")),
        format_event(
            JobHeldEvent(cluster=7, proc=0, timestamp=1e9, hold_reason="why", hold_reason_code=1)
        ),
        format_event(
            JobTerminatedEvent(
                cluster=7, proc=0, timestamp=1e9, terminated_normally=True, return_value=3
            )
        ),
        format_event(
            JobTerminatedEvent(
                cluster=7, proc=1, timestamp=1e9, terminated_normally=False, terminated_by_signal=9
            )
        ),
        format_event(JobAbortedEvent(cluster=7, proc=2, timestamp=1e9, reason="rm'd")),
    ]
    reader = EventLogReader(log)
    with pytest.raises(FileNotFoundError):
        reader.read()
    log.write_text(texts[0] + texts[1][:30])
    (submit,) = reader.read()
    assert (submit.number, submit.job_id, submit.title) == (
        0,
        JobId(7, 0),
        "Job submitted from host: <h>",
    )
    assert reader.read() == []
    with log.open("a") as f:
        f.write(texts[1][30:] + "".join(texts[2:]))
    held, normal, killed, aborted = reader.read()
    assert (held.number, held.reason) == (12, "why")
    assert (normal.return_value, normal.signal) == (3, None)
    assert (killed.return_value, killed.signal) == (None, 9)
    assert (aborted.number, aborted.job_id, aborted.reason) == (9, JobId(7, 2), "rm'd")
    log.write_text(texts[0])  # replaced by a shorter log: read from the start again
    assert [e.number for e in reader.read()] == [0]
