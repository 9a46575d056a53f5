"""Malformed requests to a real daemon's API: whatever the body, the path or the query,
the answer is a problem document with a 4xx status, never a 500, and the daemon goes on
serving. Bodies come from hypothesis: any JSON, JSON shaped like each route's, bytes
that are not JSON, nesting deeper than any decoder goes, integers past 64 bits."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from htgrid.collector import AdStore
from htgrid.collector.app import create_app
from htgrid.testing import PersonalPool

# hypothesis reports a failure through libcst, whose import warns (DeprecationWarning)
# and would turn the report of a failing example into an internal error of pytest.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# A JSON value: scalars of every kind (integers past 64 bits, NULs and lone surrogates
# in strings, expression markers), nested a few levels.
_TEXT = st.text(alphabet=st.characters(codec=None), max_size=12) | st.sampled_from(
    [
        "\0",
        "a\0b",
        "\ud800",
        "/Expr(1 +",
        "\0Expr(x)/",
        '\0Expr("a\0")/',
        "12.0",
        "99999999999999999999.0",
    ]
)
_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**64)
    | st.integers(min_value=-(2**64), max_value=-(2**63) + 2)
    | st.floats(allow_nan=True, allow_infinity=True)
    | _TEXT
)
_JSON = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)
_AD = st.dictionaries(_TEXT | st.sampled_from(["Cmd", "Owner", "JobStatus", "UserLog"]), _JSON)
_IDS = st.lists(_TEXT | st.sampled_from(["1.0", "0.0", "9223372036854775808.0"]) | _JSON)
_SELECTION = (
    st.fixed_dictionaries({"ids": _IDS})
    | st.fixed_dictionaries({"cluster": _JSON | st.integers()})
    | st.fixed_dictionaries({"constraint": _JSON | _TEXT | st.just("((((")})
    | st.fixed_dictionaries({"all": _JSON})
    | _JSON
)
_BODIES: dict[str, Any] = {
    "submit": st.fixed_dictionaries({"cluster_ad": _AD | _JSON, "procs": st.lists(_AD | _JSON)}),
    "act": st.fixed_dictionaries(
        {"action": st.sampled_from(["hold", "release", "remove", "x"]) | _JSON},
        optional={"jobs": _SELECTION, "reason": _TEXT | _JSON},
    ),
    "edit": st.fixed_dictionaries(
        {"jobs": _SELECTION, "attrs": st.dictionaries(_TEXT, _TEXT | _JSON) | _JSON}
    ),
    "lease": st.fixed_dictionaries({"leases": st.dictionaries(_TEXT, _JSON) | _JSON}),
    "outputs": st.fixed_dictionaries({"jobs": _IDS | _JSON}),
    "annex_token": st.fixed_dictionaries(
        {"annex": st.sampled_from(["a1", "x-y", "", "a" * 60]) | _TEXT | _JSON},
        optional={
            "lifetime": _JSON | st.sampled_from([1, 3600, 10**12, -5, 1e308]),
            "expires": _JSON,
            "authz": st.lists(st.sampled_from(["ADVERTISE_STARTD", "WRITE", "x"])) | _JSON,
            "identity": _TEXT | _JSON,
        },
    ),
    "annex_revoke": st.fixed_dictionaries({"annex": _TEXT | _JSON}),
}
_ROUTES: dict[str, tuple[str, str]] = {
    "submit": ("POST", "/v1/jobs"),
    "act": ("POST", "/v1/jobs/act"),
    "edit": ("POST", "/v1/jobs/edit"),
    "lease": ("POST", "/v1/jobs/lease"),
    "outputs": ("POST", "/v1/jobs/output"),
    "annex_token": ("POST", "/v1/annex/tokens"),
    "annex_revoke": ("POST", "/v1/annex/revocations"),
}
_DEEP = "[" * 3000 + "]" * 3000  # past the JSON decoder's recursion limit
_RAW_BODIES = st.binary(max_size=64) | st.sampled_from(
    [
        _DEEP.encode(),
        ('{"procs": [{"a": ' + _DEEP + "}]}").encode(),
        b'{"cluster_ad": {"A": 1}, "procs": [{"B": 99999999999999999999999}]}',
        b"\xff\xfe{}",
        b'{"jobs": {"ids": ["1.0"]}, "attrs": {"A": "\\"\\u0000\\""}}',
    ]
)
_SETTINGS = settings(
    max_examples=int(os.environ.get("HTGRID_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PersonalPool]:
    with PersonalPool(tmp_path_factory.mktemp("fuzz"), fsync=False) as running:
        yield running


@pytest.fixture(scope="module")
def http(pool: PersonalPool) -> Iterator[httpx.Client]:
    transport = httpx.HTTPTransport(uds=str(pool.config.socket))
    with httpx.Client(transport=transport, base_url="http://htgrid", timeout=30) as client:
        yield client


def _sent(http: httpx.Client, method: str, path: str, body: bytes) -> None:
    """The answer is a 4xx problem document (or a success), and the daemon still serves."""
    headers = {"content-type": "application/json"}
    answer = http.request(method, path, content=body, headers=headers)
    assert answer.status_code < 500, (path, body[:200], answer.text[:500])
    if answer.status_code >= 400:
        problem = answer.json()
        assert problem["status"] == answer.status_code and problem["detail"], problem


@pytest.mark.parametrize("route", sorted(_ROUTES))
def test_json_shaped_like_the_route_is_never_a_500(http: httpx.Client, route: str) -> None:
    method, path = _ROUTES[route]

    @_SETTINGS
    @given(body=_BODIES[route])
    def check(body: Any) -> None:
        _sent(http, method, path, json.dumps(body).encode("utf-8", "surrogatepass"))

    check()


@pytest.mark.parametrize("route", sorted(_ROUTES))
def test_bytes_that_are_not_json_are_never_a_500(http: httpx.Client, route: str) -> None:
    method, path = _ROUTES[route]

    @_SETTINGS
    @given(body=_RAW_BODIES)
    def check(body: bytes) -> None:
        _sent(http, method, path, body)

    check()


@_SETTINGS
@given(
    job=st.sampled_from(["1.0", "99999999999999999999.0", "1.99999999999999999999", "x", "-1.0"])
    | st.text(alphabet="0123456789.", min_size=1, max_size=40),
    params=st.dictionaries(
        st.sampled_from(["constraint", "projection", "limit"]),
        st.sampled_from(["99999999999999999999", "-1", "((", "a\0b", "", "x,y"]) | _TEXT,
    ),
)
def test_paths_and_queries_are_never_a_500(
    http: httpx.Client, job: str, params: dict[str, str]
) -> None:
    clean = {
        k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for k, v in params.items()
    }
    for method, path in (
        ("GET", f"/v1/jobs/{job}"),
        ("GET", f"/v1/jobs/{job}/output"),
        ("POST", f"/v1/clusters/{job.split('.')[0] or '0'}/jobs"),
    ):
        answer = http.request(method, path, json={"cluster_ad": {}, "procs": [{}]})
        assert answer.status_code < 500, (path, answer.text[:300])
    for path in ("/v1/jobs", "/v1/history"):
        answer = http.get(path, params=clean)
        assert answer.status_code < 500, (path, clean, answer.text[:300])
    assert http.get("/v1/health").status_code == 200


_COLLECTOR_BODIES = (
    st.lists(_AD | _JSON, max_size=3).map(lambda v: json.dumps(v).encode("utf-8", "surrogatepass"))
    | _AD.map(lambda v: json.dumps(v).encode("utf-8", "surrogatepass"))
    | _RAW_BODIES
)


def test_collector_updates_are_never_a_500() -> None:
    store = AdStore(clock=lambda: 1_700_000_000.0)
    app = create_app(store)

    async def post(path: str, body: bytes) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://collector") as http:
            return await http.post(path, content=body)

    @_SETTINGS
    @given(
        path=st.sampled_from(
            [
                "/v1/updates/UPDATE_STARTD_AD",
                "/v1/updates/UPDATE_SCHEDD_AD",
                "/v1/invalidations/INVALIDATE_STARTD_ADS",
                "/v1/updates/NO_SUCH_COMMAND",
            ]
        ),
        body=_COLLECTOR_BODIES,
    )
    def check(path: str, body: bytes) -> None:
        answer = asyncio.run(post(path, body))
        assert answer.status_code < 500, (path, body[:200], answer.text[:500])

    check()
