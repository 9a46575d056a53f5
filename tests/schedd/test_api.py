"""The HTTP API at the library level: identities, owner checks, problem documents, OpenAPI.

The app runs in-process over a real queue; an authenticator reading a test header stands
in for the kernel (which is the only source of identity on the real socket, as the last
tests show).
"""

from __future__ import annotations

import os
import pwd
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request

from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import ClassAdSyntaxError
from htgrid.net import BadRequest, Jobs, ScheddClient
from htgrid.net._backend import QueueBackend
from htgrid.net._peer import peer_credentials, peercred_identity
from htgrid.net.app import ROUTES, create_app
from htgrid.queue import (
    Identity,
    InvalidSubmit,
    InvalidTransition,
    JobAction,
    JobNotFound,
    JobQueue,
    JobStatus,
    NotAuthorized,
    ProtectedAttribute,
)
from htgrid.schedd._service import QueueService
from htgrid.schedd._worker import QueueWorker

from ._harness import PersonalPool, wait_for


def _forged(request: Request) -> Identity:
    name = request.headers.get("x-test-user", "nobody")
    return Identity(name, admin=name == "root")


@contextmanager
def _served(app: Starlette, path: Path) -> Iterator[httpx.Client]:
    """The app behind a real uvicorn on a Unix socket, in a thread; a client of it."""
    server = uvicorn.Server(
        uvicorn.Config(app, uds=str(path), lifespan="off", log_config=None, access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 10, 0.01, "the test server")
        transport = httpx.HTTPTransport(uds=str(path))
        with httpx.Client(transport=transport, base_url="http://htgrid") as http:
            yield http
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[httpx.Client]:
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    service = QueueService(
        worker, lambda: {"local_jobs_running": 0}, spool=lambda c, p: tmp_path / f"{c}.{p}"
    )
    app = create_app(service, _forged)
    try:
        with _served(app, tmp_path / "api.sock") as http:
            yield http
    finally:
        worker.close()


def _as(http: httpx.Client, user: str) -> ScheddClient:
    http.headers["x-test-user"] = user
    return ScheddClient("/nowhere", http=http)


def _submit(schedd: ScheddClient, procs: int = 1) -> int:
    cluster = schedd.reserve_cluster()
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "Note": "shared"})
    schedd.submit(cluster, ad, [ClassAd({"Item": i}) for i in range(procs)])
    return cluster


def test_submit_query_and_history(app_client: httpx.Client) -> None:
    alice = _as(app_client, "alice")
    cluster = _submit(alice, 3)
    ads = alice.query(f"ClusterId == {cluster}", ["Item", "Owner", "TotalSubmitProcs"])
    assert [(ad["ProcId"], ad["Item"], ad["Owner"]) for ad in ads] == [
        (0, 0, "alice"),
        (1, 1, "alice"),
        (2, 2, "alice"),
    ]
    assert ads[0]["TotalSubmitProcs"] == 3
    assert alice.get(f"{cluster}.1")["Note"] == "shared"
    assert alice.query(limit=1)[0]["ProcId"] == 0
    alice.act(JobAction.Remove, Jobs.of([f"{cluster}.2"]), "done with it")
    (gone,) = alice.history(f"ClusterId == {cluster}")
    assert (gone["ProcId"], gone["JobStatus"], gone["RemoveReason"]) == (2, 3, "done with it")


def test_expressions_survive_the_trip(app_client: httpx.Client) -> None:
    alice = _as(app_client, "alice")
    cluster = alice.reserve_cluster()
    ad = ClassAd('[Cmd = "/bin/true"; OnExitHold = ExitCode == 3; Text = "/Expr(no)/"]')
    alice.submit(cluster, ad, [ClassAd()])
    back = alice.get(f"{cluster}.0")
    assert repr(back.lookup("OnExitHold")) == "ExitCode == 3"
    assert back["Text"] == "/Expr(no)/"


def test_another_users_jobs_are_refused(app_client: httpx.Client) -> None:
    cluster = _submit(_as(app_client, "alice"), 2)
    bob = _as(app_client, "bob")
    for action in (JobAction.Hold, JobAction.Remove):
        with pytest.raises(NotAuthorized, match="owned by alice; bob may not"):
            bob.act(action, Jobs.of([f"{cluster}.0"]))
        with pytest.raises(NotAuthorized):
            bob.act(action, Jobs.in_cluster(cluster))
    with pytest.raises(NotAuthorized):
        bob.edit(Jobs.of([f"{cluster}.0"]), {"Note": '"mine now"'})
    # A constraint skips what is not yours, and -all means your own jobs only.
    assert bob.act(JobAction.Hold, Jobs.matching("true")) == []
    assert bob.act(JobAction.Hold, Jobs.mine()) == []
    assert all(ad["JobStatus"] == JobStatus.IDLE for ad in bob.query())
    # The queue's super user may.
    root = _as(app_client, "root")
    assert [str(j) for j in root.act(JobAction.Hold, Jobs.in_cluster(cluster))] == [
        f"{cluster}.0",
        f"{cluster}.1",
    ]


def test_a_reserved_cluster_belongs_to_who_reserved_it(app_client: httpx.Client) -> None:
    cluster = _as(app_client, "alice").reserve_cluster()
    bob = _as(app_client, "bob")
    with pytest.raises(NotAuthorized, match="reserved by alice"):
        bob.submit(cluster, ClassAd({"Cmd": "/bin/true"}), [ClassAd()])
    with pytest.raises(InvalidSubmit, match="not reserved"):
        bob.submit(cluster + 100, ClassAd({"Cmd": "/bin/true"}), [ClassAd()])
    # A user's jobs are the user's, whatever the ad says (the ad's Owner is not believed).
    (job,) = bob.submit(
        bob.reserve_cluster(), ClassAd({"Cmd": "/bin/true", "Owner": "alice"}), [ClassAd()]
    )
    assert bob.get(job)["Owner"] == "bob"


def test_errors_come_back_as_the_same_classes(app_client: httpx.Client) -> None:
    alice = _as(app_client, "alice")
    cluster = _submit(alice)
    with pytest.raises(JobNotFound, match=r"job 999\.0 is not in the queue"):
        alice.get("999.0")
    with pytest.raises(InvalidTransition, match="not Held"):
        alice.act(JobAction.Release, Jobs.of([f"{cluster}.0"]))
    with pytest.raises(ProtectedAttribute):
        alice.edit(Jobs.in_cluster(cluster), {"Owner": '"bob"'})
    text = "JobStatus == 1 &&\n  (Owner =="
    with pytest.raises(ClassAdSyntaxError) as local:
        ExprTree(text)
    with pytest.raises(ClassAdSyntaxError) as caught:
        alice.query(text)
    assert (caught.value.line, caught.value.column) == (2, 12)
    assert str(caught.value) == str(local.value)  # the same message, caret and all
    with pytest.raises(ClassAdSyntaxError):
        alice.edit(Jobs.in_cluster(cluster), {"Note": "1 +"})


def test_problem_documents(app_client: httpx.Client) -> None:
    app_client.headers["x-test-user"] = "alice"
    missing = app_client.get("/v1/jobs/999.0")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.json() == {
        "type": "urn:htgrid:problem:job-not-found",
        "title": "No such job in the queue.",
        "status": 404,
        "detail": "job 999.0 is not in the queue",
        "error": "JobNotFound",
    }
    bad = app_client.get("/v1/jobs", params={"constraint": "Owner =="})
    assert bad.status_code == 400
    assert bad.json()["error"] == "ClassAdSyntaxError"
    assert bad.json()["column"] == 9
    for body in ("{not json", '{"action": "explode", "jobs": {"all": true}}', "[]"):
        answer = app_client.post("/v1/jobs/act", content=body)
        assert answer.status_code == 400, body
        assert answer.json()["error"] == "BadRequest"
    answer = app_client.post("/v1/jobs/act", json={"action": "hold", "jobs": {"ids": []}})
    assert answer.json()["detail"] == "the list of job ids is empty"
    assert app_client.get("/v1/jobs", params={"limit": "-1"}).status_code == 400


def test_a_bad_request_raises_bad_request_on_the_client(app_client: httpx.Client) -> None:
    alice = _as(app_client, "alice")
    with pytest.raises(BadRequest, match="must not be negative"):
        alice.query(limit=-1)


def test_openapi_lists_every_route(app_client: httpx.Client, tmp_path: Path) -> None:
    doc = _as(app_client, "alice").openapi()
    assert doc["openapi"].startswith("3.")
    app = create_app(cast(QueueBackend, object()), _forged)  # the routes, not what serves them
    served = {(r.path, m) for r in app.routes for m in r.methods - {"HEAD"}}  # type: ignore[attr-defined]
    listed = {(path, m.upper()) for path, ops in doc["paths"].items() for m in ops}
    assert listed == served == {(r.path, r.method) for r in ROUTES}
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert op["summary"] and op["responses"], path
            for ref in _refs(op):
                assert ref.split("/")[-1] in doc["components"]["schemas"]


def _refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_peer_credentials_are_the_kernels() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        creds = peer_credentials(left)
    assert (creds.pid, creds.uid, creds.gid) == (os.getpid(), os.getuid(), os.getgid())
    assert creds.user == pwd.getpwuid(os.getuid()).pw_name


def test_a_request_without_peer_credentials_is_refused(tmp_path: Path) -> None:
    # Plain uvicorn, without the protocol that asks the kernel: no identity, no answer.
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    app = create_app(
        QueueService(worker, dict, spool=lambda c, p: tmp_path / f"{c}.{p}"), peercred_identity
    )
    try:
        with _served(app, tmp_path / "api.sock") as http:
            answer = http.get("/v1/health", headers={"x-test-user": "root"})
    finally:
        worker.close()
    assert answer.status_code == 403
    assert answer.json()["error"] == "NotAuthorized"


def test_the_daemon_names_callers_by_their_uid(tmp_path: Path) -> None:
    forged = {"x-test-user": "mallory", "x-htgrid-user": "mallory"}
    with PersonalPool(tmp_path / "pool", fsync=False) as pool:
        transport = httpx.HTTPTransport(uds=str(pool.home / "run" / "schedd.sock"))
        http = httpx.Client(transport=transport, base_url="http://htgrid", headers=forged)
        schedd = ScheddClient(pool.home / "run" / "schedd.sock", http=http)
        with schedd:
            you = schedd.health()["you"]
            cluster = _submit(schedd)
            owner = schedd.get(f"{cluster}.0")["Owner"]
    me = pwd.getpwuid(os.getuid()).pw_name
    assert you == {"user": me, "admin": me in ("root", "condor")}
    assert owner == me


@pytest.mark.parametrize(
    ("priority", "later"),
    [
        (None, False),
        ("u=7", True),
        ("u=7, i", True),
        ("i, u=7;x", True),
        ("u=3", False),
        ("u=8", False),
        ("u=seven", False),
        ("", False),
    ],
)
def test_an_edit_at_the_lowest_urgency_is_background_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, priority: str | None, later: bool
) -> None:
    # A grid manager lets finished remote jobs go with `Priority: u=7` (RFC 9218): the
    # daemon queues such an edit behind the jobs it is running. A header that does not
    # parse is the default urgency, as the RFC has it.
    lanes: list[bool] = []
    write = QueueWorker.write

    async def spy(
        self: QueueWorker,
        fn: Callable[[JobQueue], Any],
        *,
        client: bool = False,
        later: bool = False,
    ) -> Any:
        lanes.append(later)
        return await write(self, fn, client=client, later=later)

    monkeypatch.setattr(QueueWorker, "write", spy)
    worker = QueueWorker(JobQueue.open(tmp_path / "spool", fsync=False))
    service = QueueService(worker, dict, spool=lambda c, p: tmp_path / f"{c}.{p}")
    try:
        with _served(create_app(service, _forged), tmp_path / "api.sock") as http:
            cluster = _submit(_as(http, "alice"))
            lanes.clear()
            headers = {} if priority is None else {"priority": priority}
            body = {"jobs": {"ids": [f"{cluster}.0"]}, "attrs": {"Note": '"let go"'}}
            answer = http.post("/v1/jobs/edit", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            assert _as(http, "alice").get(f"{cluster}.0")["Note"] == "let go"
    finally:
        worker.close()
    assert lanes == [later]


def test_a_summary_of_totals_alone_is_the_owners_counts(app_client: httpx.Client) -> None:
    alice = _as(app_client, "alice")
    cluster = _submit(alice, 3)
    batches, owners, _ = alice.summary(None)
    assert [(b.cluster, b.jobs) for b in batches] == [(cluster, 3)]
    assert alice.summary(None, batches=False) == ([], owners, [])
    assert owners == {"alice": {1: 3}}
