"""The batch resource (one per `batch <lrms>`), and the submit ad a job sends the blahp.

The commands' lines are `htgrid.gahp.commands.blah`'s. Status is asked for all the resource's jobs at once: BLAH_JOB_STATUS_ALL with every job's
blah id (in chunks of `status_batch_size`, so the one-line reply stays under the 500 KiB
the protocol allows), once per poll interval. A server that does not list it gets one
BLAH_JOB_STATUS per job instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from htgrid.classad import ClassAd
from htgrid.gahp import GahpError, GahpProtocolError, GahpRequestRefused
from htgrid.gahp.commands import blah
from htgrid.grid._errors import GahpUnavailable
from htgrid.grid._resource import Resource
from htgrid.grid._values import as_int, is_plain
from htgrid.grid.batch._ids import BatchResourceName
from htgrid.grid.batch._remote import Login, TransferFailed, destroy

if TYPE_CHECKING:
    from htgrid.grid.batch._job import BatchJob

__all__ = ["BatchResource", "build_submit_ad", "remote_attrs", "submit_ad"]

log = logging.getLogger("htgrid.grid")

# What the grid manager copies from a status ad into the job ad (ProcessRemoteAd).
_REMOTE_ATTRS = (
    "BytesSent",
    "BytesRecvd",
    "ExitReason",
    "RemoteSysCpu",
    "RemoteUserCpu",
    "NumRestarts",
    "RemoteWallClockTime",
    "CpusProvisioned",
    "DiskProvisioned",
    "MemoryProvisioned",
)


def remote_attrs(status: blah.StatusAd) -> dict[str, Any]:
    """What of a status ad the job ad takes (HTCondor's ProcessRemoteAd)."""
    return {
        name: status.attrs[key] for name in _REMOTE_ATTRS if (key := name.lower()) in status.attrs
    }


class BatchResource(Resource["BatchJob", BatchResourceName]):
    """`batch <lrms> [host]`: pinged with BLAH_PING, polled with BLAH_JOB_STATUS_ALL."""

    @property
    def lrms(self) -> str:
        return self.where.lrms

    async def ping(self) -> str | None:
        remote = self.where.remote
        if remote is not None and (problem := await asyncio.to_thread(remote.key_problem)):
            return problem  # ssh would ignore the key and fail to log in: say why here
        try:
            outcome = await self.ask(blah.Outcome.of, blah.PING, self.lrms)
        except GahpRequestRefused as err:
            return str(err)
        if outcome.ok:
            return None
        return outcome.message or f"BLAH_PING {self.lrms} failed"

    def login(self) -> Login:
        """ssh as the GAHP server's user, with its environment (their keys)."""
        return Login(self.gahp.env, self.gahp.owner)

    async def let_go(self, remote: str) -> str | None:
        """A batch system on another host: the job's sandbox there (`remote`) removed."""
        host = self.where.remote
        if host is None:
            return await super().let_go(remote)
        try:
            await asyncio.to_thread(destroy, host, remote, self.login())
        except TransferFailed as err:
            return str(err)
        return None

    async def poll(self, jobs: list[BatchJob]) -> None:
        by_id = {job.blah_id: job for job in jobs if job.blah_id}
        if not by_id:
            return
        if self.gahp.supports(blah.STATUS_ALL.name):
            ids = list(by_id)
            size = max(1, self.config.status_batch_size)
            for start in range(0, len(ids), size):
                await self._poll_bulk(ids[start : start + size], by_id)
        else:
            await asyncio.gather(*(self._poll_one(blah_id, job) for blah_id, job in by_id.items()))

    async def _poll_bulk(self, ids: list[str], by_id: Mapping[str, BatchJob]) -> None:
        self.stats.status_commands += 1
        try:
            answer = await self.ask(blah.StatusAll.of, blah.STATUS_ALL, *ids)
        except (GahpError, GahpUnavailable) as err:
            self.poll_failed(str(err))
            return
        now = self.clock.time()
        if not answer.ok:
            self.poll_failed(answer.error or "bad BLAH_JOB_STATUS_ALL result")
            return
        unanswered: list[str] = []
        for position, text in enumerate(answer.ads):
            try:
                status = blah.StatusAd.of(text)
            except GahpProtocolError as err:
                log.warning("resource %s: %s", self.name, err)
                continue
            blah_id = status.blah_id
            if blah_id is None and position < len(ids):
                blah_id = ids[position]
            job = by_id.get(blah_id or "")
            if job is None:
                continue
            if status.job_status == 0 and not status.not_found:
                # The GAHP could not ask about this job: that is no news about the job.
                unanswered.append(status.error or "no status")
                continue
            job.remote_status(status, now)
        if unanswered:
            self.poll_failed(f"no status for {len(unanswered)} jobs: {unanswered[-1]}")

    async def _poll_one(self, blah_id: str, job: BatchJob) -> None:
        self.stats.status_commands += 1
        try:
            answer = await self.ask(blah.Status.of, blah.STATUS, blah_id)
        except (GahpError, GahpUnavailable) as err:
            self.poll_failed(str(err))
            return
        now = self.clock.time()
        if answer.ok:
            try:
                job.remote_status(blah.StatusAd.of(answer.ad, answer.job_status), now)
            except GahpProtocolError as err:
                log.warning("resource %s: %s", self.name, err)
        elif "not found" in answer.error.lower():
            job.remote_status(blah.StatusAd(0, error=answer.error), now)
        else:
            self.poll_failed(answer.error or "bad BLAH_JOB_STATUS result")


# ---- the submit ad (INFNBatchJob::buildSubmitAd) ---------------------------------------------

_COPY = (
    "Args",
    "Arguments",
    "Env",
    "EnvDelim",
    "Environment",
    "In",
    "Out",
    "Err",
    "TransferInput",
    "TransferOutput",
    "TransferOutputRemaps",
    "Iwd",
    "GridResource",
    "RequestMemory",
    "NodeNumber",
    "HostNumber",
    "SMPGranularity",
    "WholeNodes",
    "HostSMPSize",
    "BatchExtraSubmitArgs",
    "StageCmd",
    "BatchProject",
    "BatchRuntime",
    "GPUNumber",
    "GPUMode",
    "GPUModel",
    "MICNumber",
)
_ENV = frozenset({"env", "envdelim", "environment"})
_ARGS = frozenset({"args", "arguments"})


def _literal(ad: ClassAd, name: str) -> object:
    """The attribute evaluated in the job ad, if it is a plain value."""
    if name not in ad:
        return None
    try:
        value = ad.eval(name)
    except (KeyError, TypeError, ValueError):
        return None
    return value if is_plain(value) else None


def build_submit_ad(ad: ClassAd, lrms: str, tag: str) -> str:
    """The BLAH_JOB_SUBMIT ad for job `ad`, every value a literal, on one line."""
    return repr(submit_ad(ad, lrms, tag))


def submit_ad(ad: ClassAd, lrms: str, tag: str) -> ClassAd:
    """The BLAH_JOB_SUBMIT ad for job `ad`, every value a literal."""
    out = ClassAd()
    for name in _COPY:
        value = _literal(ad, name)
        if value is not None:
            out[name] = value
    iwd = _literal(ad, "RemoteIwd") or _literal(ad, "Iwd")
    if isinstance(iwd, str):
        out["Iwd"] = iwd
    queue = _literal(ad, "BatchQueue")
    if isinstance(queue, str) and queue:
        out["Queue"] = queue
    gpus = as_int(_literal(ad, "RequestGPUs"))
    if gpus is not None and gpus > 0:
        out["GPUNumber"] = gpus
    cmd = _literal(ad, "Cmd")
    if isinstance(cmd, str):
        out["Cmd"] = _absolute(cmd, iwd)
    if _literal(ad, "TransferExecutable") is False:
        out["StageCmd"] = False
    proxy = _literal(ad, "x509userproxy")
    if isinstance(proxy, str) and proxy:
        out["x509UserProxy"] = _absolute(proxy, iwd)
    out["gridtype"] = lrms
    out["ClientJobId"] = tag
    _apply_remote_overrides(ad, out)
    return out


def _absolute(path: str, iwd: object) -> str:
    if os.path.isabs(path) or not isinstance(iwd, str):
        return path
    return os.path.join(iwd, path)


def _apply_remote_overrides(ad: ClassAd, out: ClassAd) -> None:
    """REMOTE_<attr> replaces <attr>; a remote env or args replaces the whole group."""
    overrides = [(name[7:], name) for name in ad if _is_remote(name)]
    groups: Iterable[frozenset[str]] = (_ENV, _ARGS)
    for group in groups:
        if any(target.lower() in group for target, _ in overrides):
            for name in list(out.keys()):
                if name.lower() in group:
                    del out[name]
    for target, name in overrides:
        value = _literal(ad, name)
        if value is not None:
            out[target] = value


def _is_remote(name: str) -> bool:
    return len(name) > 7 and name[:7].upper() == "REMOTE_"
