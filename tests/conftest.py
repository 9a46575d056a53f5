"""Fixtures shared across test areas: a scratch default pool home, the test users as
local accounts, a real EC2 API on loopback (moto's server), and a request cancelled in
its TLS handshake.

Used by tests/backends/ec2 (the EC2 GAHP) and tests/grid (the grid manager's ec2 jobs).
moto is a test dependency (`htgrid[test]`): these tests never skip for want of it. The
server runs in a thread of the test process so a test can do what AWS does on its own
(reclaim a spot instance) by reaching into moto's backend. Nothing may reach real AWS:
the environment points every AWS client at moto and turns off instance metadata. boto3
and moto are imported only when a test asks for these fixtures.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import logging
import os
import pwd
import select
import shutil
import socket
import stat
import subprocess
import tempfile
import urllib.request
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

REGION = "us-east-1"
#: The one image moto offers here (loading moto's 1,200 stock images costs seconds a test).
AMI = {
    "ami_id": "ami-0a1b2c3d4e5f60718",
    "state": "available",
    "public": True,
    "owner_id": "801119661308",
    "image_location": "amazon/htgrid-test",
    "root_device_type": "ebs",
    "root_device_name": "/dev/sda1",
    "description": "htgrid test image",
    "image_type": "machine",
    "architecture": "x86_64",
    "name": "htgrid-test-linux",
    "virtualization_type": "hvm",
    "hypervisor": "xen",
}

#: The stock moto image tests/annex boots (tests/annex/conftest.py's IMAGE).
ANNEX_IMAGE = "ami-12c6146b"


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """A moto server on 127.0.0.1 with a free port; AWS clients in this run point at it."""
    from moto import settings as moto_settings
    from moto.ec2.models import amis as moto_amis
    from moto.server import ThreadedMotoServer

    # werkzeug logs every request at INFO; the tests' own output is enough.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    saved = dict(os.environ)
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": url,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
    )
    # Real EC2 refuses unknown AMIs; moto only does when asked to.
    moto_settings.ENABLE_AMI_VALIDATION = True
    # One image instead of moto's stock list: set MOTO_AMIS_PATH (checked when a region
    # is first used) and swap the list moto read at import.
    os.environ["MOTO_AMIS_PATH"] = os.devnull
    stock = list(moto_amis.AMIS)
    # tests/annex's moto, in this process too when pytest -n runs them after this, boots
    # one of moto's stock images (its IMAGE): that one stays.
    annex = [dict(image) for image in stock if image["ami_id"] == ANNEX_IMAGE]
    moto_amis.AMIS[:] = [dict(AMI), *annex]
    try:
        yield url
    finally:
        moto_amis.AMIS[:] = stock
        moto_settings.ENABLE_AMI_VALIDATION = False
        os.environ.clear()
        os.environ.update(saved)
        server.stop()


@pytest.fixture
def aws(moto_url: str) -> Any:
    """A boto3 EC2 client on a freshly reset moto, for setting up and checking."""
    reset = urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(reset, timeout=30):
        pass
    import boto3  # type: ignore[import-untyped]

    return boto3.client("ec2", endpoint_url=moto_url, region_name=REGION)


@pytest.fixture
def ami(aws: Any) -> str:
    """The AMI moto knows."""
    return str(AMI["ami_id"])


@pytest.fixture
def keys(tmp_path: Path) -> tuple[str, str]:
    """Access and secret key files, as a user's job names them."""
    access = tmp_path / "access.key"
    secret = tmp_path / "secret.key"
    access.write_text("AKIDEXAMPLETESTING\n")
    secret.write_text("  secret/EXAMPLE+testing  \n")
    for path in (access, secret):
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return str(access), str(secret)


@pytest.fixture(autouse=True, scope="session")
def _no_real_pool_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the suite out of the user's own pool: whatever a test starts without naming a
    home (a daemon, `htgrid token create`, a collector) gets a scratch one, never ~/.htgrid."""
    saved = os.environ.get("HTGRID_HOME")
    os.environ["HTGRID_HOME"] = str(tmp_path_factory.mktemp("default-home"))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HTGRID_HOME", None)
        else:
            os.environ["HTGRID_HOME"] = saved


#: The users the tests name in tokens and jobs: alice submits, bob is someone else, carol
#: is submitted for by an administrator, mallory is claimed in an ad and not believed.
TEST_USERS = ("alice", "bob", "carol", "mallory")


@pytest.fixture(scope="session")
def test_users() -> tuple[str, ...]:
    """TEST_USERS as local accounts: a pool queues only jobs whose owner is an account of
    its host. Made as root (useradd: no home, no login) when missing, and left for the
    next run, as other test runs on the host may use them at the same time. Not root: the
    test is skipped (a failure under CI=true, which runs as root)."""
    missing = []
    for name in TEST_USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            missing.append(name)
    if not missing:
        return TEST_USERS
    if os.geteuid() != 0:
        why = f"the test users {', '.join(missing)} are not accounts here (root makes them)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    with open("/tmp/htgrid-test-users.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs starting together
        for name in missing:
            done = subprocess.run(
                ["useradd", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin",
                 "-c", "htgrid test user", name],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode not in (0, 9):  # 9: it exists (made by another run)
                pytest.fail(f"useradd {name}: {done.stderr.strip()}")
    return TEST_USERS


@pytest.fixture(scope="session")
def shared_tmp_factory(request: pytest.FixtureRequest) -> Iterator[Callable[[str], Path]]:
    """Makes scratch directories other local users pass through (0711, under /tmp:
    pytest's own are root's alone), for pools whose jobs run as the test users: their
    jobs reach their spool and execute directories through the pool's home. Removed
    after the session, unless a test failed (the pools' logs are there)."""
    base = Path(tempfile.mkdtemp(prefix="htgrid-tests-", dir="/tmp"))
    base.chmod(0o711)

    def make(name: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
        path.chmod(0o711)
        return path

    yield make
    if request.session.testsfailed:
        print(f"\nkept for a look at the failures: {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)


#: Given a listener's "host:port", a request to it and how to close its client.
StartRequest = Callable[[str], tuple[Coroutine[Any, Any, Any], Callable[[], Awaitable[None]]]]


@pytest.fixture
def cancelled_in_handshake() -> Callable[[StartRequest], tuple[int, list[str]]]:
    """Runs a request against a listener that accepts and never answers (a daemon that
    died, its socket kept by its master), cancels it in its TLS handshake, closes the
    client: (file descriptors left open, ResourceWarnings raised)."""

    def check(start: StartRequest) -> tuple[int, list[str]]:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()  # the kernel accepts the connection; nobody answers its hello
            address = f"127.0.0.1:{listener.getsockname()[1]}"

            async def run() -> int:
                before = len(os.listdir("/proc/self/fd"))
                request, close = start(address)
                task = asyncio.create_task(request)
                await asyncio.to_thread(select.select, [listener], [], [], 10)
                await asyncio.sleep(0.2)  # connected: now waiting in the handshake
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await close()
                return len(os.listdir("/proc/self/fd")) - before

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ResourceWarning)
                left_open = asyncio.run(run())
                gc.collect()
        return left_open, [str(w.message) for w in caught if w.category is ResourceWarning]

    return check


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`-n N --dist loadgroup`, as .ci/run runs the suite) one worker
    runs all the tests of a module, in order, as a module-scoped daemon and the tests
    sharing it expect: each test not in an `xdist_group` of its own is put in its module's
    (`@remote/test_restart` ends its id then). An explicit group spans modules and is what
    must never run side by side (tests/README.md: keeping a test parallel-safe)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            module = item.nodeid.split("::", 1)[0].removeprefix("tests/").removesuffix(".py")
            item.add_marker(pytest.mark.xdist_group(module))
