"""CONDOR_JOB_UPDATE coalesced below the protocol: one edit request for many jobs.

Once a job's output is fetched the grid manager lets the remote copy go with one
CONDOR_JOB_UPDATE per job (`[ LeaveJobInQueue = false ]`). The updates to one schedd
that wait together and set the same attributes to the same expressions go as one

    POST /v1/jobs/edit {"jobs": {"ids": ["12.0", "12.1"]}, "attrs": {...}}

which the daemon does in one transaction, all or nothing, as background work (`Priority:
u=7`: after the jobs it is running, within half a second). Each request still gets its own
result line: a batch refused as a whole (one job gone, or another user's) is sent again
one job at a time, so only that job's update fails, with the words it always had.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Final

from htgrid.backends.condor._batch import Coalescer
from htgrid.backends.condor._errors import RemoteRefusal
from htgrid.backends.condor._http import Endpoint
from htgrid.gahp.commands import condor

__all__ = ["MOST", "Updates"]

Fields = tuple[str, ...]
Outcome = Fields | BaseException
Attrs = Mapping[str, str]  # attribute name -> ClassAd expression text

#: The most jobs in one edit request.
MOST: Final = 500
#: RFC 9218's Priority header at its lowest urgency: background work.
_BACKGROUND: Final = "u=7"


class Updates:
    """The GAHP's single-job updates: those to one schedd with the same attributes that
    wait together are sent as one edit."""

    def __init__(self, *, window: float, most: int = MOST) -> None:
        self.batches: Coalescer[tuple[Endpoint, Attrs, str], Fields] = Coalescer(
            self._send, window=window, most=most
        )

    async def update(self, schedd: Endpoint, job_id: str, attrs: Attrs) -> Fields:
        """Set `attrs` in job `job_id`; its result line (raises what a lone edit would)."""
        key = f"{schedd.url} {json.dumps(dict(attrs), sort_keys=True)}"
        return await self.batches.add(key, (schedd, attrs, job_id))

    async def _send(self, _: str, items: list[tuple[Endpoint, Attrs, str]]) -> list[Outcome]:
        schedd, attrs, _job = items[0]
        job_ids = [job_id for _, _, job_id in items]
        try:
            await _edit(schedd, list(dict.fromkeys(job_ids)), attrs)
        except RemoteRefusal as err:
            if len(items) == 1 or err.status == 401 or err.status >= 500:
                return [_lone_answer(err)] * len(items)
            # The daemon edits named jobs all or none: each on its own, to hear its answer.
            singles = [_edit_one(schedd, job_id, attrs) for job_id in job_ids]
            return list(await asyncio.gather(*singles, return_exceptions=True))
        return [condor.Done().fields()] * len(items)


async def _edit(schedd: Endpoint, job_ids: list[str], attrs: Attrs) -> None:
    body = {"jobs": {"ids": job_ids}, "attrs": dict(attrs)}
    # Background work for the daemon (RFC 9218's lowest urgency): letting go of finished
    # jobs may wait while it starts and ends the ones still to run.
    headers = {"priority": _BACKGROUND}
    await schedd.json("POST", "/v1/jobs/edit", json_body=body, headers=headers)


async def _edit_one(schedd: Endpoint, job_id: str, attrs: Attrs) -> Outcome:
    try:
        await _edit(schedd, [job_id], attrs)
    except RemoteRefusal as err:
        return _lone_answer(err)
    return condor.Done().fields()


def _lone_answer(err: RemoteRefusal) -> Outcome:
    """What one job's refused update answers: `Job not found` (HTCondor's words, which the
    grid manager matches), else the refusal itself, raised to the request."""
    return condor.Done(condor.JOB_NOT_FOUND).fields() if err.status == 404 else err
