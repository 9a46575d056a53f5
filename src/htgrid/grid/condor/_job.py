"""The condor (HTCondor-C) grid type's jobs: the actions of the states in `_table`.

Two-phase submit, so that a kill -9 at any moment neither loses a job nor leaves two
remote copies:

1. SAVE_TAG commits a fresh `GridSubmitTag` (and Managed = "External").
2. SUBMIT sends CONDOR_JOB_SUBMIT with the tag in the remote ad (born held, spooling).
3. SUBMIT_SAVE commits GridJobId = `condor <schedd> <pool> <c.p>`, then logs 027.

A job found with only a tag goes to RECOVER: one CONDOR_JOB_STATUS_CONSTRAINED for
`GridSubmitTag == "<tag>"` says whether that submit reached the remote schedd. A job
found with a GridJobId goes to POLL_ACTIVE, which asks the remote schedd about it and
goes on from where it stands: input not staged yet, running, or finished (its output is
fetched again: the GAHP's writes are atomic, so fetching twice is harmless). After a
fresh stage in the job waits for the bulk poll (SUBMITTED): no request of its own.

The local job mirrors the remote one: 001 when it runs there (RemoteHost copied), 004
when it goes back to idle, 012 when it is held there (with the remote HoldReason), 005
after its output is back in the local Iwd, with the remote ExitCode. The remote copy is
then let go (LeaveJobInQueue = false); should that fail, its lease lets it go later.

The job's state and the helpers the actions share are in `_base`, the remote ad
in `_ad`, the ids in `_ids`, the bulk status and lease renewal in `_resource`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from htgrid.classad import ClassAd
from htgrid.client import user_token_dir
from htgrid.gahp.commands import Spec, condor
from htgrid.grid._errors import NO_ANSWER
from htgrid.grid._gridids import JOB_STATUS_NAMES, new_tag
from htgrid.grid._gridtype import GahpCredential, GridType
from htgrid.grid._job import GridJob
from htgrid.grid._task import Services
from htgrid.grid._values import as_str, format_time
from htgrid.grid.condor._ad import LOCAL_LEASE, RemoteJob, build_stage_in_ad
from htgrid.grid.condor._base import CondorJobBase, is_transient
from htgrid.grid.condor._explain import active_lines, remote_of
from htgrid.grid.condor._ids import CondorJobId, CondorResourceName
from htgrid.grid.condor._resource import CondorResource, RemoteCallFailed
from htgrid.grid.condor._table import CondorEvent, CondorState
from htgrid.pool import HomeLayout, htgrid_home, trusted_ca_files
from htgrid.queue import HoldReasonCode, JobStatus

__all__ = ["CONDOR", "CondorJob", "condor_type"]

log = logging.getLogger("htgrid.grid")

_S = CondorState
_E = CondorEvent
_RUNNING = frozenset({JobStatus.RUNNING, JobStatus.TRANSFERRING_OUTPUT})
#: Remote statuses that end or stop the job's mirroring (no 001 or 004 follows).
_ENDED_OR_HELD = frozenset({JobStatus.COMPLETED, JobStatus.REMOVED, JobStatus.HELD})


@dataclass(frozen=True, slots=True)
class _Transfer:
    """A sandbox's way: what its failures read, and how they hold the job."""

    doing: str
    failed: str
    #: How the GAHP's error starts when the remote schedd refused the sandbox as too large.
    too_large: str
    too_large_code: HoldReasonCode
    code: HoldReasonCode
    #: The remote copy stays, held there (its output is still there to fetch).
    keep_remote: bool


_IN = _Transfer(
    "staging the input in to",
    "Failed to stage the input files in to",
    condor.INPUT_TOO_LARGE,
    HoldReasonCode.MaxTransferInputSizeExceeded,
    HoldReasonCode.TransferInputError,
    keep_remote=False,
)
_OUT = _Transfer(
    "fetching the output from",
    "Failed to fetch the output from",
    condor.OUTPUT_TOO_LARGE,
    HoldReasonCode.MaxTransferOutputSizeExceeded,
    HoldReasonCode.TransferOutputError,
    keep_remote=True,
)


class CondorJob(CondorJobBase):
    """One job of grid type condor: the actions of its states."""

    #: SAVE_TAG: the submission's key committed before anything is sent.
    _save_tag = GridJob.save_key

    # ---- the actions ------------------------------------------------------------------------

    async def _init(self) -> CondorEvent:
        # A new job has nothing to look up: it gets ready to submit while the remote
        # schedd's first ping is under way (the submit itself waits for it).
        while self.resource.unknown and (self.grid_id is not None or self.tag is not None):
            await self.wait()
        await self.sync_resource()
        return _E.READY

    async def _start(self) -> CondorEvent:
        if self.status is JobStatus.COMPLETED:
            if self.grid_id is not None:
                self._cleanup_due = True
                return _E.COMMIT_NEEDED
            return _E.FINISHED
        if self.grid_id is not None:
            self.resource.hold_slot(self)
            if self.status is JobStatus.REMOVED:
                return _E.LOCAL_REMOVED
            return _E.HAS_REMOTE_ID
        if self.tag is not None:
            return _E.HAS_TAG
        return _E.NO_ID

    async def _until_submittable(self) -> CondorEvent | None:
        # A new job gets ready while the first ping is under way: SUBMIT waits for it.
        while (stop := self._stopped()) is None and self.resource.down:
            await self.wait()
        return stop

    def _new_key(self) -> dict[str, Any]:
        self.tag = new_tag(self.job_id.cluster, self.job_id.proc)
        return {"GridSubmitTag": self.tag}

    async def _submit(self) -> CondorEvent:
        assert self.tag is not None  # SAVE_TAG or START set it
        ready = await self._until_submit(self.tag)
        if isinstance(ready, CondorEvent):
            return ready
        remote_ad, line = ready
        try:
            submit = self.condor.command(condor.Submitted.of, condor.SUBMIT, line, later=True)
            submitted = await self._send_submit(submit, _E.SUBMIT_LOST)
        except RemoteCallFailed as err:
            return await self._submit_failed(err.text, transient=err.down)
        if isinstance(submitted, CondorEvent):
            return submitted
        remote = submitted.job_id or ""
        parsed = CondorJobId.parse(f"condor {self.condor.schedd} {self.condor.pool} {remote}")
        if parsed is None:
            error = f"the GAHP answered the submit with job id {remote!r}"
            return await self._submit_failed(error, transient=False)
        self.grid_id = parsed
        self.submitted_ad = remote_ad
        self.resource.submit_succeeded()
        return _E.SUBMIT_OK

    async def _recover(self) -> CondorEvent:
        assert self.tag is not None  # only jobs with a tag come here
        await self._lost_submit_grace()
        stop = await self.until_resource_up(self._stopped)
        if stop is not None:
            return stop
        try:
            found = await self.condor.query(f'GridSubmitTag =?= "{self.tag}"')
        except (RemoteCallFailed, *NO_ANSWER) as err:
            self.failures += 1
            what = f"looking up the earlier submit (tag {self.tag}) at {self.condor.schedd}"
            await self._try_again(what, str(err), self.failures)
            return _E.LOOKUP_FAILED
        self.failures = 0
        self.resource.hold_slot(self)
        live = [job for job in found if job.job_status not in (JobStatus.REMOVED,)]
        if live:
            first = live[0]
            self.grid_id = CondorJobId(
                self.condor.schedd, self.condor.pool, first.cluster, first.proc
            )
            return _E.FOUND
        return self._not_found()

    async def _submit_save(self) -> CondorEvent:
        now = self.clock.time()
        # The lease the remote copy was born with; found again after a restart, not known.
        sent = self.submitted_ad.get("JobLeaseExpiration") if self.submitted_ad else None
        self.lease_expiration = sent if isinstance(sent, int) else None
        attrs: dict[str, Any] = {
            "GridJobId": str(self.grid_id),
            "GridJobSubmitTime": int(now),
            LOCAL_LEASE: self.lease_expiration or int(now) + self.lease,
            **self.clear_wait_attrs(),
        }
        await self.io.update(self.job_id, attrs)
        self.failures = self.submit_failures = 0
        await self._log_grid_submit(now, str(self.grid_id))
        return _E.SAVED

    async def _stage_in(self) -> CondorEvent:
        stop = await self.until_resource_up(self._removed)
        if stop is not None:
            return stop
        assert self.grid_id is not None and self.tag is not None
        # The ad the submit sent, not a second one built (after a restart there is none).
        remote_ad = self.submitted_ad or self._remote_ad(self.tag)
        stage_ad = build_stage_in_ad(remote_ad, self.ad, self.grid_id)
        proxy = await self._proxy_mtime()  # before the upload reads it
        result = await self._remote(condor.STAGE_IN, repr(stage_ad))
        if result is not None:
            return await self._transfer_failed(result, _IN)
        self.staged_in = True
        self.proxy_sent = proxy
        self.submitted_ad = None
        # The upload released it there: a hold the next poll shows is a new one.
        self.remote_state = int(JobStatus.IDLE)
        self.failures = 0
        await self.set_wait_reason(None)
        return _E.STAGED

    async def _poll_active(self) -> CondorEvent:
        stop = await self.until_resource_up(self._removed)
        if stop is not None:
            return stop
        assert self.grid_id is not None
        query = f"ClusterId == {self.grid_id.cluster} && ProcId == {self.grid_id.proc}"
        try:
            found = await self.condor.query(query)
        except (RemoteCallFailed, *NO_ANSWER) as err:
            return await self._call_failed(f"asking {self._where()} for its status", str(err))
        self.failures = 0
        self._missing = False
        self.remote_status_seen()  # an answer about the job, even "not there"
        if not found:
            self.remote_gone = True
            expired = ""
            if self.lease_expiration is not None and self.lease_expiration < self.clock.time():
                expired = f"; its lease expired at {format_time(self.lease_expiration)}"
            self._will_hold(
                f"The job disappeared from {self._where()}: it was removed there or left "
                f"its queue{expired}. Release it to submit it again."
            )
            return _E.REMOTE_GONE
        status = found[0]
        if status.spooling:
            if not self.staged_in:
                return _E.NEEDS_STAGE_IN
            await self.pause(min(1.0, self.config.poll_interval))
            return _E.SPOOLING
        self.remote = status
        self._fresh = True
        return _E.STATUS

    async def _submitted(self) -> CondorEvent:
        while True:
            if self.status is JobStatus.REMOVED:
                return _E.LOCAL_REMOVED
            if self._fresh and self.remote is not None:
                self._fresh = False
                event = await self._on_status(self.remote)
                if event is not None:
                    return event
                # Looked at with each poll's news, as HTCondor's grid manager looks at the
                # proxy it watches: renewed here, it goes to the remote copy.
                mtime = await self._proxy_mtime()
                if mtime is not None and mtime != self.proxy_sent:
                    return _E.PROXY_NEWER
                continue
            if self._missing:
                self._missing = False
                return _E.REMOTE_MISSING
            if self.status is JobStatus.HELD:
                return _E.BOTH_HELD if self.remote_state == JobStatus.HELD else _E.LOCAL_HELD
            await self.wait()

    async def _refresh_proxy(self) -> CondorEvent:
        """CONDOR_JOB_REFRESH_PROXY: the job's X.509 proxy file changed here; send it.

        A refusal is not retried until the file changes again (a request per poll for
        every job would be the cost), and the job runs on with the proxy it has there.
        """
        assert self.grid_id is not None
        proxy = self._proxy_path()
        mtime = await self._proxy_mtime()
        if proxy is None or mtime is None:
            return _E.REFRESHED  # gone meanwhile: nothing to send
        result = await self._remote(condor.REFRESH_PROXY, self.grid_id.remote, proxy)
        self.proxy_sent = mtime
        if result is not None:
            log.warning(
                "job %s: could not send its renewed proxy to %s: %s",
                self.job_id,
                self._where(),
                result,
            )
            return _E.CALL_FAILED
        log.info("job %s: renewed proxy %s sent to %s", self.job_id, proxy, self._where())
        return _E.REFRESHED

    async def _on_status(self, status: RemoteJob) -> CondorEvent | None:
        """ProcessRemoteAd: mirror the remote job into the local one; an event if it moved."""
        if status.spooling:  # not released there yet: POLL_ACTIVE stages in or waits
            return _E.SPOOLING
        first = self.remote_state is None
        attrs = status.changes_for(self.ad)
        # A start seen here counts itself (job_started): the remote count is written
        # after it, never before, or one run counts twice.
        starts = attrs.pop("NumJobStarts", None) if self.status is JobStatus.IDLE else None
        if status.job_status != self.remote_state:
            attrs["GridJobStatus"] = JOB_STATUS_NAMES.get(status.job_status, str(status.job_status))
            attrs["LastRemoteStatusUpdate"] = int(status.server_time)
        host = status.remote_host
        if status.job_status in _RUNNING and host and self.ad.get("RemoteHost") != host:
            attrs["RemoteHost"] = host
        self.remote_state = status.job_status
        if status.job_status in _ENDED_OR_HELD:
            await self.io.update(self.job_id, attrs)
            self._keep(attrs)
            if status.job_status == JobStatus.COMPLETED:
                return _E.REMOTE_DONE
            if status.job_status == JobStatus.REMOVED:
                self.remote_gone = True
                why = f": {status.remove_reason}" if status.remove_reason else ""
                self._will_hold(f"The job was removed at {self._where()}{why}")
                return _E.REMOTE_GONE
            if self.status is JobStatus.HELD:
                return _E.BOTH_HELD
            if first:
                # An old hold mirrored here and since released here: release it there.
                return _E.RELEASE_NEEDED
            reason = status.hold_reason or "held remotely with no hold reason"
            self._will_hold(reason, status.hold_code, status.hold_subcode, keep_remote=True)
            return _E.REMOTE_HELD
        running = status.job_status in _RUNNING
        moved = await self._mirror_run(
            running=running, idle=status.job_status == JobStatus.IDLE, attrs=attrs
        )
        self._keep(attrs)
        if moved and starts is not None and self.status is JobStatus.RUNNING:
            await self.io.update(self.job_id, {"NumJobStarts": starts})
            self.ad["NumJobStarts"] = starts
        if self.status is JobStatus.HELD:
            return _E.LOCAL_HELD
        return None

    def _keep(self, attrs: dict[str, Any]) -> None:
        """What was written of the remote job, in the ad kept here too."""
        for name, value in attrs.items():
            self.ad[name] = value

    async def _hold_remote(self) -> CondorEvent:
        stop = await self.until_resource_up(self._removed)
        if stop is not None:
            return stop
        if self.status is not JobStatus.HELD:
            return _E.LOCAL_RELEASED
        return await self._mirror_hold(condor.HOLD, "holding", JobStatus.HELD)

    async def _release_remote(self) -> CondorEvent:
        stop = await self.until_resource_up(self._removed)
        if stop is not None:
            return stop
        if self.status is JobStatus.HELD:
            return _E.LOCAL_HELD
        return await self._mirror_hold(condor.RELEASE, "releasing", JobStatus.IDLE)

    async def _mirror_hold(self, command: Spec, doing: str, state: JobStatus) -> CondorEvent:
        """CONDOR_JOB_HOLD or _RELEASE: the remote copy made to follow the local job."""
        assert self.grid_id is not None
        result = await self._remote(command, self.grid_id.remote, "by gridmanager")
        if result is not None and not condor.ALREADY.search(result):
            return await self._call_failed(f"{doing} the job at {self._where()}", result)
        self.failures = 0
        self.remote_state = int(state)
        return _E.HELD_THERE if state is JobStatus.HELD else _E.RELEASED_THERE

    async def _stage_out(self) -> CondorEvent:
        stop = await self.until_resource_up(self._removed)
        if stop is not None:
            return stop
        assert self.grid_id is not None
        result = await self.said_if_slow(
            self._remote(condor.STAGE_OUT, self.grid_id.remote),
            f"{_OUT.doing} {self._where()}",
        )
        if result is not None:
            return await self._transfer_failed(result, _OUT)
        self.failures = 0
        return _E.STAGED

    async def _transfer_failed(self, error: str, transfer: _Transfer) -> CondorEvent:
        """A failed stage in or out: tried again if the schedd was not reached, else held
        (a sandbox too large for the remote schedd is held at once, whatever it says)."""
        too_large = error.startswith(transfer.too_large)
        if not too_large and is_transient(error):
            return await self._call_failed(f"{transfer.doing} {self._where()}", error)
        code = transfer.too_large_code if too_large else transfer.code
        reason = f"{transfer.failed} {self._where()}: {error}"
        self._will_hold(reason, code, keep_remote=transfer.keep_remote)
        return _E.STAGE_FAILED

    async def _done_save(self) -> CondorEvent:
        status = self.remote
        assert status is not None  # REMOTE_DONE came with a status
        attrs: dict[str, Any] = {"GridJobStatus": "COMPLETED", **self.clear_wait_attrs()}
        await self.io.update(self.job_id, attrs)
        by_signal = status.exit_signal is not None
        code = status.exit_signal if by_signal else status.exit_code
        self._cleanup_due = True
        await self._cleanup_expected()
        # Held or removed meanwhile (no outcome): DONE_COMMIT decides.
        await self._exited(code or 0, by_signal=by_signal)
        return _E.SAVED

    async def _done_commit(self) -> CondorEvent:
        await self._cleanup_remote()
        self.remote_gone = True
        if self.status in (JobStatus.COMPLETED, JobStatus.REMOVED):
            return _E.CLEANED
        return _E.CLEANED_AGAIN

    async def _hold(self) -> CondorEvent:
        event = await super()._hold()
        if event is _E.CANCEL_NEEDED and self._keep_remote and self.status is JobStatus.HELD:
            return _E.KEEP_REMOTE  # held there too: it stays
        return event

    def _remote_live(self) -> bool:
        return self.grid_id is not None and not self.remote_gone

    async def _cancel_remote(self) -> str | None:
        assert self.grid_id is not None
        result = await self._remote(condor.REMOVE, self.grid_id.remote, "by gridmanager")
        if result is not None and not condor.ALREADY.search(result):
            return result
        self.remote_gone = True
        return None

    def _remote_name(self) -> str:
        return f"removing the job at {self._where()}"

    def _submit_attrs(self) -> Iterable[str]:
        if self.grid_id is None and self.tag is None:
            return ()
        return ("GridJobId", "GridJobStatus", "GridSubmitTag", "GridJobSubmitTime", LOCAL_LEASE)

    async def _forget(self) -> None:
        self.grid_id = None
        self.tag = None
        self.remote = None
        self.submitted_ad = None
        self.remote_state = None
        self.remote_gone = self._missing = self.staged_in = False
        self._keep_remote = False
        self.failures = 0

    async def abandon(self) -> None:
        """The job left the local queue: let its finished remote copy go, or remove it."""
        if self._cleanup_due:
            await self._cleanup_remote()
        elif self.state not in (_S.DONE_COMMIT, _S.DELETE):
            await super().abandon()


# ---- the grid type -------------------------------------------------------------------------

#: The condor GAHP's command line without its per-resource arguments.
CONDOR_GAHP: tuple[str, ...] = ("{python}", "-m", "htgrid.cli", "gahp", "condor")


def condor_gahp_argv(base: tuple[str, ...], pool: str, services: Services) -> list[str]:
    """`htgrid gahp condor --pool HOST:PORT --tokens-dir ... --ca-file ...` for one pool."""
    argv = [sys.executable if word == "{python}" else word for word in base]
    # One status answer for every job there: a longer line than HTCondor's 500 KiB.
    argv += ["--pool", pool, "--max-line", str(services.config.gahp_max_line)]
    layout = HomeLayout(services.home if services.home is not None else htgrid_home())
    for directory in (user_token_dir(), layout.system_token_dir):
        argv += ["--tokens-dir", str(directory)]
    for ca_file in trusted_ca_files(layout):
        argv += ["--ca-file", str(ca_file)]
    return argv


def token_file(ad: ClassAd) -> GahpCredential | None:
    """The token file the job names (ScitokensFile, from its Iwd), if any: its GAHP server
    presents that token to the remote pool, and none of the token directories' (what
    HTCondor's grid manager asks of its server with UPDATE_TOKEN)."""
    path = as_str(ad.get("ScitokensFile"))
    if not path:
        return None
    path = os.path.join(as_str(ad.get("Iwd")) or "/", path)
    return GahpCredential(path, ("--token-file", path))


def condor_type(gahp: tuple[str, ...] = CONDOR_GAHP) -> GridType[CondorResourceName]:
    """The condor grid type, its GAHP server started as `gahp` (tests give a fake one)."""

    def server(name: CondorResourceName, services: Services) -> tuple[str, Sequence[str]]:
        # One GAHP server per (pool, schedd), as HTCondor's key CONDOR/<pool>/<schedd>.
        return f"CONDOR/{name.pool}/{name.schedd}", condor_gahp_argv(gahp, name.pool, services)

    return GridType(
        name="condor",
        parse_resource=CondorResourceName.parse,
        gahp=server,
        resource=CondorResource,
        new_job=CondorJob,
        remote=remote_of,
        active_lines=active_lines,
        credential=token_file,
    )


CONDOR = condor_type()
