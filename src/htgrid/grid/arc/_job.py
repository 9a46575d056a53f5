"""The arc grid type's jobs: one ARC CE job each, the actions of the states in `_table`.

Submit, so that a kill -9 at any moment neither loses a CE job nor makes two:

1. SAVE_NAME commits ArcJobName (a fresh tag, the job's name at the CE) before anything
   is sent;
2. DELEGATE sends the job's proxy (ARC_DELEGATION_NEW) and SUBMIT the ADL (ARC_JOB_NEW);
3. SUBMIT_SAVE commits GridJobId = `arc <url> <ARC id>`, then logs 027.

A job found with a name but no GridJobId, or whose submit got no answer, goes to CHECK:
the CE's jobs (ARC_JOB_STATUS_ALL) not known to another job are looked up one by one
(ARC_JOB_INFO) for that name; found, it is the job's; not found, the job is submitted.

Then the input goes in (STAGE_IN), the resource's one ARC_JOB_STATUS_ALL per poll
reports the job's state (GridJobStatus; RUNNING and later make it Running, 001), a
terminal state brings its exit code (EXIT_INFO: ARC_JOB_INFO's ExitCode; none means the
job failed, which holds it with the CE's Error), the output comes back (STAGE_OUT), the
job completes (DONE_SAVE) and its session is removed from the CE (CLEAN). A hold or a
removal kills the CE job and cleans it (CANCEL).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from htgrid.classad import ClassAd
from htgrid.gahp import GahpError
from htgrid.gahp.commands import arc
from htgrid.grid._errors import NO_ANSWER, GahpUnavailable
from htgrid.grid._gahps import GahpHandle
from htgrid.grid._gridids import is_tag, new_tag
from htgrid.grid._gridtype import GahpCredential, GridType
from htgrid.grid._job import SUBMIT_ATTRS, GridJob, Words
from htgrid.grid._proxy import proxy_path
from htgrid.grid._queueio import UNDEFINED
from htgrid.grid._task import Services
from htgrid.grid._values import as_int, as_str
from htgrid.grid.arc._adl import BadJobAd, job_description, staging
from htgrid.grid.arc._ids import ArcJobId, ArcResourceName, remote_of
from htgrid.grid.arc._resource import ArcResource, ArcStatus
from htgrid.grid.arc._table import TABLE, ArcEvent, ArcState
from htgrid.queue import HoldReasonCode, JobId, JobStatus

__all__ = ["ARC", "DEFAULT_ARC_GAHP", "ArcJob", "arc_grid_type"]

log = logging.getLogger("htgrid.grid")

#: How the grid manager starts the ARC GAHP (HTCondor's ARC_GAHP).
DEFAULT_ARC_GAHP: tuple[str, ...] = (sys.executable, "-m", "htgrid.cli", "gahp", "arc")

_S = ArcState
_E = ArcEvent
#: ARC's terminal states, and those in which the job counts as running (arcjob.cpp).
TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED", "WIPED"})
_RUNNING = frozenset({"RUNNING", "EXITINGLRMS", "EXECUTED", "FINISHING"})
_IDLE_AGAIN = frozenset({"QUEUING", "HELD"})
#: States in which the CE still waits for the client's input files.
_TAKES_INPUT = frozenset({"ACCEPTING", "ACCEPTED", "PREPARING"})
#: How long to wait before asking again for exit information the CE has not caught up on.
_INFO_RETRY = 10.0


def _transient(answer: arc.Answer) -> bool:
    """Whether a failed request may work later: no answer (499), or the server's fault."""
    return answer.code == arc.LOCAL_FAILURE or answer.code >= 500


class ArcJob(GridJob[ArcState, ArcEvent]):
    """One job of grid type arc: one job at an ARC CE."""

    table = TABLE
    words = Words()

    def __init__(self, job_id: JobId, ad: ClassAd, resource: ArcResource, services: Services):
        super().__init__(job_id, ad, resource, services)
        self.arc = resource
        self.name = as_str(ad.get("ArcJobName"))
        grid_id = ArcJobId.parse(ad.get("GridJobId"))
        self.arc_id = None if grid_id is None else grid_id.job_id
        self.remote_state = as_str(ad.get("GridJobStatus"))
        self.remote: ArcStatus | None = None
        #: The CE's delegation of the job's proxy, kept with its GridJobId so that a
        #: renewed proxy is delegated again after a restart too.
        self.delegation_id = as_str(ad.get("ArcDelegationId"))
        #: The exit code, once EXIT_INFO read it (ArcExitCode once CLEAN committed it).
        exit_code = as_int(ad.get("ArcExitCode"))
        self.exit_saved = exit_code is not None
        self.exit_code = exit_code or 0
        self._min_seq = 0
        self._submitted_now = False
        #: The expiration of the proxy last delegated (None: none delegated).
        self._delegated_until = as_int(ad.get("DelegatedProxyExpiration"))

    # ---- what the resource reads -------------------------------------------------------------

    def wants_status(self) -> bool:
        return self.state is _S.SUBMITTED and self.arc_id is not None

    def arc_status(self, status: ArcStatus) -> None:
        """An ARC_JOB_STATUS_ALL's answer about this job."""
        if status.seq < self._min_seq:
            return  # sent before the submit returned: the CE may not list the job yet
        self.remote = status
        self._heard()

    # ---- the table ---------------------------------------------------------------------------

    _save_name = GridJob.save_key

    def _new_key(self) -> dict[str, Any]:
        self.name = new_tag(self.job_id.cluster, self.job_id.proc)
        return {"ArcJobName": self.name}

    def _refusal(self, error: str, subcode: int) -> tuple[str, int, int]:
        # HTCondor's hold reason is the GAHP's error string itself.
        return error, HoldReasonCode.Unspecified, subcode

    def _remote_live(self) -> bool:
        return self.arc_id is not None

    def _remote_name(self) -> str:
        return f"killing ARC job {self.arc_id}"

    def _submit_attrs(self) -> Iterable[str]:
        return (
            *SUBMIT_ATTRS,
            "ArcJobName",
            "ArcExitCode",
            "ArcDelegationId",
            "DelegatedProxyExpiration",
        )

    async def _forget(self) -> None:
        self.arc_id = self.name = self.remote_state = self.delegation_id = None
        self.remote = None
        self.exit_saved, self.exit_code = False, 0
        if self.status is JobStatus.RUNNING:
            await self.io.evicted(self.job_id)
            self.status = JobStatus.IDLE

    async def _remote_end(self) -> tuple[int, bool]:
        return self.exit_code, False

    async def _hold_now(self, reason: str) -> None:
        """Hold the job here at once (its CE job is then killed and cleaned: CANCEL)."""
        self._will_hold(reason)
        await self._hold_here()

    async def _call(self, result: Any, command: Any, *args: str) -> Any:
        """A GAHP request of this job, its answer read by `result`; GahpUnavailable and
        the GAHP's errors raised (callers retry after the back-off)."""
        return await self.resource.ask(result, command, self.arc.url, *args)

    # ---- the actions -------------------------------------------------------------------------

    async def _start(self) -> ArcEvent:
        if self.status is JobStatus.COMPLETED:
            return _E.FINISHED
        if self.arc_id is not None:
            self.resource.hold_slot(self)
            # Its output came back and its exit was saved: what is left is the clean.
            return _E.HAS_EXIT if self.exit_saved else _E.HAS_JOB
        if is_tag(self.name):
            self.resource.hold_slot(self)
            return _E.HAS_NAME
        return _E.NO_NAME

    async def _delegate(self) -> ArcEvent:
        if (stop := await self._turn_to_submit()) is not None:
            return stop
        proxy = proxy_path(self.ad)
        if proxy is None or self.delegation_id is not None:
            return _E.DELEGATED
        # The expiration read first: a renewal after this moment is delegated again.
        expiration = (await self.proxy.check()).expiration if self.proxy is not None else None
        request = self._call(arc.Answer.of, arc.DELEGATION_NEW, proxy)
        result = await self._send_submit(request, _E.SUBMIT_RETRY, what="proxy delegation")
        if isinstance(result, arc.Answer):
            if result.ok and result.more:
                self.delegation_id = result.more[0]
                self._delegated_until = expiration
                return _E.DELEGATED
            error = f"Proxy delegation failed: {result.error}"
            return await self._submit_failed(error, transient=_transient(result))
        return result

    async def _submit(self) -> ArcEvent:
        if (stop := await self._turn_to_submit()) is not None:
            return stop
        assert self.name is not None  # SAVE_NAME or START set it
        try:
            description = job_description(self.ad, self.delegation_id, self.name)
        except BadJobAd as err:
            return self._submit_refused(str(err))
        request = self._call(arc.JobCreated.of, arc.JOB_NEW, description)
        # An unanswered submit may have reached the CE: CHECK looks for it by name.
        result = await self._send_submit(request, _E.SUBMIT_UNSURE)
        if isinstance(result, arc.JobCreated):
            if result.answer.ok and result.job_id:
                self.arc_id, self.remote_state = result.job_id, result.state
                self.resource.submit_succeeded()
                self._submitted_now = True
                return _E.SUBMIT_OK
            error = f"Job submit failed: {result.answer.error}"
            result = await self._submit_failed(error, transient=_transient(result.answer))
        if result is _E.SUBMIT_RETRY:
            self._grace_due = False  # the GAHP answered: nothing of it is in flight
        return result

    async def _check(self) -> ArcEvent:
        await self._lost_submit_grace()
        while True:
            if (stop := await self.until_resource_up(self._stopped)) is not None:
                return stop
            try:
                found = await self._find_by_name()
            except (GahpError, GahpUnavailable) as err:
                await self._try_again("looking up a lost submit", str(err), 1)
                continue
            if found is None:
                return self._not_found(hold_slot=True)
            self.arc_id, self.remote_state = found
            return _E.FOUND

    async def _find_by_name(self) -> tuple[str, str] | None:
        """The CE job named after this submission, if the CE has one: (id, state)."""
        listed = await self._call(arc.StatusAll.of, arc.JOB_STATUS_ALL, "NULL")
        if not listed.answer.ok:
            raise GahpUnavailable(f"ARC_JOB_STATUS_ALL failed: {listed.answer.error}")
        known = {job.arc_id for job in self.arc.jobs.values() if job is not self}
        for arc_id, state in listed.states.items():
            if arc_id in known:
                continue
            info = await self._call(arc.Answer.of, arc.JOB_INFO, arc_id)
            if not info.ok or not info.more:
                continue
            try:
                activity = json.loads(info.more[0])
            except ValueError:
                continue
            if isinstance(activity, dict) and activity.get("Name") == self.name:
                return arc_id, state
        return None

    async def _submit_save(self) -> ArcEvent:
        now = self.clock.time()
        assert self.arc_id is not None
        grid_id = str(ArcJobId(self.arc.url, self.arc_id))
        attrs: dict[str, Any] = {
            "GridJobId": grid_id,
            "GridJobStatus": self.remote_state or UNDEFINED,
            "GridJobSubmitTime": int(now),
        }
        if self.delegation_id is not None:
            attrs["ArcDelegationId"] = self.delegation_id
        if self._delegated_until is not None:
            attrs["DelegatedProxyExpiration"] = self._delegated_until
        attrs |= self.clear_wait_attrs()
        await self.io.update(self.job_id, attrs, durable=True)
        # A list sent before the submit returned may not show the job yet.
        self._min_seq = self.arc.next_seq()
        self.submit_failures = 0
        await self._log_grid_submit(now, grid_id)
        return _E.SAVED

    async def _stage_in(self) -> ArcEvent:
        if (stop := self._stopped()) is not None:
            return stop
        assert self.arc_id is not None
        await self.until_resource_up()
        fresh, self._submitted_now = self._submitted_now, False
        arc_id = self.arc_id

        async def send() -> arc.Answer | None:
            if not fresh:
                # Recovered: the CE may be past taking input (or have it all already).
                status = await self._call(arc.Answer.of, arc.JOB_STATUS, arc_id)
                if status.ok and status.more and status.more[0] not in _TAKES_INPUT:
                    return None
            files = staging(self.ad).inputs
            if not files:
                return None
            return await self._call(  # type: ignore[no-any-return]
                arc.Answer.of, arc.JOB_STAGE_IN, arc_id, str(len(files)), *files
            )

        return await self._transfer("File stage-in", "staging the input", send)

    async def _transfer(
        self, kind: str, doing: str, send: Callable[[], Awaitable[arc.Answer | None]]
    ) -> ArcEvent:
        """A stage-in or stage-out (`send`; None: nothing to move): STAGED; SUBMIT_RETRY
        after the back-off when it may work later; else the job held, STAGE_FAILED."""
        try:
            answer = await send()
        except BadJobAd as err:
            await self._hold_now(f"{kind} failed: {err}")
            return _E.STAGE_FAILED
        except (GahpError, GahpUnavailable) as err:
            await self._try_again(doing, str(err), 1)
            return _E.SUBMIT_RETRY
        if answer is None or answer.ok:
            return _E.STAGED
        if _transient(answer):
            await self._try_again(doing, answer.error, 1)
            return _E.SUBMIT_RETRY
        await self._hold_now(f"{kind} failed: {answer.error}")
        return _E.STAGE_FAILED

    async def _renew_delegation(self) -> None:
        """The job's proxy file renewed (a later expiration): delegated again to the CE
        (ARC_DELEGATION_RENEW), DelegatedProxyExpiration set. A failure is logged and
        tried at the next status; the proxy's own expiry holds the job in the end."""
        if self.delegation_id is None or self.proxy is None or self._delegated_until is None:
            return
        expiration = self.proxy.state.expiration
        if expiration is None or expiration <= self._delegated_until:
            return
        try:
            answer = await self._call(
                arc.Answer.of, arc.DELEGATION_RENEW, self.delegation_id, self.proxy.path
            )
        except NO_ANSWER as err:
            log.warning(
                "job %s: renewing delegation %s failed: %s", self.job_id, self.delegation_id, err
            )
            return
        if not answer.ok:
            log.warning(
                "job %s: renewing delegation %s failed: %s",
                self.job_id,
                self.delegation_id,
                answer.error,
            )
            return
        self._delegated_until = expiration
        await self.io.update(self.job_id, {"DelegatedProxyExpiration": expiration})

    async def _on_remote_status(self) -> ArcEvent | None:
        status = self.remote
        assert status is not None
        await self._renew_delegation()
        state = status.state
        if state is None:
            # Not in the CE's list: A-REX lists a new job only once its main loop has
            # taken it in, which takes a while on a busy CE. Its own status says.
            assert self.arc_id is not None
            try:
                own = await self._call(arc.Answer.of, arc.JOB_STATUS, self.arc_id)
            except NO_ANSWER:
                return None  # the next poll asks again
            if own.code == 404:
                await self._hold_now(
                    f"ARC job {self.arc_id} is no longer known to the CE {self.arc.url}"
                )
                return _E.JOB_FAILED
            if not own.ok or not own.more:
                return None
            state = own.more[0]
        update: dict[str, Any] = {}
        if state != self.remote_state:
            update = {"GridJobStatus": state, "LastRemoteStatusUpdate": int(status.when)}
        if state in TERMINAL:
            await self.io.update(self.job_id, update)
            self.remote_state = state
            return _E.ENDED
        await self._mirror_run(running=state in _RUNNING, idle=state in _IDLE_AGAIN, attrs=update)
        self.remote_state = state
        return None

    async def _exit_info(self) -> ArcEvent:
        if (stop := self._stopped()) is not None:
            return stop
        assert self.arc_id is not None
        try:
            info = await self._call(arc.Answer.of, arc.JOB_INFO, self.arc_id)
        except (GahpError, GahpUnavailable) as err:
            await self._try_again("asking the job's exit", str(err), 1)
            return _E.SUBMIT_RETRY
        if not info.ok or not info.more:
            await self._hold_now(f"Job exit information missing: {info.error}")
            return _E.JOB_FAILED
        try:
            activity = json.loads(info.more[0])
            states = activity["State"]
        except (ValueError, KeyError, TypeError):
            await self._hold_now("Job exit information is missing State element")
            return _E.JOB_FAILED
        arcrest = next(
            (s[8:] for s in states if isinstance(s, str) and s.startswith("arcrest:")), None
        )
        if arcrest not in TERMINAL:
            # The CE's information is older than the state it reported: ask again soon.
            await self.pause(_INFO_RETRY)
            return _E.SUBMIT_RETRY
        if "ExitCode" not in activity:
            error = activity.get("Error")
            if isinstance(error, list):
                error = "; ".join(str(e) for e in error)
            await self._hold_now(
                f"ARC job failed: {error}" if error else "ARC job failed for unknown reason"
            )
            return _E.JOB_FAILED
        try:
            self.exit_code = int(str(activity["ExitCode"]))
        except ValueError:
            await self._hold_now(f"Job exit information invalid: ExitCode {activity['ExitCode']!r}")
            return _E.JOB_FAILED
        attrs: dict[str, Any] = {}
        for source, attr in (
            ("UsedTotalWallTime", "RemoteWallClockTime"),
            ("UsedTotalCPUTime", "RemoteUserCpu"),
        ):
            value = str(activity.get(source, ""))
            if value.isdigit():
                attrs[attr] = int(value)
        if attrs:
            await self.io.update(self.job_id, attrs)
        return _E.EXIT_KNOWN

    async def _stage_out(self) -> ArcEvent:
        if (stop := self._stopped()) is not None:
            return stop
        assert self.arc_id is not None
        arc_id = self.arc_id

        async def send() -> arc.Answer | None:
            outputs = staging(self.ad).outputs
            if not outputs:
                return None
            pairs = [word for pair in outputs for word in pair]
            return await self._call(  # type: ignore[no-any-return]
                arc.Answer.of, arc.JOB_STAGE_OUT, arc_id, str(len(outputs)), *pairs
            )

        return await self._transfer("File stage-out", "fetching the output", send)

    async def _clean(self) -> ArcEvent:
        """CLEAN: the exit code committed (ArcExitCode), then the finished job's session
        removed from the CE (HTCondor's DONE_COMMIT), before the exit goes to the queue."""
        if not self.exit_saved:
            await self.io.update(self.job_id, {"ArcExitCode": self.exit_code}, durable=True)
            self.exit_saved = True
        if (stop := self._stopped()) is not None:
            return stop
        error = await self._clean_remote()
        if error is not None:
            self.cancel_failures += 1
            await self._try_again(f"cleaning ARC job {self.arc_id}", error, self.cancel_failures)
            return _E.CANCEL_FAILED
        self.cancel_failures = 0
        self.arc_id = None
        return _E.CLEANED

    async def _clean_remote(self) -> str | None:
        assert self.arc_id is not None
        try:
            answer = await self._call(arc.Answer.of, arc.JOB_CLEAN, self.arc_id)
        except NO_ANSWER as err:
            return str(err)
        if answer.ok or answer.code == 404:
            return None
        return f"ARC_JOB_CLEAN failed: {answer.error}"

    async def _cancel_remote(self) -> str | None:
        """ARC_JOB_KILL (unless the job ended), then ARC_JOB_CLEAN; "not found" is success.
        A clean the CE refuses while the kill is under way is left to the CE (it wipes
        ended jobs' sessions after its own grace)."""
        assert self.arc_id is not None
        if self.remote_state not in TERMINAL:
            try:
                answer = await self._call(arc.Answer.of, arc.JOB_KILL, self.arc_id)
            except NO_ANSWER as err:
                return str(err)
            if not answer.ok and answer.code != 404:
                return f"ARC_JOB_KILL failed: {answer.error}"
        error = await self._clean_remote()
        if error is not None:
            self.last_error = error
        self.arc_id = None
        return None


def _credential(ad: ClassAd) -> GahpCredential | None:
    """The credential the job's ARC GAHP presents: its SciTokens file if it has one (as
    HTCondor: the token wins), else its X.509 proxy."""
    token = as_str(ad.get("ScitokensFile"))
    if token:
        return GahpCredential(token, ("--token-file", token))
    proxy = proxy_path(ad)
    if proxy:
        return GahpCredential(proxy, ("--proxy", proxy))
    return None


def arc_grid_type(gahp_argv: Sequence[str] = DEFAULT_ARC_GAHP) -> GridType[ArcResourceName]:
    """The arc grid type, its GAHP server started with `gahp_argv` (one per credential)."""
    command = tuple(gahp_argv)

    def server(name: ArcResourceName, services: Services) -> tuple[str, Sequence[str]]:
        return "ARC", command

    def resource(name: ArcResourceName, gahp: GahpHandle, services: Services) -> ArcResource:
        return ArcResource(name, gahp, services)

    return GridType(
        name="arc",
        aliases=frozenset({"nordugrid"}),
        parse_resource=ArcResourceName.parse,
        gahp=server,
        resource=resource,
        new_job=ArcJob,
        remote=remote_of,
        credential=_credential,
    )


ARC = arc_grid_type()
