"""What the execute node's API carries besides ads: claim grants and claim status."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from copy import copy
from dataclasses import dataclass
from typing import Any, Final

from htgrid.classad import ClassAd
from htgrid.startd._errors import StartdProtocolError
from htgrid.startd._states import ClaimState, Outcome, Resources

__all__ = [
    "ACTIVATION_TAR",
    "NO_RESOURCES",
    "TLS_CERTIFICATE",
    "AdChanges",
    "ClaimGrant",
    "ClaimStatus",
    "activation_json_length",
]

NO_RESOURCES: Final = Resources(0, 0, 0)
#: The media type of an activation whose input sandbox follows its JSON document as the
#: tar itself, not in base64 within it (`json`: the document's length in bytes). A node
#: that takes it says so in its claim grants (`ClaimGrant.tar_activation`).
ACTIVATION_TAR: Final = "application/x-htgrid-activation"
#: The slot ads' attribute holding a node's TLS certificate (PEM), which schedds pin.
TLS_CERTIFICATE: Final = "StartdTlsCertificate"


@dataclass(frozen=True, slots=True)
class AdChanges:
    """A reused claim's next job ad, as what changed from the ad of the claim's last
    job: the attributes set (`changed`) and those gone (`unset`, by name)."""

    changed: ClassAd
    unset: tuple[str, ...] = ()

    def applied_to(self, base: ClassAd) -> ClassAd:
        ad = copy(base)
        ad.update(self.changed)
        for name in self.unset:
            if name in ad:
                del ad[name]
        return ad


@dataclass(frozen=True, slots=True)
class ClaimGrant:
    """The answer to a claim request: the dynamic slot carved for it."""

    claim_id: str
    slot: str  # the dynamic slot's Name (slot1_3@host)
    lease: float
    started: int  # the startd's DaemonStartTime: another value means it restarted
    resources: Resources = NO_RESOURCES  # what the dynamic slot holds
    tar_activation: bool = False  # the node takes ACTIVATION_TAR
    # The node takes a reused claim's activation as what changed from the claim's last:
    # the job ad's changes ("job_ad_changes", "job_ad_unset") rather than the whole ad,
    # and "input_again" rather than the same small input sandbox once more.
    reuse_changes: bool = False

    def to_json(self) -> dict[str, Any]:
        have = self.resources
        doc = {
            "claim_id": self.claim_id,
            "slot": self.slot,
            "lease": self.lease,
            "started": self.started,
            "resources": {
                "cpus": have.cpus,
                "memory": have.memory,
                "disk": have.disk,
                "gpus": list(have.gpus),
            },
        }
        if self.tar_activation:
            doc["tar_activation"] = True
        if self.reuse_changes:
            doc["reuse_changes"] = True
        return doc

    @classmethod
    def from_json(cls, obj: object) -> ClaimGrant:
        doc = _mapping(obj, "claim grant")
        try:
            have = doc.get("resources") or {}
            resources = Resources(
                int(have.get("cpus", 0)),
                int(have.get("memory", 0)),
                int(have.get("disk", 0)),
                tuple(have.get("gpus", ())),
            )
            return cls(
                str(doc["claim_id"]),
                str(doc["slot"]),
                float(doc["lease"]),
                int(doc["started"]),
                resources,
                doc.get("tar_activation") is True,
                doc.get("reuse_changes") is True,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StartdProtocolError(f"not a claim grant: {exc}") from None


@dataclass(frozen=True, slots=True)
class ClaimStatus:
    """A claim as the schedd sees it; `version` grows with every change."""

    claim_id: str
    slot: str
    state: ClaimState
    version: int
    transfer_input: bool = False  # activated, waiting for its input sandbox
    outcome: Outcome | None = None
    # A small output sandbox (its tar), sent with the job's end: no request of its own.
    # Without it, an outcome with `output` waits at GET /v1/claims/{id}/output.
    output_data: bytes | None = None
    # The job ("cluster.proc") the claim was last activated for, once it was: a schedd
    # reconnecting to a job finds whether the claim ever ran it, or only its last one.
    job: str | None = None
    # The claim takes no further job (its CLAIM_WORKLIFE is past): the schedd releases
    # it once the job's end is recorded, and the next job waits for a new match.
    closing: bool = False
    # How often the node suspended the job of this activation (SUSPEND): the schedd
    # logs each suspension (010) and resumption (011), those it did not see as well.
    suspensions: int = 0
    # The claim's version when its job was last suspended or continued: news that a
    # node-wide poll (`_watch`) answers with, as it does with an end.
    suspended_version: int = 0

    def to_json(self) -> dict[str, Any]:
        doc = {
            "claim_id": self.claim_id,
            "slot": self.slot,
            "state": self.state.value,
            "version": self.version,
            "transfer_input": self.transfer_input,
            "outcome": self.outcome.to_json() if self.outcome else None,
        }
        if self.output_data is not None:
            doc["output_data"] = base64.b64encode(self.output_data).decode("ascii")
        if self.job is not None:
            doc["job"] = self.job
        if self.closing:
            doc["closing"] = True
        if self.suspensions:
            doc["suspensions"] = self.suspensions
            doc["suspended_version"] = self.suspended_version
        return doc

    @classmethod
    def from_json(cls, obj: object) -> ClaimStatus:
        doc = _mapping(obj, "claim status")
        try:
            outcome = doc.get("outcome")
            data = doc.get("output_data")
            job = doc.get("job")
            return cls(
                str(doc["claim_id"]),
                str(doc["slot"]),
                ClaimState(doc["state"]),
                int(doc["version"]),
                bool(doc.get("transfer_input", False)),
                Outcome.from_json(outcome) if isinstance(outcome, Mapping) else None,
                None if data is None else base64.b64decode(data, validate=True),
                None if job is None else str(job),
                doc.get("closing") is True,
                int(doc.get("suspensions", 0)),
                int(doc.get("suspended_version", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StartdProtocolError(f"not a claim status: {exc}") from None


def activation_json_length(content_type: str) -> int | None:
    """The JSON document's length in an ACTIVATION_TAR body, from its Content-Type;
    None for another media type. StartdProtocolError when it names none."""
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != ACTIVATION_TAR:
        return None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "json" and value.strip().isdigit():
            return int(value.strip())
    raise StartdProtocolError(f"{ACTIVATION_TAR} must give its JSON's length (json=N)")


def _mapping(obj: object, what: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise StartdProtocolError(f"not a {what}: a JSON object was expected")
    return obj
