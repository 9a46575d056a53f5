"""The schedd's durable book of its claims on execute nodes (spool/claims, 0700).

A claim id is the capability for a claim, and only the schedd and the node know it: it is
in no job ad. So that a schedd killed at any moment can still end the claims it held (and
never start a job again while the node still runs it), each claim is written down, on
disk, before it is requested, and forgotten once the node released it. One file a
claim, 0600, named by a digest of the claim id: that digest is the job's
`PublicClaimId`, which the job gets in the transaction that starts it and which ties a
running job to its claim without giving the claim away. So the record need not follow
the claim from job to job (claim reuse): a restart finds the job a claim runs by its
PublicClaimId, and the record is rewritten only when what ending the claim takes
changes (the next job's lease or vacate time).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from htgrid._files import write_atomic
from htgrid.classad import ClassAd
from htgrid.queue import JobId, JobStatus
from htgrid.schedd._shadow_base import RUNNING

__all__ = ["ClaimBook", "ClaimRecord", "jobs_on_claims", "public_claim_id", "started_on"]

_log = logging.getLogger("htgrid.schedd.shadow")

_SUFFIX: Final = ".claim"


def public_claim_id(claim_id: str) -> str:
    """The claim's name anyone may see (a one-way digest of its id)."""
    return hashlib.sha256(claim_id.encode()).hexdigest()[:32]


def started_on(slot: str, address: str, claim_id: str, now: int) -> dict[str, Any]:
    """What the start of a job on a claim records in the job (with the 001): where it
    runs, the claim it runs on (by its public name), its lease renewed."""
    return {
        "RemoteHost": slot,
        "LastRemoteHost": slot,
        "StartdIpAddr": address,
        "PublicClaimId": public_claim_id(claim_id),
        "LastJobLeaseRenewal": now,
    }


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """One claim as the schedd holds it: where, for which job, and for how long."""

    claim_id: str
    job_id: JobId  # the first job the claim ran (the queue's PublicClaimId says which runs)
    address: str  # the node's MyAddress
    certificate: str | None  # the node's StartdTlsCertificate (a node of another host)
    lease: float  # seconds the node keeps the claim without word from the schedd
    vacate: float  # the job's vacate time: how long the node may take to kill it

    @property
    def public_id(self) -> str:
        return public_claim_id(self.claim_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "job": str(self.job_id),
            "address": self.address,
            "certificate": self.certificate,
            "lease": self.lease,
            "vacate": self.vacate,
        }

    @classmethod
    def from_json(cls, doc: Any) -> ClaimRecord:
        cluster, _, proc = str(doc["job"]).partition(".")
        cert = doc.get("certificate")
        return cls(
            str(doc["claim_id"]),
            JobId(int(cluster), int(proc)),
            str(doc["address"]),
            cert if isinstance(cert, str) else None,
            float(doc["lease"]),
            float(doc["vacate"]),
        )


class ClaimBook:
    """The claim records under one spool (blocking calls: run them off the event loop)."""

    def __init__(self, root: Path, *, fsync: bool = True) -> None:
        self.root = root
        self._fsync = fsync

    def _path(self, claim_id: str) -> Path:
        return self.root / f"{public_claim_id(claim_id)}{_SUFFIX}"

    def write(self, record: ClaimRecord) -> None:
        """Record (or rewrite) a claim: on disk when this returns."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = json.dumps(record.to_json()).encode()
        write_atomic(self._path(record.claim_id), data, sync=self._fsync, mode=0o600)
        self._sync_dir()

    def forget(self, claim_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(claim_id).unlink()
            self._sync_dir()

    def load(self) -> list[ClaimRecord]:
        """Every claim recorded; a record that cannot be read is logged and dropped."""
        records = []
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        for entry in entries:
            if not entry.name.endswith(_SUFFIX):
                continue
            try:
                with open(entry.path, "rb") as f:
                    records.append(ClaimRecord.from_json(json.loads(f.read())))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                _log.warning("%s: not a claim record (%s): dropped", entry.path, exc)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
        return records

    def _sync_dir(self) -> None:
        if not self._fsync:
            return
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def jobs_on_claims(ads: list[ClassAd], recorded: Mapping[str, ClaimRecord]) -> dict[str, ClassAd]:
    """The job each recorded claim may run (by claim id), among `ads`: the one whose
    PublicClaimId names it, Running rather than not (a claim runs one job at a time;
    the jobs it ran before have completed, or went back to idle and were removed
    since); a completed one never."""
    found: dict[str, ClassAd] = {}
    for ad in ads:
        record = recorded.get(str(ad.get("PublicClaimId")))
        if record is None or ad["JobStatus"] == JobStatus.COMPLETED:
            continue
        other = found.get(record.claim_id)
        if other is None or (other["JobStatus"] not in RUNNING and ad["JobStatus"] in RUNNING):
            found[record.claim_id] = ad
    return found
