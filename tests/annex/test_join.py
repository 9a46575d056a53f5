"""End to end: an annex is created, its instances (booted by the harness from their real
user data) read their token from SSM, join the pool, run the jobs aimed at the annex
(and only those), show in the annex ads, and stop at the lease's end, by the lease
function in the cloud and by themselves."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from htgrid.annex import Annexes, AnnexSpec, AwsAnnexes, lease_parameter, token_parameter
from htgrid.annex import lease_function as lf
from htgrid.classad import ClassAd
from htgrid.client import StoredToken
from htgrid.collector import CollectorClient
from htgrid.net import ScheddClient
from htgrid.net.security import SecurityConfig
from htgrid.pool import HomeLayout
from htgrid.queue import NotAuthorized
from htgrid.testing import PersonalPool, run_cli, wait_for
from htgrid.testing.annex import InstanceHarness
from htgrid.testing.node import CENTRAL_MANAGER, FAST_CYCLES

from .conftest import IMAGE, OWNER, REGION, boto

NODE = ["NUM_CPUS=1", "MEMORY=512", "ALLOW_ROOT_JOBS=true", "JOB_MAX_VACATE_TIME=1"]


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[PersonalPool]:
    with PersonalPool(
        tmp_path / "pool", kill_grace=2, fsync=False, daemons=CENTRAL_MANAGER, config=FAST_CYCLES
    ) as running:
        yield running


@pytest.fixture
def harness(aws: str) -> Iterator[InstanceHarness]:
    # A short path: each node's Unix socket lives under it (and its jobs pass through it).
    cloud = Path(tempfile.mkdtemp(prefix="hx", dir="/tmp"))
    cloud.chmod(0o755)
    try:
        with InstanceHarness(cloud) as running:
            yield running
    finally:
        shutil.rmtree(cloud, ignore_errors=True)


def _ads(pool: PersonalPool, my_type: str, constraint: str | None = None) -> list[ClassAd]:
    async def query() -> list[ClassAd]:
        async with CollectorClient(pool.collector, home=pool.home, daemon=True) as c:
            return await c.query(my_type, constraint)

    return asyncio.run(query())


def _create(pool: PersonalPool, name: str, *args: str) -> None:
    config = [item for knob in NODE for item in ("--config", knob)]
    status, _, err = run_cli(
        pool.home,
        "annex",
        "create",
        name,
        "--image-ids",
        IMAGE,
        "--pool",
        pool.collector,
        *config,
        *args,
    )
    assert status == 0, err


def _submit(pool: PersonalPool, work: Path, *args: str, until: Path | None = None) -> int:
    """Submit a job that writes where it ran (and then runs until `until` exists)."""
    work.mkdir(parents=True, exist_ok=True)
    wait = "" if until is None else f"; until [ -e {until} ]; do sleep 0.1; done"
    (work / "job.sub").write_text(
        f"executable = /bin/sh\narguments = \"-c 'pwd > out.txt{wait}'\"\n"
        "should_transfer_files = YES\nwhen_to_transfer_output = ON_EXIT\n"
        "request_memory = 16\nrequest_cpus = 1\nqueue\n"
    )
    cwd = os.getcwd()
    os.chdir(work)
    try:
        status, out, err = run_cli(pool.home, "submit", *args, "job.sub")
    finally:
        os.chdir(cwd)
    assert status == 0, err
    return int(out.strip().rsplit(" ", 1)[-1].rstrip("."))


def _history(pool: PersonalPool, cluster: int) -> ClassAd | None:
    with pool.client() as schedd:
        ads = schedd.history(f"ClusterId == {cluster}")
    return ads[0] if ads else None


def _job(pool: PersonalPool, cluster: int) -> ClassAd:
    with pool.client() as schedd:
        (ad,) = schedd.query(f"ClusterId == {cluster}")
    return ad


def _live() -> list[str]:
    pages = boto("ec2").describe_instances()["Reservations"]  # type: ignore[attr-defined]
    return [
        i["InstanceId"]
        for r in pages
        for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]


def _lease_event() -> dict[str, Any]:
    events = boto("events")
    (rule,) = events.list_rules(NamePrefix=lf.RULE_PREFIX)["Rules"]  # type: ignore[attr-defined]
    (target,) = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]  # type: ignore[attr-defined]
    return dict(json.loads(target["Input"]))


def _slots_shown(pool: PersonalPool, annex: str) -> list[list[str]]:
    """`htgrid status -af Name Machine State` for the annex's slots."""
    constraint = f'AnnexName == "{annex}"'
    status, out, err = run_cli(
        pool.home, "status", "-constraint", constraint, "-af", "Name", "Machine", "State"
    )
    assert status == 0, err
    return [line.split() for line in out.splitlines()]


def _run_shown(pool: PersonalPool, annex: str, work: Path, hosts: set[str]) -> ClassAd:
    """Run a job on the annex: while it runs `htgrid status` shows its dynamic slot, on
    the instance's host; once it is done the slot is gone, as the startd removed it.
    The job's history ad."""
    go = work.parent / f"{work.name}.go"
    cluster = _submit(pool, work, "-annex", annex, until=go)
    try:
        (running,) = wait_for(
            lambda: [s for s in _slots_shown(pool, annex) if s[0].startswith("slot1_1@")],
            timeout=120,
            interval=0.2,
            what="the running job's dynamic slot in htgrid status",
        )
    finally:
        go.touch()
    name, machine, state = running
    assert machine in hosts and name == f"slot1_1@{machine}" and state == "Claimed", running
    ad = wait_for(lambda: _history(pool, cluster), timeout=120, interval=0.2, what="the job")
    # Removed by the startd (the collector takes its invalidation), not left to expire.
    wait_for(
        lambda: all(s[0].startswith("slot1@") for s in _slots_shown(pool, annex)),
        timeout=30,
        interval=0.2,
        what="the released dynamic slot gone from htgrid status",
    )
    return ad


def _diagnose(harness: InstanceHarness) -> str:
    return "\n".join(harness.log(i) for i in harness.booted()) + "\n" + "\n".join(harness.errors)


@pytest.mark.timeout(400)
def test_an_annex_joins_runs_its_jobs_and_ends_with_its_lease(
    pool: PersonalPool, harness: InstanceHarness, tmp_path: Path
) -> None:
    _create(pool, "big", "--count", "2", "--lifetime", "30m")
    seen: dict[str, float] = {}  # each instance's slot: when first in the collector

    def joined() -> list[ClassAd] | None:
        slots = _ads(pool, "Machine", 'AnnexName == "big"')
        for slot in slots:
            seen.setdefault(slot["EC2InstanceID"], time.monotonic())
        return slots if len(slots) == 2 else None

    try:
        slots = wait_for(joined, timeout=90, interval=0.1, what="the annex's two nodes in the pool")
    except TimeoutError:
        pytest.fail(_diagnose(harness))
    instance_ids = sorted(_live())
    # The figure (bench/README.md): from an instance running to its slot in the
    # pool, claimable (htgrid importable here: the wheel test below adds its install).
    took = sorted(round(seen[i] - harness.started(i), 1) for i in instance_ids)
    print(f"instance running -> slot claimable in the pool: {took} s")
    assert sorted(s["EC2InstanceID"] for s in slots) == instance_ids
    assert {s["Machine"] for s in slots} == {f"{i}.big.annex" for i in instance_ids}
    assert all(s["IsAnnex"] is True for s in slots)
    # By default through the pool's broker, as condor_annex: no inbound rule, NAT or not.
    assert all(f"CCBID={pool.collector}#{s['Machine']}" in s["MyAddress"] for s in slots), [
        s["MyAddress"] for s in slots
    ]

    # A job not aimed at the annex is not started there; one aimed at it runs.
    stray = _submit(pool, tmp_path / "stray")
    try:
        ad = _run_shown(pool, "big", tmp_path / "aimed", {s["Machine"] for s in slots})
    except TimeoutError:
        analysis = run_cli(pool.home, "q", "-better-analyze")
        logs = "".join(
            f"--- {f}\n{f.read_text(errors='replace')[-3000:]}"
            for f in sorted((pool.home / "log").iterdir())
        )
        pytest.fail(f"{analysis}\n{logs}\n{_diagnose(harness)}")
    assert ad["JobStatus"] == 4 and ad["ExitCode"] == 0
    assert ad["TargetAnnexName"] == "big"
    assert ad["LastRemoteHost"].endswith(".big.annex") and "CCBID=" in ad["StartdIpAddr"]
    # It ran in the sandbox of an instance's node (under its home in the harness).
    ran_in = Path((tmp_path / "aimed" / "out.txt").read_text().strip())
    assert any(ran_in.is_relative_to(harness.workdir / i) for i in instance_ids), ran_in
    assert _job(pool, stray)["JobStatus"] == 1  # idle: no slot of the pool would start it
    # The collector took every update and removal from the nodes.
    assert not [i for i in instance_ids if "refuse" in harness.log(i)], _diagnose(harness)

    # The annex's ad in the collector, and `htgrid status -annex`.
    status, out, err = run_cli(pool.home, "annex", "status", "big")
    assert status == 0, err
    assert "2 joined" in out
    (annex,) = _ads(pool, "Annex")
    assert annex["Name"] == "big" and annex["Joined"] == 2 and annex["Pending"] == 0
    assert sorted(annex["InstanceIds"]) == instance_ids
    assert annex["Owner"] == "root" and annex["Requested"] == 2
    status, out, err = run_cli(pool.home, "status", "-annex")
    assert status == 0, err
    assert "big" in out

    # The lease's end: the cloud's function terminates the instances (their nodes go
    # with them), then removes its rule and the token.
    event = _lease_event()
    done = lf.handler(event, None, clock=lambda: event["LeaseExpiration"] + 1)
    assert sorted(done["terminated"]) == instance_ids
    wait_for(lambda: not harness.running(), timeout=30, what="the instances' processes gone")
    assert _live() == []
    assert boto("events").list_rules(NamePrefix=lf.RULE_PREFIX)["Rules"] == []  # type: ignore[attr-defined]


@pytest.mark.timeout(300)
def test_a_node_stops_its_instance_at_the_lease_end_on_its_own(
    pool: PersonalPool, harness: InstanceHarness
) -> None:
    harness.extra_env["HTGRID_ANNEX_POLL"] = "0.5"
    _create(pool, "solo", "--count", "1", "--lifetime", "1h")
    try:
        wait_for(lambda: _ads(pool, "Machine", 'AnnexName == "solo"'), timeout=90, what="joined")
    except TimeoutError:
        pytest.fail(_diagnose(harness))
    # The lease (as the instances read it) ends: no lease function runs here, and the
    # node stops and shuts its instance down by itself.
    boto("ssm").put_parameter(  # type: ignore[attr-defined]
        Name=lease_parameter("solo"), Value=str(int(time.time())), Type="String", Overwrite=True
    )
    wait_for(lambda: not _live(), timeout=60, what="the instance terminated by its own shutdown")
    (iid,) = harness.booted()
    assert "the lease has ended" in harness.log(iid)


@pytest.mark.timeout(300)
def test_an_idle_instance_shuts_itself_down(pool: PersonalPool, harness: InstanceHarness) -> None:
    _create(pool, "idle", "--count", "1", "--lifetime", "1h", "--idle", "3")
    wait_for(lambda: harness.booted(), timeout=60, what="the instance booted")
    wait_for(lambda: not _live(), timeout=90, what="the idle instance terminated")
    (iid,) = harness.booted()
    log = harness.log(iid)
    assert "the node exited" in log, log  # the whole log: which other way it ended
    assert lf.RULE_PREFIX + "idle" in [
        r["Name"]
        for r in boto("events").list_rules(NamePrefix=lf.RULE_PREFIX)["Rules"]  # type: ignore[attr-defined]
    ]


def _wheel(tmp_path: Path) -> Path:
    """A wheel of this worktree's htgrid (py3-none-any), written as the format says: the
    package's files, a .dist-info with METADATA, WHEEL and RECORD (no `wheel` needed)."""
    from htgrid import __version__

    src = Path(__file__).resolve().parents[2] / "src"
    info = f"htgrid-{__version__}.dist-info"
    path = tmp_path / f"htgrid-{__version__}-py3-none-any.whl"
    records: list[str] = []

    def add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
        archive.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        records.append(f"{name},sha256={digest},{len(data)}")

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted((src / "htgrid").rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                add(archive, file.relative_to(src).as_posix(), file.read_bytes())
        add(
            archive,
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: htgrid\nVersion: {__version__}\n".encode(),
        )
        add(
            archive,
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: htgrid-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(f"{info}/RECORD", "\n".join([*records, f"{info}/RECORD,,", ""]))
    return path


@pytest.mark.timeout(400)
def test_the_boot_script_installs_htgrid_from_a_wheel_and_joins(
    pool: PersonalPool, aws: str, tmp_path: Path
) -> None:
    cloud = Path(tempfile.mkdtemp(prefix="hx", dir="/tmp"))
    cloud.chmod(0o755)
    try:
        with InstanceHarness(cloud, wheel=_wheel(tmp_path)) as harness:
            _create(pool, "wheel", "--count", "1", "--lifetime", "1h")
            try:
                (slot,) = wait_for(
                    lambda: _ads(pool, "Machine", 'AnnexName == "wheel"'), timeout=240
                )
            except TimeoutError:
                pytest.fail(_diagnose(harness))
            (iid,) = harness.booted()
            assert slot["EC2InstanceID"] == iid
            took = time.monotonic() - harness.started(iid)  # to within wait_for's poll
            print(f"instance running -> slot claimable, pip install included: {took:.1f} s")
            # The node is the wheel's htgrid, in the instance's own virtualenv.
            venv = harness.workdir / iid / "venv" / "bin" / "python"
            where = subprocess.run(
                [str(venv), "-c", "import htgrid; print(htgrid.__file__)"],
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert Path(where.strip()).is_relative_to(harness.workdir / iid / "venv"), where
    finally:
        shutil.rmtree(cloud, ignore_errors=True)


@pytest.mark.timeout(300)
def test_an_ordinary_user_gets_the_annex_token_from_the_schedd_and_its_node_joins(
    pool: PersonalPool, harness: InstanceHarness, tmp_path: Path
) -> None:
    domain = SecurityConfig.load(pool.home).trust_domain
    with (
        pool.remote(pool.token(f"alice@{domain}")) as alice,
        pool.remote(pool.token(f"bob@{domain}")) as bob,
    ):
        _as_alice_and_bob(pool, harness, tmp_path, domain, alice, bob)


def _as_alice_and_bob(pool: PersonalPool, harness: InstanceHarness, tmp_path: Path,
                      domain: str, alice: ScheddClient, bob: ScheddClient) -> None:  # fmt: skip
    assert alice.health()["you"] == {"user": "alice", "admin": False}
    # Alice's own directory: no key of the pool's to sign with, no CA of the pool's.
    mine = tmp_path / "alice"
    mine.mkdir()
    ann = Annexes(AwsAnnexes(REGION), mine, pool=pool.collector, schedd=lambda: alice)
    assert not ann.signs()
    extra = dict(knob.split("=", 1) for knob in NODE)
    spec = AnnexSpec("ua", count=1, lifetime=1800, image_ids=(IMAGE,), owners=("alice",),
                     extra=extra)  # fmt: skip
    made = ann.create(spec)
    try:
        (slot,) = wait_for(
            lambda: _ads(pool, "Machine", 'AnnexName == "ua"'), timeout=90, what="joined"
        )
    except TimeoutError:
        pytest.fail(_diagnose(harness))
    assert slot["Machine"] == f"{made.ids[0]}.ua.annex"
    # The schedd chose the token's identity, authorization and lifetime.
    param = boto("ssm").get_parameter(Name=token_parameter("ua", OWNER), WithDecryption=True)  # type: ignore[attr-defined]
    claims = StoredToken.read(param["Parameter"]["Value"]).claims
    assert claims["sub"] == f"ua.annex@{domain}" and claims["iss"] == domain
    assert claims["scope"] == "condor:/ADVERTISE_STARTD"
    assert claims["exp"] == int(made.lease_end)
    record = json.loads((HomeLayout(pool.home).spool / "annex-tokens" / "ua.json").read_text())
    assert record["owner"] == "alice" and record["tokens"] == [claims["jti"]]

    # Nothing broader, for nobody else's identity, no longer than the knob allows.
    with pytest.raises(NotAuthorized, match=r"ADVERTISE_STARTD\), not WRITE: ask the pool's"):
        alice.annex_token("ua", 600, authz=["ADVERTISE_STARTD", "WRITE"])
    with pytest.raises(NotAuthorized, match=rf"its annex's \(ua.annex@{domain}\), not 'alice@"):
        alice.annex_token("ua", 600, identity=f"alice@{domain}")
    with pytest.raises(NotAuthorized, match="ANNEX_TOKEN_MAX_LIFETIME"):
        alice.annex_token("ua", 10**8)
    with pytest.raises(NotAuthorized, match="annex ua belongs to alice"):
        bob.annex_token("ua", 600)

    # Her shutdown revokes its token in the pool; the name is free again.
    ann.shutdown("ua")
    assert claims["jti"] in (pool.home / "etc" / "tokens.revoked").read_text()
    assert bob.annex_token("ua", 600)["identity"] == f"ua.annex@{domain}"
