"""Helpers of the remote API's tests: job ads as HTCondor-C's submit side makes them,
and tar archives."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping

from htgrid.classad import ClassAd
from htgrid.net import ScheddClient
from htgrid.queue import JobId

LOCAL = 12  # JobUniverse
VANILLA = 5

SPOOLING = {
    "JobStatus": 5,
    "HoldReasonCode": 16,
    "HoldReasonSubCode": 0,
    "HoldReason": "Spooling input data files",
}


def tar_of(files: Mapping[str, bytes], *, mode: int = 0o644) -> bytes:
    """A plain tar holding `files` (name -> contents)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def untar(data: bytes) -> dict[str, bytes]:
    """The files of a tar: name -> contents."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        out: dict[str, bytes] = {}
        for member in tar.getmembers():
            extracted = tar.extractfile(member)
            assert extracted is not None and member.isfile()
            out[member.name] = extracted.read()
        return out


def submit(schedd: ScheddClient, **attrs: object) -> JobId:
    """Submit one job as a remote submitter would; its id."""
    cluster = schedd.reserve_cluster()
    ad = ClassAd({"Cmd": "/bin/true", "JobUniverse": VANILLA, "Iwd": "/submit/dir", **attrs})
    (job,) = schedd.submit(cluster, ad, [ClassAd()])
    return job
