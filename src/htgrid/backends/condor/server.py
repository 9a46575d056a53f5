"""The condor GAHP server (HTCondor's condor_c-gahp): a remote htgrid queue over HTTPS.

The commands, their arguments and result lines are `htgrid.gahp.commands.condor`'s, which
the grid manager reads with the same values. A malformed request (bad job id, an ad that
does not parse, a count that does not match) is answered E at once. `<schedd>` is the
remote schedd's name in the pool given with --pool (NULL: the -s schedd, else the pool's
first), or its URL. Status ads carry `ServerTime`, the remote daemon's clock (its HTTP
Date), which the grid manager uses to drop stale answers. Removal errors keep HTCondor's
words, which the grid manager matches: `Job not found`, `Already done`, `Bad job status`,
`Permission denied`. A sandbox the remote daemon refuses as too large (HTTP 413) fails
with `Transfer input too large: ` or `Transfer output too large: ` and the daemon's text
(HTCondor's hold codes 32 and 33). Sandboxes go through temporary files, never whole in
memory. Concurrent submits, stage-ins (_batch.py), stage-outs (_stageout.py) and
same-attribute updates (_update.py) for one schedd are sent together, one HTTPS request
per batch; each request still has its own result line.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import logging
import re
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import htgrid.classad as classad
from htgrid.backends.condor import _sandbox as sandbox
from htgrid.backends.condor._batch import Coalescer, StageIn, send_stage_ins, send_submits
from htgrid.backends.condor._errors import (
    CondorGahpError,
    ConnectFailure,
    LocateError,
    RemoteRefusal,
    SandboxError,
)
from htgrid.backends.condor._http import Endpoint, FileBody, Remotes, RemoteSettings
from htgrid.backends.condor._stageout import StageOuts
from htgrid.backends.condor._update import Updates
from htgrid.classad import adjson
from htgrid.client import TokenSource
from htgrid.gahp import (
    MAX_LINE_LENGTH,
    BadArguments,
    Call,
    Clock,
    GahpServer,
    GahpVersion,
    SystemClock,
    unnull,
)
from htgrid.gahp.commands import Spec, condor

__all__ = ["VERSION", "CondorGahp", "CondorOptions"]

log = logging.getLogger("htgrid.gahp.condor")

Handler = Callable[[Call], Coroutine[Any, Any, Sequence[str]]]
Fields = tuple[str, ...]
_DONE = condor.Done().fields()

_JOB_ID = re.compile(r"[0-9]+\.[0-9]+")
_NUMBER = re.compile(r"[0-9]+")
_EXPIRY = re.compile(r"-?[0-9]+")
# Identity attributes a submitter may not set on the remote side (schedd_client.cpp).
_FILTERED = frozenset(
    name.lower()
    for name in (
        "x509UserProxySubject",
        "x509UserProxyExpiration",
        "x509UserProxyEmail",
        "x509UserProxyVOName",
        "x509UserProxyFirstFQAN",
        "x509UserProxyFQAN",
        "TokenSubject",
        "TokenIssuer",
        "TokenGroups",
        "TokenScopes",
        "TokenId",
        "ClusterId",
        "ProcId",
    )
)


class _CGahpVersion(GahpVersion):
    """condor_c-gahp's banner, to the letter: `$GahpVersion 2.0.1 Jun 27 2005 Condor\\ GAHP $`."""

    __slots__ = ()

    def fields(self) -> list[str]:
        return ["$GahpVersion", *super().fields()[1:]]


VERSION = _CGahpVersion("2.0.1", datetime.date(2005, 6, 27), "Condor GAHP")


@dataclass(frozen=True, slots=True)
class CondorOptions:
    """How a condor GAHP server runs."""

    remote: RemoteSettings = field(default_factory=RemoteSettings)
    token_file: Path | None = None
    token_dirs: tuple[Path, ...] = ()
    #: Stage-ins and stage-outs at once (HTCondor's C_GAHP_MAX_FILE_REQUESTS).
    file_workers: int = 10
    #: Requests of one command held at once; one more is refused "F Threads limit reached".
    accept_limit: int = 1000
    #: How long a submit or stage-in waits for others to the same schedd (seconds).
    batch_window: float = 0.002
    #: The most submits in one remote cluster, and their ads' bytes: the grid manager asks
    #: for status by ClusterId range, and one cluster's ads must fit in a GAHP line.
    submit_batch: int = 250
    submit_batch_bytes: int = 1024 * 1024
    #: The most stage-ins in one upload, and their tars' bytes.
    stage_batch: int = 500
    stage_batch_bytes: int = 64 * 1024 * 1024
    #: The longest line read or written. HTCondor's grid manager reads 500 KiB, so that is
    #: the default; htgrid's grid manager asks for more, so that one status answer covers
    #: all its jobs at the schedd.
    max_line: int = MAX_LINE_LENGTH


class CondorGahp:
    """The C-GAHP's commands over the remote queue's HTTPS API."""

    def __init__(self, options: CondorOptions | None = None, *, clock: Clock | None = None) -> None:
        self.options = options = options or CondorOptions()
        self._clock = clock or SystemClock()
        self.tokens = TokenSource(options.token_file, options.token_dirs)
        self.remotes = Remotes(options.remote, self.tokens)
        self._files = asyncio.Semaphore(options.file_workers)
        self._token_file_in_force = options.token_file
        self.submits: Coalescer[tuple[Endpoint, classad.ClassAd, int], Fields] = Coalescer(
            lambda _, items: send_submits(items[0][0], [ad for _, ad, _ in items]),
            window=options.batch_window,
            most=options.submit_batch,
            weight=lambda item: item[2],
            heaviest=options.submit_batch_bytes,
        )
        self.stage_ins: Coalescer[tuple[Endpoint, StageIn], Fields] = Coalescer(
            self._send_stage_ins,
            window=options.batch_window,
            most=options.stage_batch,
            weight=lambda item: item[1].size,
            heaviest=options.stage_batch_bytes,
        )
        self.stage_outs = StageOuts(self._files, window=options.batch_window)
        self.updates = Updates(window=options.batch_window)

    def server(self) -> GahpServer:
        """A GahpServer serving the C-GAHP's commands."""

        def one(reason: str) -> Fields:
            return condor.Done(reason).fields()

        table: list[tuple[Spec, Handler, Callable[[str], Fields]]] = [
            (condor.SUBMIT, self.submit, lambda r: condor.Submitted("-1.-1", r).fields()),
            (condor.STATUS, self.status, lambda r: condor.Statuses(error=r).fields()),
            (condor.REMOVE, self.remove, one),
            (condor.HOLD, self.hold, one),
            (condor.RELEASE, self.release, one),
            (condor.UPDATE, self.update, one),
            (condor.UPDATE_CONSTRAINED, self.update_constrained, one),
            (condor.STAGE_IN, self.stage_in, one),
            (condor.STAGE_OUT, self.stage_out, one),
            (condor.REFRESH_PROXY, self.refresh_proxy, one),
            (condor.UPDATE_LEASE, self.update_lease, lambda r: condor.Renewed(error=r).fields()),
        ]
        commands = [
            spec.command(
                self._reporting(handler, failure),
                self.options.accept_limit,
                on_error=failure,
                parse=_CHECKS.get(spec.name),
            )
            for spec, handler, failure in table
        ]
        return GahpServer(VERSION, commands, max_line=self.options.max_line)

    async def aclose(self) -> None:
        """Close the HTTP clients."""
        await self.remotes.aclose()

    def _reporting(self, handler: Handler, failure: Callable[[str], Fields]) -> Handler:
        """`handler` with CondorGahpErrors turned into the command's failure result."""

        async def run(call: Call) -> Sequence[str]:
            self._follow_token_file(call)
            # The runtime steps a handler once in the reading task and goes on in a task
            # of its own (_eager.py); anyio's cancel scopes inside httpx must be entered
            # and left in one task, so give up that first step before any HTTP work.
            await asyncio.sleep(0)
            try:
                return await handler(call)
            except ConnectFailure as err:
                # The schedd may have moved (a restart on another port): look it up again.
                self.remotes.forget(unnull(call.args[0]))
                log.warning("%s %d: %s", call.command, call.request_id, err)
                return failure(str(err))
            except CondorGahpError as err:
                log.info("%s %d failed: %s", call.command, call.request_id, err)
                return failure(str(err))

        return run

    def _follow_token_file(self, call: Call) -> None:
        # UPDATE_TOKEN names the token file the grid manager wants used from now on.
        wanted = call.credentials.token_file
        if wanted is not None and Path(wanted) != self._token_file_in_force:
            self._token_file_in_force = Path(wanted)
            self.tokens.token_file = Path(wanted)
            self.remotes.auth.reset()

    async def _schedd(self, call: Call) -> Endpoint:
        return await self.remotes.schedd(unnull(call.args[0]))

    # ---- submit and status -----------------------------------------------------------------

    async def submit(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_SUBMIT: queue the ad as a proc of a remote cluster, sent with the
        other submits to that schedd waiting at the same moment (its own c.p each)."""
        ad = _request_ad(call)
        try:
            schedd = await self._schedd(call)
        except LocateError as err:
            return condor.Submitted(error=str(err)).fields()
        # The whole ad goes in the proc (JobStatus and the hold reason must, or the queue
        # reads a held proc as submitted on hold, code 15): the cluster is a batch of jobs.
        # The ad was parsed for this request alone: take the filtered names out in place.
        for name in [name for name in ad if name.lower() in _FILTERED]:
            del ad[name]
        # Weighed by the size of its line: about what its part of the body will be.
        return await self.submits.add(schedd.url, (schedd, ad, len(call.args[1])))

    async def status(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_STATUS_CONSTRAINED: the matching jobs' whole ads."""
        schedd = await self._schedd(call)
        constraint = unnull(call.args[1])
        params = {"constraint": constraint} if constraint else {}
        response = await schedd.request("GET", "/v1/jobs", params=params)
        server_time = _server_time(response.headers.get("date"), self._clock)
        ads = await asyncio.to_thread(_one_line_ads, response.content, server_time)
        return condor.Statuses(tuple(ads)).fields()

    # ---- remove, hold, release --------------------------------------------------------------

    async def remove(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_REMOVE."""
        return await self._act(call, "Remove")

    async def hold(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_HOLD."""
        return await self._act(call, "Hold")

    async def release(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_RELEASE."""
        return await self._act(call, "Release")

    async def _act(self, call: Call, action: str) -> Sequence[str]:
        schedd = await self._schedd(call)
        job_id = call.args[1]
        # The API names actions as htcondor2.JobAction's values: "hold", "release", "remove".
        body: dict[str, object] = {"action": action.lower(), "jobs": {"ids": [job_id]}}
        reason = unnull(call.args[2])
        if reason is not None:
            body["reason"] = reason
        try:
            answer = await schedd.json("POST", "/v1/jobs/act", json_body=body)
        except RemoteRefusal as err:
            return condor.Done(_act_error(action, err)).fields()
        if job_id not in (answer.get("jobs") or []):
            return condor.Done(_not_acted(action)).fields()
        return _DONE

    # ---- updates and leases -----------------------------------------------------------------

    async def update(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_UPDATE: set the ad's attributes in one job (condor_qedit), in one edit
        with the other updates of that schedd setting the same, waiting at the same
        moment (_update.py)."""
        attrs = _edit_attrs(_request_ad(call, 2))
        if not attrs:
            return _DONE
        schedd = await self._schedd(call)
        return await self.updates.update(schedd, call.args[1], attrs)

    async def update_constrained(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_UPDATE_CONSTRAINED: set the ad's attributes in the matching jobs."""
        attrs = _edit_attrs(_request_ad(call, 2))
        if not attrs:
            return _DONE
        schedd = await self._schedd(call)
        body = {"jobs": {"constraint": call.args[1]}, "attrs": attrs}
        try:
            await schedd.json("POST", "/v1/jobs/edit", json_body=body)
        except RemoteRefusal as err:
            if err.status == 404:
                return condor.Done(condor.JOB_NOT_FOUND).fields()
            raise
        return _DONE

    async def update_lease(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_UPDATE_LEASE: JobLeaseExpiration of each job; the ids updated."""
        leases = dict(condor.Leases.of(call.args[1:]).leases)
        if not leases:
            return condor.Renewed().fields()
        schedd = await self._schedd(call)
        answer = await schedd.json("POST", "/v1/jobs/lease", json_body={"leases": leases})
        updated = [str(job) for job in answer.get("jobs") or [] if str(job) in leases]
        return condor.Renewed(tuple(updated)).fields()

    # ---- sandboxes ----------------------------------------------------------------------------

    async def stage_in(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_STAGE_IN: send the job's input files; the remote then releases it.

        Here the files are only looked at (stat, one worker-thread call); the upload goes
        with the other stage-ins to this schedd waiting at the same moment, as one tar
        written straight from the files into a temporary file and streamed from it, so the
        GAHP's memory does not grow with the sandboxes.
        """
        ad = _request_ad(call)
        job_id = _job_id_of(ad)
        schedd = await self._schedd(call)
        try:
            # No thread for a job with no files to look at: in a thread each system call
            # then waits for the GIL behind the read loop, a few ms each under load.
            entries: tuple[sandbox.InputEntry, ...] = ()
            if sandbox.names_inputs(ad):
                entries = await asyncio.to_thread(sandbox.input_entries, ad)
            item = StageIn(job_id, entries, sandbox.tar_size(entries))
            return await self.stage_ins.add(schedd.url, (schedd, item))
        except SandboxError as err:
            return condor.Done(f"Error sending files to {schedd.what}: {err}").fields()

    async def _send_stage_ins(
        self, _: str, items: list[tuple[Endpoint, StageIn]]
    ) -> list[Fields | BaseException]:
        schedd = items[0][0]

        async def one(item: StageIn) -> Fields:
            return await _put_input(schedd, item, self._files)

        return await send_stage_ins(schedd, [item for _, item in items], one)

    async def stage_out(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_STAGE_OUT: fetch the job's output files into their local places,
        with the other stage-outs from that schedd waiting at the same moment (_stageout.py).

        The output tar is received into a temporary file and unpacked from there.
        """
        schedd = await self._schedd(call)
        return await self.stage_outs.fetch(schedd, call.args[1])

    async def refresh_proxy(self, call: Call) -> Sequence[str]:
        """CONDOR_JOB_REFRESH_PROXY: the job's renewed X.509 proxy file, sent to take the
        place of the one its input brought (PUT /v1/jobs/{c.p}/proxy)."""
        schedd = await self._schedd(call)
        job_id, path = call.args[1], Path(call.args[2])
        failed = f"Error refreshing proxy for job {job_id}"
        try:
            data = await asyncio.to_thread(_read_proxy, path)
        except OSError as exc:
            return condor.Done(f"{failed}: cannot read {path}: {exc.strerror or exc}").fields()
        if data is None:
            too_big = f"{failed}: {path} is over {MAX_PROXY_BYTES} bytes: not a proxy"
            return condor.Done(too_big).fields()
        try:
            await schedd.request(
                "PUT",
                f"/v1/jobs/{job_id}/proxy",
                content=data,
                headers={"content-type": "application/x-pem-file"},
            )
        except RemoteRefusal as err:
            return condor.Done(f"{failed}: {err}").fields()
        return _DONE


async def _put_input(schedd: Endpoint, item: StageIn, files: asyncio.Semaphore) -> Fields:
    """One job's input on its own: its tar built (`files` bounds the tars being built),
    then PUT /v1/jobs/{c.p}/input."""
    tar: IO[bytes] | None = None
    try:
        async with files:
            tar = await asyncio.to_thread(sandbox.scratch_file)
            size = await asyncio.to_thread(sandbox.input_tar, item.entries, tar)
        body = FileBody(tar, size)
        await schedd.upload(f"/v1/jobs/{item.job_id}/input", body, "application/x-tar")
    except RemoteRefusal as err:
        if err.status == 413:
            too_large = f"{condor.INPUT_TOO_LARGE}{err.detail} (refused by {schedd.what})"
            return condor.Done(too_large).fields()
        return condor.Done(f"Error sending files to {schedd.what}: {err}").fields()
    except SandboxError as err:
        return condor.Done(f"Error sending files to {schedd.what}: {err}").fields()
    finally:
        if tar is not None:
            await sandbox.close_scratch(tar)
    return _DONE


def _edit_attrs(ad: classad.ClassAd) -> dict[str, str]:
    """The attributes of an update's ad, as expression text (what the edit route takes)."""
    return {name: str(ad.lookup(name)) for name in ad}


#: The largest proxy file sent (a proxy and its chain are a few KiB).
MAX_PROXY_BYTES: Final = 1 << 20


def _read_proxy(path: Path) -> bytes | None:
    """The file's bytes, None when it is too large to be a proxy (OSError if unreadable)."""
    with path.open("rb") as file:
        data = file.read(MAX_PROXY_BYTES + 1)
    return None if len(data) > MAX_PROXY_BYTES else data


def _act_error(action: str, err: RemoteRefusal) -> str:
    """HTCondor's words for an act-on-jobs failure (the grid manager matches some)."""
    if err.status == 404:
        return condor.JOB_NOT_FOUND
    if err.status == 409:
        return _not_acted(action)
    if err.status == 403 and err.error == "NotAuthorized":
        return condor.PERMISSION_DENIED
    return str(err)


def _not_acted(action: str) -> str:
    """HTCondor's words for a job its act left as it was."""
    return condor.BAD_JOB_STATUS if action == "Release" else condor.ALREADY_DONE


def _job_id_of(ad: classad.ClassAd) -> str:
    ids = []
    for name in ("ClusterId", "ProcId"):
        value = ad.eval(name) if name in ad else None
        if not isinstance(value, int) or isinstance(value, bool):
            raise SandboxError(f"the stage-in ad has no {name}: which remote job is it?")
        ids.append(str(value))
    return ".".join(ids)


def _server_time(date: str | None, clock: Clock) -> int:
    if date:
        try:
            return int(email.utils.parsedate_to_datetime(date).timestamp())
        except (TypeError, ValueError):
            pass
    return int(clock.time())


def _parse_ads(body: bytes) -> list[classad.ClassAd]:
    """The ads of a `{"jobs": [...]}` answer."""
    text = body.decode("utf-8")
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        raise RemoteRefusal(
            "the schedd's answer holds no list of jobs", status=200, error="", detail=text[:200]
        )
    try:
        return list(classad.parseAds(text[start : end + 1], classad.ParserType.JSON))
    except classad.ClassAdException as exc:
        raise RemoteRefusal(
            f"the schedd's job ads do not parse: {exc}", status=200, error="", detail=str(exc)
        ) from None


def _one_line_ads(body: bytes, server_time: int) -> list[str]:
    """Each ad in compact new ClassAd syntax (one line), with ServerTime."""
    try:
        answer = adjson.loads(body)
    except (UnicodeDecodeError, ValueError):
        answer = None
    jobs = answer.get("jobs") if isinstance(answer, dict) else None
    if not isinstance(jobs, list) or not all(isinstance(ad, dict) for ad in jobs):
        ads = _parse_ads(body)  # not the usual answer: the parser says what is wrong
        for ad in ads:
            ad["ServerTime"] = server_time
        return [repr(ad) for ad in ads]
    lines = []
    for job in jobs:
        for name in [name for name in job if name.lower() == "servertime"]:
            del job[name]
        job["ServerTime"] = server_time
        line = adjson.ad_text(job)
        if line is None:  # a value the translation leaves to the parser
            line = repr(_parse_ads(('{"jobs": [' + adjson.dumps(job) + "]}").encode())[0])
        lines.append(line)
    return lines


# ---- request checks: a malformed request is answered E, as the C-GAHP's io_loop does ------
#
# Each runs in the runtime's dispatch (Command.parse) before the handler starts; the ad a
# SUBMIT or STAGE_IN carries is parsed there once and reaches the handler as Call.parsed.


def _request_ad(call: Call, index: int = 1) -> classad.ClassAd:
    """The ad of a request (SUBMIT, STAGE_IN, UPDATE...), as its check parsed it (or
    parsed here, for a Call made without the runtime)."""
    if isinstance(call.parsed, classad.ClassAd):
        return call.parsed
    return classad.ClassAd(call.args[index])


def _parse_ad(text: str) -> classad.ClassAd:
    try:
        return classad.ClassAd(text)
    except classad.ClassAdException as exc:
        raise BadArguments("not a ClassAd: " + str(exc).splitlines()[0]) from None


def _check_job(text: str) -> None:
    if not _JOB_ID.fullmatch(text):
        raise BadArguments(f"bad job id {text!r}: expected cluster.proc")


def _check(
    args: Sequence[str], jobs: Sequence[int], ads: Sequence[int], texts: Sequence[int]
) -> classad.ClassAd | None:
    """Raise BadArguments for the first problem with the arguments after the request id;
    the ad at index ads[-1], parsed, if any."""
    if not args or not args[0]:
        raise BadArguments("the schedd name is empty")
    for i in jobs:
        if i < len(args):
            _check_job(args[i])
    for i in texts:
        if i < len(args) and not args[i]:
            raise BadArguments("the constraint is empty")
    ad = None
    for i in ads:
        if i < len(args):
            ad = _parse_ad(args[i])
    return ad


def _check_lease(args: Sequence[str]) -> None:
    if len(args) < 2 or not _NUMBER.fullmatch(args[1]):
        raise BadArguments("expected <schedd> <count> (<job id> <expiration>)...")
    count = int(args[1])
    if len(args) != 2 + 2 * count:
        found = (len(args) - 2) / 2
        raise BadArguments(f"expected {count} job id and expiration pairs, found {found:g}")
    for i in range(2, len(args), 2):
        _check_job(args[i])
        if not _EXPIRY.fullmatch(args[i + 1]):
            raise BadArguments(
                f"bad expiration {args[i + 1]!r} for job {args[i]}: expected epoch seconds"
            )
    _check(args, (), (), ())


def _check_refresh(args: Sequence[str]) -> None:
    if len(args) > 4:
        raise BadArguments(f"expected 4 or 5 parameters, {len(args) + 1} found")
    if len(args) == 4 and not _EXPIRY.fullmatch(args[3]):
        raise BadArguments(f"bad proxy expiration {args[3]!r}: expected epoch seconds")
    _check(args, (1,), (), (2,))


_CHECKS: dict[str, Callable[[Sequence[str]], classad.ClassAd | None]] = {
    condor.SUBMIT.name: lambda a: _check(a, (), (1,), ()),
    condor.STAGE_IN.name: lambda a: _check(a, (), (1,), ()),
    condor.STATUS.name: lambda a: _check(a, (), (), (1,)),
    condor.REMOVE.name: lambda a: _check(a, (1,), (), ()),
    condor.HOLD.name: lambda a: _check(a, (1,), (), ()),
    condor.RELEASE.name: lambda a: _check(a, (1,), (), ()),
    condor.UPDATE.name: lambda a: _check(a, (1,), (2,), ()),
    condor.UPDATE_CONSTRAINED.name: lambda a: _check(a, (), (2,), (1,)),
    condor.STAGE_OUT.name: lambda a: _check(a, (1,), (), ()),
    condor.REFRESH_PROXY.name: _check_refresh,
    condor.UPDATE_LEASE.name: _check_lease,
}
