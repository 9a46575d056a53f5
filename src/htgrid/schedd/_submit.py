"""A submit as the daemon takes it: the cluster ad, then procs as they arrive (all in one
request, or streamed batch after batch), staged, then queued in one transaction.

What the daemon sets itself, whatever the submitter sent: a user's jobs are the user's
(Owner); a proc held for its input (SpoolingInput) gets its own spool directory as Iwd,
the submitter's kept in SUBMIT_Iwd; a grid job whose GridResource waits for a match
(`$$(...)`) gets Matched = false, as condor_submit marks it; the cluster ad gets
TotalSubmitProcs, which condor_q's DONE column counts against; a job with an X.509
proxy gets what the proxy file says (`proxy_attrs`: x509userproxysubject,
x509UserProxyExpiration, the VOMS FQANs...), read here as HTCondor's schedd reads it
(ReadProxyFileIntoAd): a submitter cannot claim another identity.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from htgrid._privsep import Account, PrivilegeError, as_owner
from htgrid.classad import ClassAd
from htgrid.client.x509 import ProxyError, read_proxy
from htgrid.pool import store_myproxy_password
from htgrid.queue import HoldReasonCode, Identity, JobStatus, StagedProcs

__all__ = ["GRID", "PROXY_ATTRS", "SubmitPrep", "proxy_attrs", "spooling"]

#: What the schedd alone sets from a job's proxy file (HTCondor's x509_attrs).
PROXY_ATTRS: Final = (
    "x509userproxysubject",
    "x509UserProxyExpiration",
    "x509UserProxyEmail",
    "x509UserProxyVOName",
    "x509UserProxyFirstFQAN",
    "x509UserProxyFQAN",
)

GRID: Final = 9  # JobUniverse


def _proc_get(proc: ClassAd, cluster: ClassAd, name: str) -> Any:
    """A proc's attribute, over its cluster's (no merged copy made)."""
    return proc[name] if name in proc else cluster.get(name)


def spooling(get: Callable[[str], Any]) -> bool:
    """Whether the job (`get` reads its attributes) waits for its input to be spooled."""
    held: bool = get("JobStatus") == JobStatus.HELD
    return held and get("HoldReasonCode") == HoldReasonCode.SpoolingInput


def _waits_for_match(universe: object, resource: object) -> bool:
    return universe == GRID and isinstance(resource, str) and "$$(" in resource


class SubmitPrep:
    """One submit's cluster ad, made ready, and its procs, made ready and staged as
    they come (`add`): what `JobQueue` then queues with `add_staged`."""

    def __init__(
        self,
        cluster: int,
        cluster_ad: ClassAd,
        identity: Identity,
        spool: Callable[[int, int], Path],
        scratch: Path | None,
    ) -> None:
        self.cluster = cluster
        ad = copy.copy(cluster_ad)
        self._admin = identity.admin
        if not identity.admin:  # a user's jobs are the user's, whatever the ad says
            ad["Owner"] = identity.name
        if _waits_for_match(ad.get("JobUniverse"), ad.get("GridResource")):
            ad["Matched"] = False
        #: MyProxy passwords, never queued (htgrid.pool._myproxy): the cluster's, and
        #: those of procs that carry their own, by proc number.
        self.myproxy: str | None = _take_password(ad)
        self.proc_myproxy: dict[int, str] = {}
        self.ad = ad
        self._spool = spool
        self.spooled: list[Path] = []  # the spool directories its procs need
        self.has_log = "UserLog" in ad  # whether a job of it has a user log
        self._cluster_spools = spooling(ad.get)
        self.staged = StagedProcs(cluster, ad, identity, scratch)

    def add(self, proc: ClassAd) -> None:
        """Make one proc ready (a changed copy when it needs one) and stage it."""
        ad = self.ad
        if "Owner" in proc and not self._admin:
            proc = copy.copy(proc)
            del proc["Owner"]
        if "MyProxyPassword" in proc:
            proc = copy.copy(proc)
            password = _take_password(proc)
            assert password is not None
            self.proc_myproxy[self.staged.count] = password
        get = functools.partial(_proc_get, proc, ad)
        if self._cluster_spools or "JobStatus" in proc or "HoldReasonCode" in proc:
            proc = self._spool_dir(proc, get)
        # The same for a proc carrying its own whole ad (HTCondor-C).
        if (
            "Matched" not in ad
            and "Matched" not in proc
            and _waits_for_match(get("JobUniverse"), get("GridResource"))
        ):
            proc = copy.copy(proc)
            proc["Matched"] = False
        self.has_log = self.has_log or "UserLog" in proc
        self.staged.add(proc if len(proc) else None)

    def _spool_dir(self, proc: ClassAd, get: Callable[[str], Any]) -> ClassAd:
        """A spooling proc gets its spool directory as Iwd (the submitter's kept)."""
        if not spooling(get):
            return proc
        proc = copy.copy(proc)
        sandbox = self._spool(self.cluster, self.staged.count)
        self.spooled.append(sandbox)
        if "SUBMIT_Iwd" not in proc and "SUBMIT_Iwd" not in self.ad:
            iwd = get("Iwd")
            if isinstance(iwd, str):
                proc["SUBMIT_Iwd"] = iwd
        proc["Iwd"] = str(sandbox)
        return proc

    def finish(self) -> ClassAd:
        """The cluster ad to queue, once every proc is staged."""
        self.ad["TotalSubmitProcs"] = self.staged.count
        return self.ad

    def close(self) -> None:
        self.staged.close()

    @property
    def has_myproxy(self) -> bool:
        return self.myproxy is not None or bool(self.proc_myproxy)

    def store_myproxy(self, spool: Path) -> None:
        """Keep each proc's MyProxy password in `spool` (before the submit commits: a
        job never runs without it; those of a submit that fails are swept). Blocking."""
        for proc in range(self.staged.count):
            password = self.proc_myproxy.get(proc, self.myproxy)
            if password is not None:
                store_myproxy_password(spool, self.cluster, proc, password)


def _take_password(ad: ClassAd) -> str | None:
    """MyProxyPassword taken out of `ad` (MyProxyPasswordExists put in), as HTCondor's
    schedd kept it out of the queue. condor_submit wrote it as an expression."""
    value = ad.pop("MyProxyPassword", None)
    if value is None:
        return None
    ad["MyProxyPasswordExists"] = True
    return value if isinstance(value, str) else str(value)


def proxy_attrs(ad: ClassAd, account: Account | None, *, voms: bool = False) -> None:
    """The attributes of the job's proxy (x509userproxy, relative to Iwd) set in `ad`,
    read as the job's owner; those a submitter sent are dropped whatever happens. A
    proxy not there yet (it comes with the input, HTCondor-C) or unreadable leaves
    them unset, as HTCondor's schedd does. `voms` (USE_VOMS_ATTRIBUTES): the VO and
    FQANs of its VOMS attributes set too. Blocking."""
    for name in PROXY_ATTRS:
        if name in ad:
            del ad[name]
    proxy = ad.get("x509userproxy")
    if not isinstance(proxy, str) or not proxy:
        return
    iwd = ad.get("Iwd")
    path = Path(iwd, proxy) if isinstance(iwd, str) else Path(proxy)
    try:
        with as_owner(account):
            info = read_proxy(path, voms=voms)
    except (ProxyError, PrivilegeError):
        return
    for name, value in info.job_attrs().items():
        ad[name] = value
