"""Bad input refused where it enters, naming what is wrong, with nothing of it kept: a NUL
in any string (API, submit file, qedit, a collector update), JSON nested past what a
ClassAd holds, an id or an integer past 64 bits. And what could still carry a NUL at run
time holds the job with a reason instead of stopping a loop of the daemon."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from htgrid.classad import ClassAd, ExprTree, ParserType, parseOne
from htgrid.collector import AdStore
from htgrid.collector.app import create_app as collector_app
from htgrid.errors import ClassAdSyntaxError, ClassAdValueError
from htgrid.eventlog import EventLogError, SubmitEvent, UserLog
from htgrid.pool import LaunchError, LaunchSpec, spawn
from htgrid.queue import HoldReasonCode, Identity, InvalidValue, JobId, JobQueue
from htgrid.submit import SubmitDescription, SubmitError
from htgrid.testing import PersonalPool, run_cli

ME = pwd.getpwuid(os.getuid()).pw_name
LOCAL = 12  # JobUniverse
VANILLA = 5


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("bad")
    with PersonalPool(home, periodic_interval=0.5, kill_grace=2.0, fsync=False) as running:
        yield running


@pytest.fixture
def http(pool: PersonalPool) -> Iterator[httpx.Client]:
    transport = httpx.HTTPTransport(uds=str(pool.config.socket))
    with httpx.Client(transport=transport, base_url="http://htgrid", timeout=30) as client:
        yield client


def _post(http: httpx.Client, path: str, body: object) -> httpx.Response:
    text = body if isinstance(body, str) else json.dumps(body)
    return http.post(path, content=text, headers={"content-type": "application/json"})


def _problem(answer: httpx.Response, status: int = 400) -> str:
    assert answer.status_code == status, answer.text
    doc = answer.json()
    assert doc["status"] == status
    return str(doc["detail"])


def _queued(http: httpx.Client) -> list[str]:
    answer = http.get("/v1/jobs", params={"projection": "Cmd"})
    assert answer.status_code == 200
    return [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in answer.json()["jobs"]]


# -- a NUL over the API -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "attr"),
    [("cluster_ad", "UserLog"), ("cluster_ad", "Description"), ("procs", "Arguments")],
)
def test_a_nul_in_a_submitted_ad_is_refused_and_nothing_is_queued(
    pool: PersonalPool, http: httpx.Client, tmp_path: Path, where: str, attr: str
) -> None:
    before = _queued(http)
    cluster_ad: dict[str, object] = {"Cmd": "/bin/true", "Iwd": str(tmp_path), "JobUniverse": LOCAL}
    proc: dict[str, object] = {}
    (cluster_ad if where == "cluster_ad" else proc)[attr] = "log\0x"
    detail = _problem(_post(http, "/v1/jobs", {"cluster_ad": cluster_ad, "procs": [{}, proc]}))
    what = "the cluster ad" if where == "cluster_ad" else "the ad of proc 1"
    assert (
        detail
        == f"{what}: attribute {attr} holds a NUL character, which a ClassAd string cannot hold"
    )
    assert _queued(http) == before
    # The daemon goes on: its loops did not meet the value, and a good submit runs.
    answer = _post(http, "/v1/jobs", {"cluster_ad": {**cluster_ad, attr: "ok"}, "procs": [{}]})
    assert answer.status_code == 201
    assert http.get("/v1/health").json()["status"] == "ok"


def test_a_nul_inside_an_expression_of_a_submitted_ad_is_refused(http: httpx.Client) -> None:
    ad = '{"Cmd": "/bin/true", "Note": "\\/Expr(strcat(\\"x\\", \\"a\\u0000b\\"))\\/"}'
    detail = _problem(_post(http, "/v1/jobs", f'{{"cluster_ad": {ad}, "procs": [{{}}]}}'))
    assert "attribute Note holds a NUL character" in detail


def test_a_nul_in_an_edit_is_refused_naming_the_attribute(
    pool: PersonalPool, http: httpx.Client
) -> None:
    answer = _post(
        http,
        "/v1/jobs",
        {"cluster_ad": {"Cmd": "/bin/true", "JobUniverse": VANILLA}, "procs": [{}]},
    )
    (job,) = answer.json()["jobs"]
    edit = {"jobs": {"ids": [job]}, "attrs": {"Description": '"a\0b"'}}
    answer = _post(http, "/v1/jobs/edit", edit)
    detail = _problem(answer)
    assert answer.json()["reason"] == "a string may not hold a NUL character"
    assert answer.json()["origin"] == "the value of Description"
    assert "the value of Description" in detail
    assert "Description" not in http.get(f"/v1/jobs/{job}").json()["jobs"][0]


def test_a_nul_in_a_hold_reason_is_refused(http: httpx.Client) -> None:
    answer = _post(
        http,
        "/v1/jobs",
        {"cluster_ad": {"Cmd": "/bin/true", "JobUniverse": VANILLA}, "procs": [{}]},
    )
    (job,) = answer.json()["jobs"]
    act = {"action": "hold", "jobs": {"ids": [job]}, "reason": "because\0"}
    assert "NUL" in _problem(_post(http, "/v1/jobs/act", act))
    assert http.get(f"/v1/jobs/{job}").json()["jobs"][0]["JobStatus"] == 1


def test_the_queue_loads_what_it_stored_after_a_refused_nul(
    pool: PersonalPool, http: httpx.Client
) -> None:
    # Today's bug: a NUL in Description was stored, and the queue did not open again.
    _post(
        http, "/v1/jobs", {"cluster_ad": {"Cmd": "/bin/true", "Description": "a\0b"}, "procs": [{}]}
    )
    kept = _queued(http)
    pool.stop()
    pool.start()
    assert _queued(http) == kept
    assert http.get("/v1/health").json()["quarantined"] == 0


# -- 400, not 500 -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/jobs", "[" * 100_000 + "]" * 100_000),
        ("/v1/jobs", '{"cluster_ad": {"A": ' + "[" * 100_000 + "]" * 100_000 + '}, "procs": [{}]}'),
        (
            "/v1/jobs/act",
            '{"action": "hold", "jobs": ' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "}",
        ),
        ("/v1/jobs/edit", '{"jobs": {"all": true}, "attrs": {"A": "' + "(" * 5000 + '"}}'),
    ],
    ids=["list", "ad-value", "selection", "edit-parens"],
)
def test_json_nested_too_deep_is_a_400(http: httpx.Client, path: str, body: str) -> None:
    assert "nested too deeply" in _problem(_post(http, path, body))


@pytest.mark.parametrize("depth", [180, 300])
def test_a_list_nested_past_the_parsers_budget_is_refused_not_stored(
    http: httpx.Client, depth: int
) -> None:
    # Deep enough for the JSON decoder, too deep for the ClassAd parser that reads the
    # stored text back: refused at the door instead of making the queue unreadable.
    before = _queued(http)
    body = '{"cluster_ad": {"Deep": ' + "[" * depth + "]" * depth + '}, "procs": [{}]}'
    detail = _problem(_post(http, "/v1/jobs", body))
    assert "the cluster ad" in detail and "Deep" in detail and "nested too deeply" in detail
    assert _queued(http) == before


@pytest.mark.parametrize(
    ("method", "path", "body", "words"),
    [
        ("GET", "/v1/jobs/9223372036854775808.0", None, "past the 64 bits"),
        ("GET", "/v1/jobs/1.99999999999999999999", None, "past the 64 bits"),
        (
            "POST",
            "/v1/clusters/99999999999999999999/jobs",
            {"cluster_ad": {}, "procs": [{}]},
            "at most",
        ),
        ("POST", "/v1/jobs/act", {"action": "hold", "jobs": {"cluster": 2**63}}, "cannot select"),
        (
            "POST",
            "/v1/jobs/act",
            {"action": "hold", "jobs": {"ids": ["99999999999999999999.0"]}},
            "64 bits",
        ),
        ("POST", "/v1/jobs/lease", {"leases": {"1.0": 2**64}}, "epoch seconds"),
        ("POST", "/v1/jobs/output", {"jobs": ["9223372036854775808.0"]}, "64 bits"),
        ("POST", "/v1/jobs", {"cluster_ad": {"Big": 2**63}, "procs": [{}]}, "past the 64 bits"),
        (
            "POST",
            "/v1/jobs",
            {"cluster_ad": {}, "procs": [{"L": [1, -(2**63) - 1]}]},
            "past the 64 bits",
        ),
    ],
)
def test_an_id_or_an_integer_past_64_bits_is_a_400(
    http: httpx.Client, method: str, path: str, body: object, words: str
) -> None:
    if body is None:
        answer = http.request(method, path)
    else:
        answer = _post(http, path, body)
    assert words in _problem(answer)


def test_a_problem_quoting_a_lone_surrogate_is_still_a_problem_document(
    http: httpx.Client,
) -> None:
    # Found by the fuzz: the detail named an attribute "\ud800", which UTF-8 cannot
    # carry, and the answer was a bare 500 instead of the 400 it was.
    body = '{"cluster_ad": {}, "procs": [{"\\ud800": 9223372036854775808}]}'
    detail = _problem(_post(http, "/v1/jobs", body))
    assert detail == (
        "the ad of proc 0: attribute '\\ud800' is 9223372036854775808, past the 64 bits of "
        "a ClassAd integer"
    )


def test_a_body_that_is_not_utf8_is_a_400(http: httpx.Client) -> None:
    answer = http.post(
        "/v1/jobs", content=b'{"x": "\xff"}', headers={"content-type": "application/json"}
    )
    assert "not JSON" in _problem(answer)


# -- the store's own guard --------------------------------------------------------------


def test_the_queue_never_stores_what_it_cannot_read_back(tmp_path: Path) -> None:
    # Whatever the caller (the API checks first; the daemon's own components do not),
    # the queue refuses a value it could not read again, and rolls the change back.
    alice = Identity("alice")
    deep: object = []
    for _ in range(300):
        deep = [deep]
    with JobQueue.open(tmp_path, fsync=False) as queue:
        good = queue.submit(alice, ClassAd({"Cmd": "/bin/true"}))
        for name, value in (("Description", "a\0b"), ("Lone", "\ud800")):
            with pytest.raises(InvalidValue, match=name):
                queue.submit(alice, ClassAd({"Cmd": "/bin/true", name: value}))
            with pytest.raises(InvalidValue, match=name):
                queue.update(f"{good}.0", {"JobStatus": 2, name: value})
        # A value nested deeper than the parser reads cannot even be put in an ad.
        with pytest.raises(ClassAdValueError, match="nested too deeply"):
            ClassAd({"Cmd": "/bin/true", "Deep": deep})
        with pytest.raises(ClassAdValueError, match="nested too deeply"):
            queue.update(f"{good}.0", {"JobStatus": 2, "Deep": deep})
        with pytest.raises(ClassAdSyntaxError, match="may not hold a NUL"):
            queue.edit(f"{good}.0", {"Note": '"x\0"'}, alice)
        assert [ad["ClusterId"] for ad in queue.query()] == [good]
        assert queue.get(f"{good}.0")["JobStatus"] == 1  # the updates were rolled back
    with JobQueue.open(tmp_path, fsync=False) as again:  # and it opens as it was
        assert again.quarantined() == []
        assert [ad["ClusterId"] for ad in again.query()] == [good]


def test_a_classad_string_holds_no_nul_however_written() -> None:
    for text in ('"a\\0b"', '"a\\000b"', '"a\0b"', 'strcat("x", "\\0")', '"\\0"'):
        with pytest.raises(ClassAdSyntaxError, match="NUL"):
            ExprTree(text)
    with pytest.raises(ClassAdSyntaxError, match="Note: a string may not hold a NUL"):
        parseOne('{"Note": "a\\u0000b"}', ParserType.JSON)
    assert ExprTree('"\\u0000"').eval() == "u0000"  # not an escape in ClassAd text


# -- submit files ---------------------------------------------------------------------


def test_a_nul_in_a_submit_file_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "job.sub"
    path.write_bytes(b"executable = /bin/true\n# fine\ndescription = a\0b\nqueue\n")
    with pytest.raises(SubmitError) as refused:
        SubmitDescription.from_file(path)
    assert (refused.value.path, refused.value.line) == (str(path), 3)
    assert "NUL character" in refused.value.reason


def test_a_nul_in_queue_items_is_refused_with_the_queue_line(tmp_path: Path) -> None:
    (tmp_path / "items.txt").write_bytes(b"one\ntw\0o\n")
    path = tmp_path / "job.sub"
    path.write_text("executable = /bin/true\narguments = $(x)\nqueue x from items.txt\n")
    with pytest.raises(SubmitError) as refused:
        SubmitDescription.from_file(path).jobs(1, owner=ME, qdate=1, check_files=False)
    assert refused.value.line == 3
    assert "item 2 of the queue statement holds a NUL character" in refused.value.reason


def test_htgrid_submit_of_a_nul_queues_nothing(pool: PersonalPool, tmp_path: Path) -> None:
    path = tmp_path / "job.sub"
    path.write_bytes(b"executable = /bin/true\nuniverse = local\nlog = job\0.log\nqueue\n")
    before = run_cli(pool.home, "q", "-af", "ClusterId")[1]
    status, _, err = run_cli(pool.home, "submit", str(path))
    assert status != 0
    assert f"{path}:3:" in err and "NUL" in err
    assert run_cli(pool.home, "q", "-af", "ClusterId")[1] == before


# -- the collector --------------------------------------------------------------------


def test_a_collector_update_with_a_nul_is_refused_and_nothing_stored() -> None:
    store = AdStore(clock=lambda: 1_700_000_000.0)

    async def post(body: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=collector_app(store))
        async with httpx.AsyncClient(transport=transport, base_url="http://collector") as http:
            return await http.post("/v1/updates/UPDATE_STARTD_AD", content=body)

    ad = {"MyType": "Machine", "Name": "slot1@node", "Arch": "X86_64\u0000"}
    answer = asyncio.run(post(json.dumps([ad])))
    assert answer.status_code == 400
    assert answer.json()["detail"] == "ad 1: Arch: a string may not hold a NUL character"
    deep = asyncio.run(post("[" * 100_000 + "]" * 100_000))
    assert deep.status_code == 400 and "nested too deeply" in deep.json()["detail"]
    assert len(store) == 0


# -- at run time ----------------------------------------------------------------------


def _spec(tmp_path: Path, **changes: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "job_id": JobId(1, 0),
        "argv": ("/bin/true",),
        "env": {},
        "cwd": str(tmp_path),
        "stdin": os.devnull,
        "stdout": str(tmp_path / "out"),
        "stderr": str(tmp_path / "err"),
        "kill_signal": signal.SIGTERM,
        **changes,
    }
    return LaunchSpec(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "name", "code"),
    [
        ({"argv": ("/bin/true", "a\0b")}, "Arguments", HoldReasonCode.FailedToCreateProcess),
        ({"stdout": "/tmp/o\0ut"}, "Out", HoldReasonCode.UnableToOpenOutput),
        ({"env": {"A": "x\0"}}, "Environment", HoldReasonCode.FailedToCreateProcess),
        ({"cwd": "/tmp\0"}, "Iwd", HoldReasonCode.IwdError),
    ],
)
def test_a_nul_reaching_a_launch_holds_the_job_with_a_reason(
    tmp_path: Path, changes: dict[str, object], name: str, code: HoldReasonCode
) -> None:
    # Before: Popen's ValueError escaped the runner, and the job stayed Running with no
    # process. Now the launch fails as any launch does: the job is held, saying why.
    with pytest.raises(LaunchError) as failed:
        spawn(_spec(tmp_path, **changes))
    assert failed.value.code == code
    assert f"the job's {name} holds a NUL character" in failed.value.reason


def test_a_nul_in_a_user_log_name_is_an_event_log_error(tmp_path: Path) -> None:
    # The event log writer logs an EventLogError and goes on; a ValueError stopped it
    # (and with it the daemon).
    event = SubmitEvent(cluster=1, proc=0, timestamp=1, submit_host="<h>")
    with pytest.raises(EventLogError, match="cannot open user log"):
        UserLog(str(tmp_path / "job\0.log")).append(event)
