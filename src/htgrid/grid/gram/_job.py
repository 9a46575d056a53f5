"""The gt2/gt5 grid types' jobs: one GRAM job each, the actions of the states in `_table`.

Submit, so that a kill -9 at any moment neither loses a GRAM job nor runs one twice:

1. SUBMIT sends GRAM_JOB_REQUEST with `(two_phase=...)`: the job manager keeps the job
   uncommitted (it runs nothing) and answers its contact;
2. SUBMIT_SAVE commits GridJobId = `gt2 <resource> <job contact>`, then logs 027;
3. COMMIT sends COMMIT_REQUEST: only now may the job run.

A request whose answer was lost, or a grid manager killed before SUBMIT_SAVE, leaves at
most an uncommitted job, which the job manager drops when its commit time runs out: the
request is sent again. A saved contact whose commit is in doubt is asked first.

The resource's GRAM_JOB_STATUS per poll reports the job's state (GridJobStatus; ACTIVE
makes it Running, 001); DONE is saved before COMMIT_END lets the job manager forget the
job (DONE_COMMIT), and its output is back by then (the job manager staged it to the
GASS server before DONE). FAILED holds the job with the job manager's failure code
(HoldReasonCode 2, GlobusGramError). A renewed proxy is delegated again to the job
(GRAM_JOB_REFRESH_PROXY). A hold or removal cancels the GRAM job (CANCEL).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from htgrid.classad import ClassAd
from htgrid.gahp import GahpError
from htgrid.gahp.commands import gram
from htgrid.grid._errors import NO_ANSWER, GahpUnavailable
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._gridtype import GahpCredential, GridType
from htgrid.grid._job import SUBMIT_ATTRS, GridJob, Words
from htgrid.grid._proxy import proxy_path
from htgrid.grid._task import Services
from htgrid.grid._values import as_int, as_str
from htgrid.grid.gram._ids import GramJobId, GramResourceName, remote_of
from htgrid.grid.gram._resource import GramResource, GramStatus
from htgrid.grid.gram._rsl import RslError, job_rsl
from htgrid.grid.gram._table import TABLE, GramEvent, GramState
from htgrid.pool import ConfigFile, PoolError
from htgrid.queue import HoldReasonCode, JobId, JobStatus

__all__ = ["DEFAULT_GRAM_GAHP", "GT2", "GramJob", "gram_grid_type"]

log = logging.getLogger("htgrid.grid")

#: How the grid manager starts the gt GAHP (HTCondor's GT2_GAHP / GT5_GAHP).
DEFAULT_GRAM_GAHP: tuple[str, ...] = (sys.executable, "-m", "htgrid.cli", "gahp", "gram")

_S = GramState
_E = GramEvent
_RUNNING = frozenset({"ACTIVE", "STAGE_OUT", "SUSPENDED"})
_IDLE = frozenset({"PENDING", "UNSUBMITTED", "STAGE_IN"})
_UNSUBMITTED = 32
#: At most this many STDIO_SIZE checks, a second apart, before the job ends anyway.
_STDIO_CHECKS = 30


class GramJob(GridJob[GramState, GramEvent]):
    """One job of grid type gt2 or gt5: one job at a GRAM job manager."""

    table = TABLE
    words = Words()

    def __init__(self, job_id: JobId, ad: ClassAd, resource: GramResource, services: Services):
        super().__init__(job_id, ad, resource, services)
        self.gram = resource
        grid_id = GramJobId.parse(ad.get("GridJobId"))
        self.contact = None if grid_id is None else grid_id.contact
        self.remote_state = as_str(ad.get("GridJobStatus"))
        self.remote: GramStatus | None = None
        self.exit_code = as_int(ad.get("GlobusExitCode")) or 0
        #: The commit is certainly not sent yet (the request was answered in this process).
        self._uncommitted = False
        #: The proxy's expiration when last delegated (None: not known in this process).
        self._delegated_until: int | None = None
        #: STDIO_SIZE checks made (a GRAM2 job's streamed output).
        self._stdio_checks = 0

    # ---- what the resource reads -------------------------------------------------------------

    def wants_status(self) -> bool:
        return self.state is _S.SUBMITTED and self.contact is not None

    def gram_status(self, status: GramStatus) -> None:
        """A GRAM_JOB_STATUS's answer about this job."""
        self.remote = status
        self._heard()

    # ---- the hooks ---------------------------------------------------------------------------

    def _refusal(self, error: str, subcode: int) -> tuple[str, int, int]:
        return error, HoldReasonCode.GlobusGramError, subcode

    def _remote_live(self) -> bool:
        return self.contact is not None

    def _remote_name(self) -> str:
        return f"cancelling GRAM job {self.contact}"

    def _submit_attrs(self) -> Iterable[str]:
        return (*SUBMIT_ATTRS, "GlobusExitCode")

    async def _forget(self) -> None:
        self.contact = self.remote_state = None
        self.remote = None
        self.exit_code = 0
        if self.status is JobStatus.RUNNING:
            await self.io.evicted(self.job_id)
            self.status = JobStatus.IDLE

    async def _remote_end(self) -> tuple[int, bool]:
        return self.exit_code, False

    async def _call(self, result: Any, command: Any, *args: str) -> Any:
        return await self.resource.ask(result, command, *args)

    async def _hold_now(self, reason: str, subcode: int = 0) -> None:
        self._will_hold(reason, HoldReasonCode.GlobusGramError, subcode)
        await self._hold_here()

    # ---- the actions -------------------------------------------------------------------------

    async def _start(self) -> GramEvent:
        if self.status is JobStatus.COMPLETED:
            return _E.FINISHED
        if self.contact is None:
            return _E.NO_CONTACT
        self.resource.hold_slot(self)
        return _E.HAS_EXIT if self.remote_state == "DONE" else _E.HAS_CONTACT

    async def _submit(self) -> GramEvent:
        if (stop := await self._turn_to_submit()) is not None:
            return stop
        try:
            gass = await self.gram.gass_url()
        except (GahpError, GahpUnavailable) as err:
            return await self._submit_failed(str(err), transient=True)
        try:
            rsl = job_rsl(self.ad, gass, gram5=self.gram.gram5)
        except RslError as err:
            return self._submit_refused(str(err))
        proxy_expiration = (await self.proxy.check()).expiration if self.proxy else None
        request = self._call(
            gram.JobRequest.of, gram.JOB_REQUEST, self.gram.contact, "NULL", "1", rsl
        )
        # A lost answer leaves at most an uncommitted job, which the job manager drops.
        result = await self._send_submit(request, _E.SUBMIT_UNSURE)
        if not isinstance(result, gram.JobRequest):
            return result
        if result.contact and result.code in (0, gram.ERROR_WAITING_FOR_COMMIT):
            self.contact = result.contact
            self.remote_state = "UNSUBMITTED"
            self._uncommitted = result.code == gram.ERROR_WAITING_FOR_COMMIT
            self._delegated_until = proxy_expiration
            self.resource.submit_succeeded()
            return _E.SUBMIT_OK
        error = gram.error_text(result.code)
        return await self._submit_failed(
            error, transient=result.code in gram.TRANSIENT, subcode=result.code
        )

    async def _submit_save(self) -> GramEvent:
        now = self.clock.time()
        assert self.contact is not None
        grid_id = str(GramJobId(self.gram.where.kind, self.gram.contact, self.contact))
        attrs: dict[str, Any] = {
            "GridJobId": grid_id,
            "GridJobStatus": "UNSUBMITTED",
            "GridJobSubmitTime": int(now),
            "Managed": "External",
            **self.clear_wait_attrs(),
        }
        await self.io.update(self.job_id, attrs, durable=True)
        self.submit_failures = 0
        await self._log_grid_submit(now, grid_id)
        return _E.SAVED

    async def _commit(self) -> GramEvent:
        if (stop := self._stopped()) is not None:
            return stop
        await self.until_resource_up()
        assert self.contact is not None
        try:
            if not self._uncommitted:
                # Recovered, or a commit whose answer was lost: the job manager says.
                status = await self._call(gram.JobState.of, gram.JOB_STATUS, self.contact)
                if status.code == gram.ERROR_CONTACT_NOT_FOUND:
                    # An uncommitted job the job manager dropped: it never ran.
                    log.info(
                        "job %s: %s was never committed; submitting again",
                        self.job_id,
                        self.contact,
                    )
                    return self._not_found()
                if status.code != 0:
                    raise GahpUnavailable(f"GRAM_JOB_STATUS failed: {gram.error_text(status.code)}")
                if status.state != _UNSUBMITTED:
                    return _E.COMMITTED
            self._uncommitted = False
            answer = await self._call(
                gram.JobState.of,
                gram.JOB_SIGNAL,
                self.contact,
                str(gram.SIGNAL_COMMIT_REQUEST),
                "NULL",
            )
        except NO_ANSWER as err:
            await self._try_again("committing the submit", str(err), 1)
            return _E.SUBMIT_RETRY
        if answer.code == 0:
            return _E.COMMITTED
        if answer.code == gram.ERROR_CONTACT_NOT_FOUND:
            return self._not_found()
        await self._try_again("committing the submit", gram.error_text(answer.code), 1)
        return _E.SUBMIT_RETRY

    async def _refresh_proxy(self) -> None:
        """The job's proxy renewed (a later expiration): delegated again to the job."""
        if self.proxy is None or self.contact is None:
            return
        expiration = self.proxy.state.expiration
        if expiration is None:
            return
        if self._delegated_until is None:
            self._delegated_until = expiration  # what the job manager has, as far as we know
            return
        if expiration <= self._delegated_until:
            return
        try:
            await self.gram.gass_url()  # the GASS server takes the renewed proxy too
            answer = await self._call(gram.Code.of, gram.JOB_REFRESH_PROXY, self.contact, "1")
        except NO_ANSWER as err:
            log.warning("job %s: refreshing the proxy failed: %s", self.job_id, err)
            return
        if not answer.ok:
            log.warning(
                "job %s: refreshing the proxy failed: %s", self.job_id, gram.error_text(answer.code)
            )
            return
        self._delegated_until = expiration
        await self.io.update(self.job_id, {"DelegatedProxyExpiration": expiration})

    async def _on_remote_status(self) -> GramEvent | None:
        status = self.remote
        assert status is not None
        answer = status.answer
        if answer.code == gram.ERROR_CONTACT_NOT_FOUND:
            await self._hold_now(
                f"GRAM job {self.contact} is no longer known to its job manager", answer.code
            )
            return _E.JOB_FAILED
        if answer.code != 0:
            return None
        await self._refresh_proxy()
        state = answer.name
        update: dict[str, Any] = {}
        if state != self.remote_state:
            update = {"GridJobStatus": state, "LastRemoteStatusUpdate": int(status.when)}
        if state in ("DONE", "FAILED"):
            await self.io.update(self.job_id, update)
            self.remote_state = state
            if state == "DONE":
                self.exit_code = answer.exit_code or 0
                return _E.ENDED
            await self._hold_now(gram.error_text(answer.failure), answer.failure)
            return _E.JOB_FAILED
        await self._mirror_run(running=state in _RUNNING, idle=state in _IDLE, attrs=update)
        self.remote_state = state
        return None

    def _stdio_sizes(self) -> str:
        """The sizes of the job's stdout and stderr here (-1: not streamed)."""
        sizes = []
        for attr in ("Out", "Err"):
            name = as_str(self.ad.get(attr)) or ""
            if name in ("", "/dev/null"):
                sizes.append("-1")
                continue
            path = (
                name
                if os.path.isabs(name)
                else os.path.join(as_str(self.ad.get("Iwd")) or "", name)
            )
            try:
                sizes.append(str(os.stat(path).st_size))
            except OSError:
                sizes.append("0")
        return " ".join(sizes)

    async def _streamed(self) -> bool:
        """GRAM2's streamed stdout and stderr have all arrived (STDIO_SIZE, as HTCondor's
        gt2 asks before it ends the job): False to ask again after a pause."""
        if self.gram.gram5 or self._stdio_checks >= _STDIO_CHECKS:
            return True
        self._stdio_checks += 1
        assert self.contact is not None
        sizes = await asyncio.to_thread(self._stdio_sizes)
        answer = await self._call(
            gram.JobState.of, gram.JOB_SIGNAL, self.contact, str(gram.SIGNAL_STDIO_SIZE), sizes
        )
        if answer.code == gram.ERROR_STDIO_SIZE:
            await self.pause(1.0)
            return False
        return True

    async def _done_commit(self) -> GramEvent:
        """DONE (and the exit code) committed, then COMMIT_END: the job manager may forget
        the job. Its answer may be lost or "not found" (a second try): either is the end.
        Streamed output (GRAM2) is checked complete first."""
        try:
            if not await self._streamed():
                return _E.SUBMIT_RETRY
        except NO_ANSWER as err:
            await self._try_again("checking the streamed output", str(err), 1)
            return _E.SUBMIT_RETRY
        await self.io.update(
            self.job_id,
            {"GridJobStatus": "DONE", "GlobusExitCode": self.exit_code},
            durable=True,
        )
        self.remote_state = "DONE"
        assert self.contact is not None
        try:
            answer = await self._call(
                gram.JobState.of, gram.JOB_SIGNAL, self.contact, str(gram.SIGNAL_COMMIT_END), "NULL"
            )
        except NO_ANSWER as err:
            await self._try_again("ending the GRAM job", str(err), 1)
            return _E.SUBMIT_RETRY
        if answer.code in gram.TRANSIENT:
            await self._try_again("ending the GRAM job", gram.error_text(answer.code), 1)
            return _E.SUBMIT_RETRY
        self.contact = None
        return _E.COMMITTED

    async def _cancel_remote(self) -> str | None:
        """GRAM_JOB_CANCEL, then COMMIT_END so the job manager lets the job go; "not
        found" is success."""
        assert self.contact is not None
        try:
            answer = await self._call(gram.Code.of, gram.JOB_CANCEL, self.contact)
            if answer.code in gram.TRANSIENT:
                return f"GRAM_JOB_CANCEL failed: {gram.error_text(answer.code)}"
            await self._call(
                gram.JobState.of, gram.JOB_SIGNAL, self.contact, str(gram.SIGNAL_COMMIT_END), "NULL"
            )
        except NO_ANSWER as err:
            return str(err)
        self.contact = None
        return None


def _credential(ad: ClassAd) -> GahpCredential | None:
    proxy = proxy_path(ad)
    return GahpCredential(proxy, ("--proxy", proxy)) if proxy else None


def gram_grid_type(
    gahp_argv: Sequence[str] = DEFAULT_GRAM_GAHP, *, version_detection: bool = True
) -> GridType[GramResourceName]:
    """The gt2 grid type (gt5 its alias: both run on GRAM5 job managers), its GAHP server
    started with `gahp_argv` (one per proxy); `version_detection`: GRAM_VERSION_DETECTION."""
    command = tuple(gahp_argv)

    def server(name: GramResourceName, services: Services) -> tuple[str, Sequence[str]]:
        # The GASS server outlives the GAHP server: the next one finds it here.
        state = () if services.home is None else ("--state-dir", str(services.home / "gram"))
        return "GT", (*command, *state)

    def resource(name: GramResourceName, gahp: GahpHandle, services: Services) -> GramResource:
        return GramResource(name, gahp, services, version_detection=_detection(services))

    def _detection(services: Services) -> bool:
        """GRAM_VERSION_DETECTION from the pool's htgrid.conf, if it sets it."""
        if services.home is None:
            return version_detection
        try:
            conf = ConfigFile.read(services.home)
            return conf.flag("GRAM_VERSION_DETECTION", version_detection)
        except (PoolError, OSError) as err:
            log.warning("GRAM_VERSION_DETECTION: %s", err)
            return version_detection

    return GridType(
        name="gt2",
        aliases=frozenset({"gt5"}),
        parse_resource=GramResourceName.parse,
        gahp=server,
        resource=resource,
        new_job=GramJob,
        remote=remote_of,
        credential=_credential,
    )


GT2 = gram_grid_type()
