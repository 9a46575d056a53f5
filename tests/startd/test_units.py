"""The execute node's pieces on their own: state tables, wire values, configuration,
machine detection."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from htgrid.classad import ClassAd, ExprTree
from htgrid.pool import PoolError
from htgrid.startd import (
    ClaimGrant,
    ClaimState,
    ClaimStateError,
    ClaimStatus,
    Outcome,
    OutcomeKind,
    Resources,
    SlotState,
    StartdConfig,
    StartdProtocolError,
    socket_of,
)
from htgrid.startd._claims import Slots, request_of
from htgrid.startd._errors import ClaimRefused, from_problem, to_problem
from htgrid.startd._machine import detect, detect_gpus, os_release
from htgrid.startd._states import CLAIM_TRANSITIONS, SLOT_OF, SLOT_TRANSITIONS


def test_every_claim_state_has_a_slot_state_and_only_table_moves_pass() -> None:
    assert set(SLOT_OF) == set(ClaimState) == set(CLAIM_TRANSITIONS)
    assert set(SLOT_TRANSITIONS) == set(SlotState)
    slots = Slots(Resources(4, 1000, 10_000), "host")
    claim = slots.carve("c" * 20, Resources(1, 10, 10), ClassAd(), "schedd", 60)
    for state in ClaimState:
        allowed = CLAIM_TRANSITIONS[claim.state]
        if state in allowed:
            continue
        with pytest.raises(ClaimStateError):
            claim.move(state, 0.0)
    claim.move(ClaimState.STARTING, 0.0)
    claim.move(ClaimState.RUNNING, 0.0)
    assert claim.version == 2
    with pytest.raises(ClaimStateError, match="running: it cannot become claimed"):
        claim.move(ClaimState.CLAIMED, 0.0)
    slots.move(SlotState.DRAINED)
    with pytest.raises(ClaimStateError):
        slots.move(SlotState.UNCLAIMED)


def test_the_slot_carves_what_it_has_and_gets_it_back() -> None:
    slots = Slots(Resources(4, 1000, 10_000, ("GPU-a", "GPU-b")), "host")
    first = slots.carve("a" * 20, Resources(3, 500, 100, ("GPU-a",)), ClassAd(), "s", 60)
    assert first.name == "slot1_1@host"
    assert slots.free == Resources(1, 500, 9_900, ("GPU-b",))
    with pytest.raises(ClaimRefused, match="1 cpus, 500 MB"):
        slots.carve("b" * 20, Resources(2, 10, 10), ClassAd(), "s", 60)
    with pytest.raises(ClaimRefused, match="in use"):
        slots.carve("a" * 20, Resources(1, 10, 10), ClassAd(), "s", 60)
    slots.release(first)
    assert slots.free == slots.offered
    assert slots.released == ["slot1_1@host"]
    slots.move(SlotState.DRAINED)
    with pytest.raises(ClaimRefused, match="Drained"):
        slots.carve("c" * 20, Resources(1, 10, 10), ClassAd(), "s", 60)


def test_a_job_asks_for_what_its_request_attributes_say() -> None:
    job = ClassAd({"RequestCpus": 2, "RequestMemory": 100.2, "RequestGPUs": 1})
    job["RequestDisk"] = ExprTree("DiskUsage * 2")
    job["DiskUsage"] = 50
    assert request_of(job, ClassAd(), ("GPU-x",)) == Resources(2, 101, 100, ("GPU-x",))
    assert request_of(ClassAd(), ClassAd(), ()) == Resources(1, 0, 0)
    with pytest.raises(ClaimRefused, match="1 GPUs; 0 are free"):
        request_of(ClassAd({"RequestGPUs": 1}), ClassAd(), ())


def test_wire_values_round_trip() -> None:
    outcome = Outcome(OutcomeKind.EXITED, exit_code=3, user_cpu=1.5, output=True)
    assert Outcome.from_json(outcome.to_json()) == outcome
    status = ClaimStatus("x" * 20, "slot1_1@h", ClaimState.ENDED, 4, False, outcome)
    assert ClaimStatus.from_json(status.to_json()) == status
    grant = ClaimGrant("x" * 20, "slot1_1@h", 60.0, 1234)
    assert ClaimGrant.from_json(grant.to_json()) == grant
    with pytest.raises(StartdProtocolError):
        ClaimStatus.from_json({"state": "dancing"})
    with pytest.raises(StartdProtocolError):
        ClaimGrant.from_json([1, 2])
    refused = from_problem(409, to_problem(ClaimRefused("too small")))
    assert isinstance(refused, ClaimRefused) and str(refused) == "too small"
    assert socket_of("<host?sock=/run/startd.sock>") == Path("/run/startd.sock")
    assert socket_of("<127.0.0.1:9618?addrs=x&sock=/a/b>") == Path("/a/b")
    assert socket_of("<127.0.0.1:9618>") is None
    assert socket_of("<host?sock=relative>") is None


def test_config_reads_the_execute_knobs(tmp_path: Path) -> None:
    config = StartdConfig.load(tmp_path)
    assert (config.start, config.execute_dir, config.noclaim_shutdown) == (
        "true",
        tmp_path / "execute",
        0.0,
    )
    (tmp_path / "htgrid.conf").write_text(
        'NUM_CPUS = 3\nMEMORY = 2048\nSTART = TARGET.Owner == "alice"\n'
        'STARTD_ATTRS = HasData, Site\nHasData = true\nSite = "attic"\n'
        "STARTD_NOCLAIM_SHUTDOWN = 30\nEXECUTE = scratch\nFILESYSTEM_DOMAIN = lab.example\n"
    )
    config = StartdConfig.load(tmp_path)
    assert (config.num_cpus, config.memory, config.disk) == (3, 2048, None)
    assert config.attrs == (("HasData", "true"), ("Site", '"attic"'))
    assert config.noclaim_shutdown == 30.0
    assert config.execute_dir.name == "scratch" and config.execute_dir.is_absolute()
    assert config.filesystem_domain == "lab.example"
    (tmp_path / "htgrid.conf").write_text("HasData = true\n")
    with pytest.raises(PoolError, match=r"htgrid\.conf:1: expected NAME = value"):
        StartdConfig.load(tmp_path)
    (tmp_path / "htgrid.conf").write_text("\nSTART = (TARGET.Owner ==\n")
    with pytest.raises(PoolError, match=r"htgrid\.conf:2: START is not a ClassAd expression"):
        StartdConfig.load(tmp_path)


def test_os_release_names_the_system_as_htcondor_does(tmp_path: Path) -> None:
    path = tmp_path / "os-release"
    path.write_text('ID=ubuntu\nVERSION_ID="22.04"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    assert os_release(path) == ("Ubuntu", 22, 2204, "Ubuntu 22.04.4 LTS")
    path.write_text('ID="almalinux"\nVERSION_ID="9.4"\n')
    assert os_release(path)[:3] == ("AlmaLinux", 9, 904)
    assert os_release(tmp_path / "missing")[:2] == ("Linux", 0)


def _fake_nvidia_smi(directory: Path) -> None:
    tool = directory / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        "echo '0, GPU-1a2b3c4d-0000-1111-2222-333344445555, NVIDIA A100-SXM4-40GB, 40960'\n"
        "echo '1, GPU-9f8e7d6c-0000-1111-2222-333344445555, NVIDIA A100-SXM4-40GB, 40960'\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def test_gpus_come_from_nvidia_smi_when_it_is_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus() == ()
    _fake_nvidia_smi(tmp_path)
    gpus = detect_gpus()
    assert [(g.id, g.index, g.memory_mb) for g in gpus] == [
        ("GPU-1a2b3c4d", 0, 40960),
        ("GPU-9f8e7d6c", 1, 40960),
    ]
    (tmp_path / "htgrid.conf").write_text("NUM_CPUS = 2\nDISK = 1000\n")
    machine = detect(StartdConfig.load(tmp_path))
    assert machine.offered.cpus == 2 and machine.offered.disk == 1000
    assert machine.offered.gpus == ("GPU-1a2b3c4d", "GPU-9f8e7d6c")
    assert machine.detected.cpus == len(os.sched_getaffinity(0))
    assert machine.arch and machine.opsys == "LINUX"
