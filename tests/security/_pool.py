"""A pool run by root that refuses root's jobs, reached with the second user's token."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from pathlib import Path

import httpx

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.queue import JobId
from htgrid.testing import QUEUE_ONLY, PersonalPool, tar_of, untar, wait_for

__all__ = [
    "DOMAIN",
    "LOCAL",
    "SPOOLING",
    "completed",
    "outputs_of",
    "strict_pool",
    "submit",
    "tar_of",
    "untar",
]

DOMAIN = "owners.test"
LOCAL = 12
SPOOLING = {
    "JobStatus": 5,
    "HoldReasonCode": 16,
    "HoldReasonSubCode": 0,
    "HoldReason": "Spooling input data files",
}


def strict_pool(home: Path, daemons: Sequence[str] = QUEUE_ONLY, **config: object) -> PersonalPool:
    """A pool in `home` (which other users pass through) whose jobs run as their owners,
    and never as root."""
    knobs = {"TRUST_DOMAIN": DOMAIN, "ALLOW_ROOT_JOBS": "false", **config}
    return PersonalPool(home, periodic_interval=0.5, fsync=False, daemons=daemons, config=knobs)


def submit(schedd: ScheddClient, **attrs: object) -> JobId:
    """One job from a raw ad (a local universe job held for its input by default)."""
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": LOCAL, "Iwd": "/tmp", **attrs})
    (job,) = schedd.submit(schedd.reserve_cluster(), ad, [ClassAd()])
    return job


def completed(schedd: ScheddClient, job: JobId, timeout: float = 30) -> ClassAd:
    """The job's ad once it completed (submitted with LeaveJobInQueue)."""

    def done() -> ClassAd | None:
        ad = schedd.get(job)
        assert ad["JobStatus"] != 5, f"job {job} held: {ad.get('HoldReason')}"
        return ad if ad["JobStatus"] == 4 else None

    return wait_for(done, timeout, what=f"job {job} to complete")


def outputs_of(pool: PersonalPool, token: str, jobs: list[JobId]) -> dict[str, bytes]:
    """POST /v1/jobs/output: several jobs' outputs in one tar (jobs.json first)."""
    context = ssl.create_default_context(cafile=str(pool.home / "etc" / "ca" / "ca.crt"))
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=pool.url, verify=context, headers=headers, timeout=30) as raw:
        answer = raw.post("/v1/jobs/output", json={"jobs": [str(j) for j in jobs]})
    answer.raise_for_status()
    return untar(answer.content)
