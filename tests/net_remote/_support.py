"""Helpers of the remote API's tests: job ads as HTCondor-C's submit side makes them,
and tar archives."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.queue import JobId
from htgrid.testing import PersonalPool, wait_for
from htgrid.testing import tar_of as tar_of  # the tests here take it from here
from htgrid.testing import untar as untar

LOCAL = 12  # JobUniverse
VANILLA = 5

SPOOLING = {
    "JobStatus": 5,
    "HoldReasonCode": 16,
    "HoldReasonSubCode": 0,
    "HoldReason": "Spooling input data files",
}


def submit(schedd: ScheddClient, **attrs: object) -> JobId:
    """Submit one job as a remote submitter would; its id."""
    cluster = schedd.reserve_cluster()
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": VANILLA, "Iwd": "/submit/dir", **attrs})
    (job,) = schedd.submit(cluster, ad, [ClassAd()])
    return job


def spool_dir(pool: PersonalPool, job: JobId) -> Path:
    """The job's spool directory in the pool."""
    return pool.home / "spool" / str(job.cluster) / str(job.proc)


def made_spool_dir(pool: PersonalPool, job: JobId) -> Path:
    """The job's spool directory once the daemon has made it (after the submit has
    answered: the daemon makes a cluster's directories in the background)."""
    path = spool_dir(pool, job)
    return wait_for(lambda: path if path.is_dir() else None, what=f"{path} made")


def put_raw(pool: PersonalPool, token: str, path: str, body: bytes, media: str) -> httpx.Response:
    """PUT `body` to `path` over the daemon's TLS API with `token`: the answer as it is."""
    context = ssl.create_default_context(cafile=str(pool.home / "etc" / "ca" / "ca.crt"))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": media}
    with httpx.Client(base_url=pool.url, verify=context, timeout=30) as client:
        return client.put(path, content=body, headers=headers)
