"""Which jobs an action or an edit applies to, and whether the caller may touch them."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

from htgrid.queue._errors import JobNotFound, NotAuthorized
from htgrid.queue._ids import Identity, JobId
from htgrid.queue._query import compile_constraint
from htgrid.queue._status import JobStatus
from htgrid.queue._store import JobEdit, Txn

__all__ = ["JobSpec", "job_id_of", "select_targets"]

JobSpec = JobId | str | int | Sequence[JobId | str]
"""Which jobs: a JobId or "42.0", a cluster (42 or "42"), a list of ids, or a constraint."""

_ID: Final = re.compile(r"\s*\d+\.\d+\s*")
_CLUSTER: Final = re.compile(r"\s*\d+\s*")


def select_targets(
    txn: Txn,
    jobs: JobSpec,
    identity: Identity,
    verb: str,
    eligible: Callable[[JobStatus], bool],
) -> list[JobEdit]:
    """The jobs to `verb`, loaded for change.

    Jobs named by id or by cluster must exist and belong to `identity` (or it is an
    administrator): otherwise JobNotFound or NotAuthorized, naming the job and its owner.
    Ids are returned whatever their status (the action refuses a wrong one); a cluster or
    a constraint gives the jobs in a status `eligible` accepts, and a constraint skips
    other users' jobs, as condor_hold -constraint does.
    """
    ids, cluster, constraint = _parse_spec(jobs)
    if ids is not None:
        edits = [txn.load(jid) for jid in dict.fromkeys(ids)]
        for edit in edits:
            _check_owner(edit, identity, verb)
        return edits
    filt = compile_constraint(constraint if cluster is None else f"ClusterId == {cluster}")
    edits = []
    found = False
    for edit in txn.select(filt):
        found = True
        if not identity.may_act_on(edit.owner):
            if cluster is not None:
                _check_owner(edit, identity, verb)
            continue
        if eligible(edit.status):
            edits.append(edit)
    if cluster is not None and not found:
        raise JobNotFound(f"cluster {cluster} is not in the queue")
    return edits


def cluster_of(jobs: JobSpec) -> int | None:
    """The cluster `jobs` names whole, if it names one."""
    return _parse_spec(jobs)[1]


def job_id_of(job_id: JobId | str) -> JobId:
    """A JobId, given one or its text ("42.0")."""
    return job_id if isinstance(job_id, JobId) else JobId.parse(job_id)


def _parse_spec(jobs: JobSpec) -> tuple[list[JobId] | None, int | None, str | None]:
    """(ids, cluster, constraint): exactly one is not None."""
    if isinstance(jobs, JobId):
        return [jobs], None, None
    if isinstance(jobs, bool):
        raise TypeError("a job spec is a job id, a cluster id, a list of ids or a constraint")
    if isinstance(jobs, int):
        return None, jobs, None
    if isinstance(jobs, str):
        if _ID.fullmatch(jobs):
            return [JobId.parse(jobs)], None, None
        if _CLUSTER.fullmatch(jobs):
            return None, int(jobs), None
        return None, None, jobs
    return [job_id_of(j) for j in jobs], None, None


def _check_owner(edit: JobEdit, identity: Identity, verb: str) -> None:
    if not identity.may_act_on(edit.owner):
        raise NotAuthorized(
            f"job {edit.job_id} is owned by {edit.owner}; {identity.name} may not {verb} it"
        )
