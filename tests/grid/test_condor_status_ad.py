"""A remote job's status ad, as the grid manager reads it from CONDOR_JOB_STATUS_CONSTRAINED:
the same fields a whole parse of the ad gives, only literals taken."""

from __future__ import annotations

import random

import pytest

import htgrid.classad as classad
from htgrid.grid._values import as_int, as_number, as_str, is_plain
from htgrid.grid.condor._ad import MIRRORED, RemoteJob


def _whole_parse(text: str, now: float) -> RemoteJob:
    """What the grid manager reads, from the whole ad through the mapping API."""
    ad = classad.ClassAd(text)
    server_time = as_number(ad.get("ServerTime"))
    return RemoteJob(
        cluster=as_int(ad.get("ClusterId")) or 0,
        proc=as_int(ad.get("ProcId")) or 0,
        job_status=as_int(ad.get("JobStatus")) or 0,
        server_time=float(server_time) if server_time is not None else now,
        hold_reason=as_str(ad.get("HoldReason")),
        hold_code=as_int(ad.get("HoldReasonCode")) or 0,
        hold_subcode=as_int(ad.get("HoldReasonSubCode")) or 0,
        exit_code=as_int(ad.get("ExitCode")),
        exit_signal=as_int(ad.get("ExitSignal")) if ad.get("ExitBySignal") is True else None,
        remote_host=as_str(ad.get("RemoteHost")),
        remove_reason=as_str(ad.get("RemoveReason")),
        stage_in_finish=as_number(ad.get("StageInFinish")),
        tag=as_str(ad.get("GridSubmitTag")),
        copied={name: ad[name] for name in MIRRORED if is_plain(ad.get(name))},
    )


_VALUES = [
    "3",
    "-7",
    "2.5",
    "1.343011856079102E-02",
    "true",
    "false",
    "undefined",
    "error",
    '"a string"',
    '"with \\"quotes\\" and ; inside"',
    "(4)",
    "1 + 1",
    "JobStatus == 4",
    '{ 1, "two" }',
    "[ a = 1 ]",
]
_FIELDS = [
    "HoldReason",
    "HoldReasonCode",
    "HoldReasonSubCode",
    "ExitCode",
    "ExitSignal",
    "ExitBySignal",
    "RemoteHost",
    "RemoveReason",
    "StageInFinish",
    "GridSubmitTag",
    "ServerTime",
    *MIRRORED,
    "Requirements",
    "Unrelated",
]


def _status_ad(rng: random.Random) -> str:
    pairs = [("ClusterId", str(rng.randint(1, 9999))), ("ProcId", str(rng.randint(0, 99)))]
    pairs.append(("JobStatus", str(rng.randint(1, 7))))
    for name in rng.sample(_FIELDS, rng.randint(3, len(_FIELDS))):
        spelled = name.lower() if rng.random() < 0.2 else name
        pairs.append((spelled, rng.choice(_VALUES)))
    rng.shuffle(pairs)
    return "[ " + "; ".join(f"{name} = {value}" for name, value in pairs) + " ]"


@pytest.mark.parametrize("seed", range(200))
def test_a_status_ad_reads_as_its_whole_parse_does(seed: int) -> None:
    text = _status_ad(random.Random(seed))
    assert RemoteJob.from_text(text, 5.0) == _whole_parse(text, 5.0)


def test_a_status_ad_without_its_ids_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="without ClusterId, ProcId or JobStatus"):
        RemoteJob.from_text("[ ClusterId = 1; ProcId = 0; JobStatus = 1 + 1 ]", 0.0)
    with pytest.raises(ValueError, match="bad status ad"):
        RemoteJob.from_text("[ ClusterId = ", 0.0)
