"""The job router's hooks, with HTCondor's stdin/stdout contract (JobRouterHookMgr.cpp).

The keyword is the job's `HookKeyword`, else JOB_ROUTER_HOOK_KEYWORD; the hooks are the
programs `<KEYWORD>_HOOK_TRANSLATE_JOB`, `_UPDATE_JOB_INFO`, `_JOB_FINALIZE` and
`_JOB_CLEANUP` name (none: that step is the router's own). Each runs with no arguments,
as the job's owner when the router runs as root, and must exit 0:

    TRANSLATE_JOB    stdin: the route (one line, `[ Name = ...; TargetUniverse = 9;
                     GridResource = ... ]`), a line `------`, the job ad (old syntax).
                     stdout: the job to route, which the route's transforms then edit.
                     Failure or no output: the job is not routed this time.
    UPDATE_JOB_INFO  stdin: the routed job, at each pass. stdout: attributes to set in
                     it (none: nothing to set).
    JOB_FINALIZE     stdin: the source job, `------`, the routed job that completed.
                     stdout: attributes to set in the source. Failure: the source goes
                     back to idle to be routed again.
    JOB_CLEANUP      stdin: the routed job, when the router is done with the pair.

Ads are read a line at a time (`Name = expr`), as the router inserts them; a line that is
not one fails the hook. `<KEYWORD>_ATTRS_TO_COPY` names more attributes the source takes
from its routed job. A hook that runs past `HOOK_TIMEOUT` seconds is killed and fails.

`HookRunner` runs them for the router's passes: inline by default (the pass waits), or,
in the daemon, in `workers` threads beside the passes, as HTCondor's router runs its
hooks: a pass starts a job's hook and goes on with the others, and a later pass (rung by
`wake` when the hook ends) takes its result. A slow hook then holds up its own job only.
"""

from __future__ import annotations

import enum
import logging
import queue
import re
import subprocess
import threading
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from htgrid._privsep import OwnerPolicy, PrivilegeError, spawn_identity
from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import HTGridError
from htgrid.router._routes import Route, RouterError

__all__ = ["HOOK_TIMEOUT", "HookFailed", "HookKind", "HookRunner", "RouterHooks"]

log = logging.getLogger("htgrid.router")

#: Seconds a hook may run (HTCondor waits for ever; a hung hook must not stop the router).
HOOK_TIMEOUT: Final = 120.0
SEPARATOR: Final = "------"
#: What an UPDATE_JOB_INFO hook may not set (JobRouterHookMgr's attrs_to_delete, and
#: what only the queue sets).
_NOT_UPDATED: Final = frozenset(
    {"mytype", "targettype", "clusterid", "procid", "owner", "user", "osuser", "jobstatus"}
)


_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


class HookKind(enum.Enum):
    """A job router hook, by its knob's suffix."""

    TRANSLATE_JOB = "TRANSLATE_JOB"
    UPDATE_JOB_INFO = "UPDATE_JOB_INFO"
    JOB_FINALIZE = "JOB_FINALIZE"
    JOB_CLEANUP = "JOB_CLEANUP"


class HookFailed(RouterError):
    """A hook could not run, failed, or printed what is not a ClassAd."""


@dataclass(frozen=True, slots=True)
class RouterHooks:
    """The hooks of the router's configuration (`knobs`, upper-case names)."""

    knobs: Mapping[str, str]
    allow_root: bool = False
    timeout: float = HOOK_TIMEOUT

    def keyword(self, job: ClassAd) -> str:
        own = job.get("HookKeyword")
        if isinstance(own, str) and own.strip():
            return own.strip()
        return self.knobs.get("JOB_ROUTER_HOOK_KEYWORD", "").strip()

    def path(self, kind: HookKind, job: ClassAd) -> str | None:
        keyword = self.keyword(job)
        if not keyword:
            return None
        return self.knobs.get(f"{keyword.upper()}_HOOK_{kind.value}", "").strip() or None

    def attrs_to_copy(self, job: ClassAd) -> tuple[str, ...]:
        keyword = self.keyword(job)
        if not keyword:
            return ()
        text = self.knobs.get(f"{keyword.upper()}_ATTRS_TO_COPY", "")
        return tuple(n for n in text.replace(",", " ").split() if n)

    # ---- the four hooks ------------------------------------------------------------------

    def translate(self, route: Route, job: ClassAd) -> ClassAd | None:
        """The job as the TRANSLATE_JOB hook makes it; None when there is no such hook."""
        out = self._run(
            HookKind.TRANSLATE_JOB,
            job,
            lambda: f"{route_description(route)}\n{SEPARATOR}\n{job.printOld()}",
        )
        if out is None:
            return None
        if not out.strip():
            raise HookFailed("the TRANSLATE_JOB hook printed no job")
        return _ad_of(out, HookKind.TRANSLATE_JOB)

    def update_job_info(self, source: ClassAd, dest: ClassAd) -> dict[str, ExprTree]:
        """What the UPDATE_JOB_INFO hook sets in the routed job (empty: nothing, or no hook)."""
        out = self._run(HookKind.UPDATE_JOB_INFO, source, dest.printOld)
        if not out or not out.strip():
            return {}
        ad = _ad_of(out, HookKind.UPDATE_JOB_INFO)
        return {k: ad.lookup(k) for k in ad if k.lower() not in _NOT_UPDATED}

    def finalize(self, source: ClassAd, dest: ClassAd) -> dict[str, ExprTree] | None:
        """What the JOB_FINALIZE hook sets in the source (None: no hook)."""
        out = self._run(
            HookKind.JOB_FINALIZE,
            source,
            lambda: f"{source.printOld()}{SEPARATOR}\n{dest.printOld()}",
        )
        if out is None:
            return None
        if not out.strip():
            return {}
        ad = _ad_of(out, HookKind.JOB_FINALIZE)
        return {k: ad.lookup(k) for k in ad if k.lower() not in _NOT_UPDATED}

    def cleanup(self, source: ClassAd, dest: ClassAd) -> None:
        """The JOB_CLEANUP hook (its failure is logged: the pair is over either way)."""
        try:
            self._run(HookKind.JOB_CLEANUP, source, dest.printOld)
        except HookFailed as err:
            log.warning("routed job %s: %s", dest.get("RoutedFromJobId"), err)

    # ---- running one -----------------------------------------------------------------------

    def _run(self, kind: HookKind, job: ClassAd, stdin: Callable[[], str]) -> str | None:
        """The hook's stdout; None when it is not configured; HookFailed when it fails.
        `stdin` makes its input, only when there is a hook: printing the ads of every
        pair at every pass was a sixth of a routing pass without any."""
        path = self.path(kind, job)
        if path is None:
            return None
        what = f"the {kind.value} hook {path}"
        try:
            account = OwnerPolicy(allow_root=self.allow_root).account(job.get("Owner"))
        except PrivilegeError as err:
            raise HookFailed(f"{what} cannot run as the job's owner: {err}") from None
        try:
            done = subprocess.run(
                [path],
                input=stdin(),
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                cwd="/",
                **spawn_identity(account),
            )
        except subprocess.TimeoutExpired:
            raise HookFailed(f"{what} ran past {self.timeout:g} s and was killed") from None
        except OSError as err:
            raise HookFailed(f"{what} cannot run: {err.strerror or err}") from None
        if done.stderr.strip():
            log.warning("%s printed to stderr: %s", what, done.stderr.strip()[:2000])
        if done.returncode != 0:
            raise HookFailed(f"{what} exited with status {done.returncode}")
        return str(done.stdout)


T = TypeVar("T")


class HookRunner:
    """Hooks run for the router's passes (blocking calls: the passes run in a thread).

    `poll(key, work)` is the future of hook `key`, started by `work` unless it runs or
    ran already; once it is done, the pass `take`s it. Inline (no workers) it is done at
    once. A result no pass polled for two passes is dropped (its job left, or took
    another route)."""

    def __init__(self, *, workers: int = 0, wake: Callable[[], None] = lambda: None) -> None:
        self._workers = workers
        self._threads = 0
        self._todo: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = queue.SimpleQueue()
        self._wake = wake
        self._futures: dict[Hashable, tuple[Future[Any], int]] = {}
        self._pass = 0

    def next_pass(self) -> None:
        """A pass begins: results unclaimed since the one before the last are dropped."""
        self._pass += 1
        self._futures = {
            k: (f, seen)
            for k, (f, seen) in self._futures.items()
            if not f.done() or seen >= self._pass - 1
        }

    def poll(self, key: Hashable, work: Callable[[], T]) -> Future[T]:
        held = self._futures.get(key)
        future: Future[T] = held[0] if held is not None else self._start(work)
        self._futures[key] = (future, self._pass)
        return future

    def take(self, key: Hashable) -> None:
        self._futures.pop(key, None)

    def fire(self, work: Callable[[], object]) -> None:
        """Run `work` with no one to wait for it (its errors are its own to log)."""
        self._start(work)

    def running(self) -> int:
        return sum(1 for f, _ in self._futures.values() if not f.done())

    def _start(self, work: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        if self._workers <= 0:
            _settle(future, work)
            return future
        self._todo.put((future, work))
        if self._threads < self._workers:
            # Daemon threads: a hung hook (until HOOK_TIMEOUT) must not hold the exit.
            threading.Thread(target=self._serve, name="job router hooks", daemon=True).start()
            self._threads += 1
        return future

    def _serve(self) -> None:
        while True:
            future, work = self._todo.get()
            _settle(future, work)
            self._wake()


def _settle(future: Future[T], work: Callable[[], T]) -> None:
    future.set_running_or_notify_cancel()
    try:
        future.set_result(work())
    except BaseException as err:  # the pass that takes it raises it
        future.set_exception(err)


def route_description(route: Route) -> str:
    """JobRoute::RouteDescription: the route's name, target universe and grid resource."""
    ad = ClassAd({"Name": route.name, "TargetUniverse": route.target_universe})
    if route.grid_resource:
        ad["GridResource"] = route.grid_resource
    return repr(ad)  # one line: [ Name = "..."; TargetUniverse = 9; ... ]


def _ad_of(text: str, kind: HookKind) -> ClassAd:
    ad = ClassAd()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, eq, value = line.partition("=")
        name = name.strip()
        try:
            if not eq or _NAME.fullmatch(name) is None:
                raise ValueError("not Name = expression")
            ad[name] = ExprTree(value.strip())
        except (HTGridError, ValueError) as err:
            raise HookFailed(
                f"the {kind.value} hook's line {number} is not an attribute: {line[:200]!r} ({err})"
            ) from None
    return ad
