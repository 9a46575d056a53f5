"""What every HTTP API htgrid serves (the schedd's on its socket and over TLS, the
collector's, the execute node's) takes from a client: a JSON body over
MAX_API_REQUEST_MB is refused with 413 before it is read, and a client whose headers
or body trickle in is answered 408 and cut off after API_HEADER_TIMEOUT or
API_BODY_TIMEOUT, while the other clients are served as usual."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import ssl
import tarfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from htgrid.classad import ClassAd
from htgrid.net import Jobs
from htgrid.net.security import SecurityConfig, TokenIssuer
from htgrid.pool import ApiLimits
from htgrid.queue import JobAction
from htgrid.startd._api import create_app, start_unix_server
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing.collector import collector_thread, pool_home

DOMAIN = "limits.test"
# Short clocks, so that a test waits seconds; a 1 MiB cap, so that bodies stay small.
KNOBS = {"API_HEADER_TIMEOUT": 2, "API_BODY_TIMEOUT": 2, "MAX_API_REQUEST_MB": 1}
LIMITS = ApiLimits(max_request_mb=1, header_timeout=2, body_timeout=2)
MIB = 1 << 20
SPOOLING = {"JobStatus": 5, "HoldReasonCode": 16, "HoldReasonSubCode": 0}
GIVE_UP = 60.0  # a connection never cut off fails the test after this long


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    home = tmp_path_factory.mktemp("limits")
    with PersonalPool(home, fsync=False, config={"TRUST_DOMAIN": DOMAIN, **KNOBS}) as running:
        yield running


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    conf = "".join(f"{k} = {v}\n" for k, v in KNOBS.items())
    home = pool_home(tmp_path_factory.mktemp("collector"), DOMAIN, conf)
    with collector_thread(home) as address:
        yield address, home


class _Node:
    """Just enough of an execute node for its API to answer health and refuse claims."""

    def health(self) -> dict[str, Any]:
        return {"name": "node.test"}

    def request_claim(self, *args: object) -> Any:
        raise AssertionError("a refused body never reaches the node")

    async def claim_status(self, *args: object) -> Any:
        raise AssertionError("no claim is asked about here")


@pytest.fixture(scope="module")
def startd_socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("startd") / "startd.sock"
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: list[asyncio.Event] = []

    async def serve() -> None:
        stop.append(asyncio.Event())
        server, serving = await start_unix_server(create_app(_Node(), LIMITS), path, LIMITS)  # type: ignore[arg-type]
        ready.set()
        await stop[0].wait()
        server.should_exit = True
        await serving

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    assert ready.wait(30), "the execute node's API did not start"
    try:
        yield path
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)
        loop.close()


# -- connections, raw ---------------------------------------------------------------------


def _unix(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return sock


def _tls(address: str, ca: Path) -> socket.socket:
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    raw = socket.create_connection((host, int(port)))
    return context.wrap_socket(raw)


def _schedd_tls(pool: PersonalPool) -> socket.socket:
    return _tls(urlsplit(pool.url).netloc, SecurityConfig.load(pool.home).ca_dir / "ca.crt")


def _collector_tls(collector: tuple[str, Path]) -> socket.socket:
    address, home = collector
    return _tls(address, SecurityConfig.load(home).ca_dir / "ca.crt")


def _until_closed(sock: socket.socket, trickle: bytes | None) -> bytes:
    """What the server sends until it closes the connection, `trickle` sent a byte at a
    time meanwhile (a slow client); AssertionError if it never closes."""
    sock.settimeout(0.25)
    got = b""
    sent = 0
    deadline = threading.Event()
    timer = threading.Timer(GIVE_UP, deadline.set)
    timer.start()
    try:
        while not deadline.is_set():
            if trickle is not None and sent < len(trickle):
                try:
                    sock.sendall(trickle[sent : sent + 1])
                    sent += 1
                except OSError:
                    pass  # closed: what it said is read below
            try:
                data = sock.recv(65536)
            except (TimeoutError, ssl.SSLWantReadError):
                continue
            except OSError:
                return got
            if not data:
                return got
            got += data
        raise AssertionError(f"the server never closed the connection (got {got[:200]!r})")
    finally:
        timer.cancel()
        sock.close()


def _status(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


SLOW_HEAD = b"GET /v1/health HTTP/1.1\r\nHost: htgrid\r\nX-Slow: " + b"a" * 10_000


def _slow_body_request(path: str, token: str | None = None) -> tuple[bytes, bytes]:
    """The head of a JSON POST announcing 10,000 bytes, and its body, to trickle."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: htgrid\r\n{auth}Content-Type: application/json\r\n"
        "Content-Length: 10000\r\n\r\n"
    ).encode()
    return head, b" " * 10_000


def _cut_off_while_others_are_served(
    connect: Callable[[], socket.socket],
    first: bytes,
    trickle: bytes,
    others: Callable[[], None],
) -> list[bytes]:
    """Three slow clients: each sends `first`, then `trickle` a byte at a time. While they
    hold their connections, `others` makes its requests; then each slow one must be
    cut off. What each slow client was sent."""
    answers: list[bytes] = []
    started = threading.Barrier(4)

    def slow() -> None:
        sock = connect()
        sock.sendall(first)
        started.wait(30)
        answers.append(_until_closed(sock, trickle))

    threads = [threading.Thread(target=slow) for _ in range(3)]
    for thread in threads:
        thread.start()
    started.wait(30)
    others()  # served while the slow clients hold their connections
    for thread in threads:
        thread.join(GIVE_UP + 10)
    assert len(answers) == 3
    return answers


def _assert_timed_out(answers: list[bytes], knob: str) -> None:
    for answer in answers:
        assert _status(answer) == 408
        assert knob.encode() in answer


# -- slow clients ----------------------------------------------------------------------


def test_a_trickling_header_is_cut_off_on_the_socket(pool: PersonalPool) -> None:
    def others() -> None:
        with pool.client() as schedd:
            assert schedd.health()["status"] == "ok"

    answers = _cut_off_while_others_are_served(
        lambda: _unix(pool.config.socket), SLOW_HEAD[:40], SLOW_HEAD[40:], others
    )
    _assert_timed_out(answers, "API_HEADER_TIMEOUT = 2 s")
    with pool.client() as schedd:  # and the daemon still serves
        assert schedd.health()["status"] == "ok"


def test_a_trickling_header_is_cut_off_over_tls(pool: PersonalPool) -> None:
    def others() -> None:
        with pool.remote(pool.token(f"alice@{DOMAIN}")) as schedd:
            assert schedd.health()["you"]["user"] == "alice"

    answers = _cut_off_while_others_are_served(
        lambda: _schedd_tls(pool), SLOW_HEAD[:40], SLOW_HEAD[40:], others
    )
    _assert_timed_out(answers, "API_HEADER_TIMEOUT")


def test_a_connection_that_sends_nothing_is_closed(pool: PersonalPool) -> None:
    answer = _until_closed(_unix(pool.config.socket), None)
    _assert_timed_out([answer], "API_HEADER_TIMEOUT")


def test_a_trickling_body_is_cut_off_on_the_socket(pool: PersonalPool) -> None:
    head, body = _slow_body_request("/v1/jobs/act")

    def others() -> None:
        with pool.client() as schedd:
            assert schedd.query() == []

    answers = _cut_off_while_others_are_served(
        lambda: _unix(pool.config.socket), head, body, others
    )
    _assert_timed_out(answers, "API_BODY_TIMEOUT = 2 s")


def test_a_trickling_body_is_cut_off_over_tls(pool: PersonalPool) -> None:
    token = pool.token(f"alice@{DOMAIN}")
    head, body = _slow_body_request("/v1/jobs/act", token)

    def others() -> None:
        with pool.remote(token) as schedd:
            assert schedd.query() == []

    answers = _cut_off_while_others_are_served(lambda: _schedd_tls(pool), head, body, others)
    _assert_timed_out(answers, "API_BODY_TIMEOUT")


def test_the_collector_cuts_off_slow_clients(collector: tuple[str, Path]) -> None:
    address, home = collector
    ca = SecurityConfig.load(home).ca_dir / "ca.crt"

    def others() -> None:
        context = ssl.create_default_context(cafile=str(ca))
        with httpx.Client(base_url=f"https://{address}", verify=context) as http:
            assert http.get("/v1/health").status_code == 401  # answered: no token sent

    answers = _cut_off_while_others_are_served(
        lambda: _collector_tls(collector), SLOW_HEAD[:40], SLOW_HEAD[40:], others
    )
    _assert_timed_out(answers, "API_HEADER_TIMEOUT")


def test_the_execute_node_cuts_off_slow_clients(startd_socket: Path) -> None:
    def others() -> None:
        transport = httpx.HTTPTransport(uds=str(startd_socket))
        with httpx.Client(transport=transport, base_url="http://startd") as http:
            assert http.get("/v1/health").json()["name"] == "node.test"

    head, body = _slow_body_request("/v1/claims")
    answers = _cut_off_while_others_are_served(
        lambda: _unix(startd_socket), SLOW_HEAD[:40], SLOW_HEAD[40:], others
    )
    _assert_timed_out(answers, "API_HEADER_TIMEOUT")
    answers = _cut_off_while_others_are_served(lambda: _unix(startd_socket), head, body, others)
    _assert_timed_out(answers, "API_BODY_TIMEOUT")


# -- the size of a JSON body -----------------------------------------------------------


@contextmanager
def _head_only(connect: Callable[[], socket.socket], head: bytes) -> Iterator[bytes]:
    """Send only the head of a request announcing a large body; what the server answers
    (the body is never sent: the answer must not wait for it)."""
    sock = connect()
    try:
        sock.sendall(head)
        yield _until_closed(sock, None)
    finally:
        sock.close()


def _big_head(path: str, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: htgrid\r\n{auth}Content-Type: application/json\r\n"
        f"Content-Length: {2 * MIB}\r\n\r\n"
    ).encode()


def test_a_json_body_over_the_cap_is_refused_before_it_is_read(pool: PersonalPool) -> None:
    with _head_only(lambda: _unix(pool.config.socket), _big_head("/v1/jobs")) as answer:
        assert _status(answer) == 413
        assert b"over the limit of MAX_API_REQUEST_MB = 1 MiB" in answer
    token = pool.token(f"alice@{DOMAIN}")
    with _head_only(lambda: _schedd_tls(pool), _big_head("/v1/jobs/edit", token)) as answer:
        assert _status(answer) == 413


def test_a_chunked_json_body_is_cut_off_once_it_passes_the_cap(pool: PersonalPool) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"cluster_ad": {"A": "'
        for _ in range(4 * 16):
            yield b"x" * 65536
        yield b'"}, "procs": [{}]}'

    transport = httpx.HTTPTransport(uds=str(pool.config.socket))
    with httpx.Client(transport=transport, base_url="http://htgrid", timeout=60) as http:
        answer = http.post(
            "/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
        )
    assert answer.status_code == 413
    assert answer.json()["error"] == "RequestTooLarge"
    with pool.client() as schedd:
        assert schedd.query() == []  # nothing of it was queued


def test_a_tar_over_the_json_cap_is_taken(pool: PersonalPool, tmp_path: Path) -> None:
    # MAX_API_REQUEST_MB is for JSON: an input sandbox has MAX_TRANSFER_INPUT_MB.
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:") as tar:
        info = tarfile.TarInfo("big.dat")
        info.size = 2 * MIB
        tar.addfile(info, io.BytesIO(b"b" * info.size))
    with pool.client() as schedd:
        ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": 5, "Iwd": str(tmp_path), **SPOOLING})
        (job,) = schedd.submit_new(ad, [ClassAd()])
        assert schedd.put_input(job, data.getvalue()) == [job]
        assert schedd.get(job)["JobStatus"] == 1
        schedd.act(JobAction.Remove, Jobs.of([job]))


def test_the_collector_refuses_a_body_over_the_cap(collector: tuple[str, Path]) -> None:
    _, home = collector
    token = TokenIssuer(SecurityConfig.load(home)).create(
        f"condor@{DOMAIN}", authz=["ADVERTISE_STARTD"]
    )
    head = _big_head("/v1/updates/UPDATE_STARTD_AD", token)
    with _head_only(lambda: _collector_tls(collector), head) as answer:
        assert _status(answer) == 413
        assert b"MAX_API_REQUEST_MB = 1 MiB" in answer


def test_the_execute_node_refuses_a_body_over_the_cap(startd_socket: Path) -> None:
    with _head_only(lambda: _unix(startd_socket), _big_head("/v1/claims")) as answer:
        assert _status(answer) == 413
        assert b"MAX_API_REQUEST_MB = 1 MiB" in answer


# -- a streamed submit (NDJSON) ------------------------------------------------------------

STREAM_AD = {"Cmd": "/bin/true", "JobUniverse": 5, "Iwd": "/tmp", "JobStatus": 5}


def _stream(pool: PersonalPool, lines: Iterator[bytes]) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=str(pool.config.socket))
    with httpx.Client(transport=transport, base_url="http://htgrid", timeout=GIVE_UP) as http:
        return http.post(
            "/v1/jobs", content=lines, headers={"content-type": "application/x-ndjson"}
        )


def _line(doc: object) -> bytes:
    return json.dumps(doc).encode() + b"\n"


def _removed(pool: PersonalPool, cluster: int) -> None:
    """The cluster removed, and gone from the queue (the tests here want it empty)."""
    with pool.client() as schedd:
        schedd.act(JobAction.Remove, Jobs.in_cluster(cluster))
        wait_for(lambda: schedd.query() == [], what="the queue empty")


def test_a_streamed_submit_caps_each_line_not_the_whole(pool: PersonalPool) -> None:
    big = {"Args": "x" * (MIB // 2)}  # two procs a line: each line is over 1 MiB

    def over() -> Iterator[bytes]:
        yield _line({"cluster_ad": STREAM_AD})
        yield _line({"procs": [big, big]})
        yield _line({"end": 2})

    answer = _stream(pool, over())
    assert answer.status_code == 413
    assert "a line of the request body is" in answer.json()["detail"]
    with pool.client() as schedd:
        assert schedd.query() == []

    def under() -> Iterator[bytes]:  # three MiB in all, a proc a line
        yield _line({"cluster_ad": STREAM_AD})
        for _ in range(6):
            yield _line({"procs": [big]})
        yield _line({"end": 6})

    answer = _stream(pool, under())
    assert answer.status_code == 201, answer.text
    assert answer.json()["procs"] == 6
    _removed(pool, answer.json()["cluster"])


def test_a_slow_stream_is_served_while_its_lines_keep_coming(pool: PersonalPool) -> None:
    # A line every 0.7 s for 4 s: past API_BODY_TIMEOUT = 2 s, and far below 1 KiB/s.
    pause = threading.Event()

    def slow() -> Iterator[bytes]:
        yield _line({"cluster_ad": STREAM_AD})
        for _ in range(6):
            pause.wait(0.7)  # a client that takes its time to make each proc
            yield _line({"procs": [{}]})
        yield _line({"end": 6})

    answer = _stream(pool, slow())
    assert answer.status_code == 201, answer.text
    _removed(pool, answer.json()["cluster"])


def test_a_stream_that_stops_midway_is_cut_off(pool: PersonalPool) -> None:
    first = _line({"cluster_ad": STREAM_AD}) + b'{"procs": [{}, {'
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: htgrid\r\nContent-Type: application/x-ndjson\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(first):x}\r\n".encode() + first + b"\r\n"
    )
    sock = _unix(pool.config.socket)
    sock.sendall(head)
    _assert_timed_out([_until_closed(sock, None)], "API_BODY_TIMEOUT = 2 s")
    with pool.client() as schedd:
        assert schedd.query() == []
