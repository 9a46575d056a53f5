"""`JobQueue`: HTCondor's schedd job queue as a library, durable in SQLite.

    q = JobQueue.open("/var/lib/htgrid", clock=time.time)
    alice = Identity("alice")
    with q.transaction(alice) as tx:          # one transaction: all procs or none
        cid = tx.new_cluster()
        tx.set_cluster_ad(cid, cluster_ad)    # what the procs share
        for i in range(10):
            tx.new_proc(cid, proc_ad(i))      # what differs ($(Process)...)
    q.act(JobAction.Hold, f"{cid}.0", alice, "waiting for data")
    q.query("JobStatus == 5", ["HoldReason"])
    q.changes_since(0)

User actions (`act`, `edit`) check the identity against the jobs' `Owner`. The
daemon-side calls (`job_started`, `job_exited`, `job_evicted`, `destroy`, `update`,
`evaluate_periodic`) are the schedd's own and check nothing. Blocking: call from one
worker thread (the methods are serialised by a lock). The reads (`get`, `query`,
`history`, `changes_since`...) are `_reads.QueueReads`, which JobQueue extends.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import ClassAdSyntaxError
from htgrid.queue import _actions as actions
from htgrid.queue import _factory
from htgrid.queue._codes import HoldReasonCode, JobAction
from htgrid.queue._errors import (
    InvalidSubmit,
    InvalidTransition,
    JobNotFound,
    NotAuthorized,
    ProtectedAttribute,
    QueueError,
)
from htgrid.queue._ids import Identity, JobId
from htgrid.queue._matches import record_match
from htgrid.queue._periodic import keep_in_queue, periodic_pass
from htgrid.queue._policy import (
    ExitOutcome,
    PolicyAction,
    PolicyDecision,
    SystemPolicy,
    exit_decision,
)
from htgrid.queue._quarantine import quarantine_unreadable
from htgrid.queue._reads import QueueReads
from htgrid.queue._status import ACTIVE, TRANSITIONS, JobStatus
from htgrid.queue._store import JobEdit, Store, Txn, gc_paused
from htgrid.queue._submit import SubmitTransaction
from htgrid.queue._targets import JobSpec, cluster_of, job_id_of, select_targets
from htgrid.queue.faults import JobFailure, daemon_fault, problem

__all__ = ["JobQueue", "JobSpec"]

# condor_qedit refuses these (SYSTEM_IMMUTABLE_JOB_ATTRS): Owner, User and OsUser say whose
# rights a job has, which nobody may change once it is queued, not even an administrator;
# JobStatus changes only through actions, so the transition table applies. A MyProxy
# password is never put in the queue (the schedd keeps it apart), as in HTCondor.
PROTECTED: Final = frozenset(
    {
        "owner",
        "user",
        "osuser",
        "clusterid",
        "procid",
        "mytype",
        "targettype",
        "jobstatus",
        "myproxypassword",
    }
)
_RUNTIME: Final = frozenset(
    {JobStatus.IDLE, JobStatus.RUNNING, JobStatus.SUSPENDED, JobStatus.TRANSFERRING_OUTPUT}
)
#: The HoldReason of a job whose exit policy could not be evaluated.
EXIT_POLICY_FAILED: Final = "The job's exit policy could not be evaluated: {}"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VERBS: Final = {
    JobAction.Hold: ("hold", "condor_hold"),
    JobAction.Release: ("release", "condor_release"),
    JobAction.Remove: ("remove", "condor_rm"),
    JobAction.RemoveX: ("remove", "condor_rm -forcex"),
}
_ELIGIBLE: Final[Mapping[JobAction, Callable[[JobStatus], bool]]] = {
    JobAction.Hold: lambda s: JobStatus.HELD in TRANSITIONS[s],
    JobAction.Release: lambda s: s == JobStatus.HELD,
    JobAction.Remove: lambda s: JobStatus.REMOVED in TRANSITIONS[s],
    JobAction.RemoveX: lambda s: s == JobStatus.REMOVED,
}


class JobQueue(QueueReads):
    """The job queue of one state directory. Open with `JobQueue.open`."""

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.RLock()
        self._cluster_floor = 1  # ids handed out in this process, even if rolled back
        self._reserved: set[int] = set()  # reserve_cluster() ids not yet submitted
        self._closed = False

    @classmethod
    def open(
        cls,
        state_dir: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        fsync: bool = True,
        check: bool = True,
    ) -> JobQueue:
        """Open (creating if needed) the queue in `state_dir`.

        `clock` gives the time written into job ads (QDate, EnteredCurrentStatus...);
        `fsync=False` keeps commits safe from a killed process but not from a power cut.
        `check`: rows that cannot be read are first set aside (`_quarantine`), so that
        one bad row does not stop every query; a process that opens a queue a daemon
        has opened already may skip it.
        """
        store = Store(Path(state_dir), fsync=fsync)
        try:
            if check:
                quarantine_unreadable(store, int(clock()))
        except BaseException:
            store.close()
            raise
        return cls(store, clock)

    def close(self) -> None:
        """Close the database; the queue cannot be used afterwards."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._store.close()

    def __enter__(self) -> JobQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- submitting ---------------------------------------------------------------------

    @contextmanager
    def transaction(
        self, identity: Identity, *, reserved: int | None = None
    ) -> Iterator[SubmitTransaction]:
        """Submit clusters as `identity`: all of it commits when the block ends, or none.

        The queue is locked for other callers until the block ends. With `reserved` (an
        id from `reserve_cluster`), the first `new_cluster()` returns that id.
        """
        with self._writing() as txn:
            claim = self._claim_cluster if reserved is None else self._claim_reserved(reserved)
            tx = SubmitTransaction(txn, identity, claim)
            yield tx
            ads = tx.commit_rows()
            self._reserved.difference_update(ads)
        for cluster, ad in ads.items():
            self._store.remember_cluster(cluster, ad)

    def submit(
        self, identity: Identity, cluster_ad: ClassAd, procs: int | Iterable[ClassAd] = 1
    ) -> int:
        """Queue one cluster: `procs` copies of `cluster_ad`, or one proc per given ad."""
        with self.transaction(identity) as tx:
            cluster = tx.new_cluster()
            tx.set_cluster_ad(cluster, cluster_ad)
            if isinstance(procs, int):
                for _ in range(procs):
                    tx.new_proc(cluster)
            else:
                for ad in procs:
                    tx.new_proc(cluster, ad)
        return cluster

    def _claim_cluster(self, candidate: int) -> int:
        cluster = max(candidate, self._cluster_floor)
        self._cluster_floor = cluster + 1
        return cluster

    def reserve_cluster(self) -> int:
        """A cluster id for a submitter that builds its ads before sending them.

        condor_submit asks the schedd for the id first, because `$(Cluster)` appears in
        the ads it then builds. The counter is committed, so the id is never handed out
        again; submit with `transaction(identity, reserved=id)` while this object is open.
        """
        with self._writing() as txn:
            cluster = self._claim_cluster(txn.next_cluster)
            txn.next_cluster = cluster + 1
            self._reserved.add(cluster)
        return cluster

    def _claim_reserved(self, cluster: int) -> Callable[[int], int]:
        if cluster not in self._reserved:
            raise InvalidSubmit(f"cluster {cluster} was not reserved, or is already submitted")
        first = [cluster]
        return lambda candidate: first.pop() if first else self._claim_cluster(candidate)

    def trim_changes(self, upto_seq: int) -> None:
        """Forget the changes up to `upto_seq` (every follower has read them)."""
        with self._writing() as txn:
            txn.conn.execute("DELETE FROM changes WHERE seq <= ?", (upto_seq,))

    # -- user actions -------------------------------------------------------------------

    def act(
        self,
        action: JobAction,
        jobs: JobSpec,
        identity: Identity,
        reason: str | None = None,
        *,
        code: HoldReasonCode | int = HoldReasonCode.UserRequest,
        subcode: int = 0,
        trial: bool = False,
    ) -> list[JobId]:
        """Hold, release or remove jobs as `identity`; the jobs acted on.

        Named jobs (ids, a cluster) must exist, belong to the identity (unless it is an
        administrator) and be in a status the action applies to, or nothing is done. A
        constraint acts on the matching jobs the identity may act on, in a status the
        action applies to, as condor_hold/condor_release/condor_rm -constraint do.
        A `trial` does all that and rolls it back: the jobs it would act on (and the
        same errors), nothing changed.
        """
        try:
            return self._act(action, jobs, identity, reason, code, subcode, trial)
        except _TrialDone as done:
            return done.jobs

    def _act(
        self,
        action: JobAction,
        jobs: JobSpec,
        identity: Identity,
        reason: str | None,
        code: HoldReasonCode | int,
        subcode: int,
        trial: bool,
    ) -> list[JobId]:
        verb, tool = _VERBS[action]
        code = HoldReasonCode(code)  # ValueError for a code HTCondor does not define
        text = reason if reason is not None else f"via {tool} (by user {identity.name})"
        done: list[JobId] = []
        with self._writing() as txn:
            cluster = cluster_of(jobs)
            factory = cluster is not None and _act_on_factory(
                txn, cluster, action, identity, text, code
            )
            try:
                targets = select_targets(txn, jobs, identity, verb, _ELIGIBLE[action])
            except JobNotFound:
                if not factory:  # a factory's cluster may have no job in the queue now
                    raise
                targets = []
            for edit in targets:
                self._apply(txn, edit, action, text, code, subcode)
                done.append(edit.job_id)
            if trial:
                raise _TrialDone(done)  # rolls the transaction back
        return done

    def _apply(
        self,
        txn: Txn,
        edit: JobEdit,
        action: JobAction,
        reason: str,
        code: HoldReasonCode,
        subcode: int,
    ) -> None:
        now = txn.now
        if action is JobAction.Hold:
            actions.hold(edit, reason, code, subcode, now)
        elif action is JobAction.Release:
            actions.release(edit, reason, now)
        elif action is JobAction.Remove:
            was = edit.status
            actions.remove(edit, reason, now)
            if was not in ACTIVE and edit.get("Managed") != "External":
                self._finish(txn, edit)
                return
        elif action is JobAction.RemoveX:
            if edit.status != JobStatus.REMOVED:
                raise InvalidTransition(f"job {edit.job_id}: -forcex applies to Removed jobs only")
            edit.set("JobFinishedHookDone", now)
            txn.save(edit)
            txn.leave(edit)
            return
        txn.save(edit)

    def edit(
        self,
        jobs: JobSpec,
        attrs: Mapping[str, str | ExprTree | bool | int | float],
        identity: Identity,
    ) -> list[JobId]:
        """condor_qedit: set attributes of jobs as `identity`; the jobs edited.

        A string value is ClassAd expression text (`'"a string"'`, `'RequestMemory * 2'`),
        as htcondor2's Schedd.edit takes it; it is parsed before anything changes, and a
        malformed one raises ClassAdSyntaxError. A finished job kept by LeaveJobInQueue
        leaves for the history as soon as an edit makes it false (HTCondor-C's cleanup).
        """
        parsed: dict[str, Any] = {}
        for name, value in attrs.items():
            if not _NAME.fullmatch(name):
                raise QueueError(f"cannot edit {name!r}: not an attribute name")
            if name.lower() in PROTECTED:
                raise ProtectedAttribute(f"cannot edit {name}: it is set by the queue only")
            parsed[name] = _parsed(name, value) if isinstance(value, str) else value
        done: list[JobId] = []
        with self._writing() as txn:
            leaving = []
            for edit in select_targets(txn, jobs, identity, "edit", lambda s: True):
                for name, value in parsed.items():
                    edit.set(name, value)
                txn.save(edit)
                if _finished(edit) and not keep_in_queue(edit, txn.now):
                    leaving.append(edit)
                done.append(edit.job_id)
            # Let go after every edit: a run of procs edited alike is then one change, and
            # their leaving one more (a job's edit and leaving in turn would part them).
            for edit in leaving:
                txn.leave(edit)
        return done

    def input_staged(
        self, job_ids: Sequence[JobId], identity: Identity, times: Mapping[str, int], reason: str
    ) -> list[JobId]:
        """The input of these jobs is spooled: `times` (StageInStart, StageInFinish) set,
        and those held for it (SpoolingInput) released with `reason`, in one transaction
        (procs of a cluster changed alike are one change). Jobs gone or not `identity`'s
        are skipped; those staged."""
        done: list[JobId] = []
        with self._writing() as txn:
            for job_id in job_ids:
                try:
                    edit = txn.load(job_id)
                except JobNotFound:
                    continue
                if not identity.may_act_on(edit.owner):
                    continue
                for name, value in times.items():
                    edit.set(name, value)
                if (
                    edit.status == JobStatus.HELD
                    and edit.get("HoldReasonCode") == HoldReasonCode.SpoolingInput
                ):
                    actions.release(edit, reason, txn.now)
                txn.save(edit)
                done.append(job_id)
        return done

    # -- the schedd's own changes -------------------------------------------------------

    def job_started(self, job_id: JobId | str, attrs: Mapping[str, Any] | None = None) -> None:
        """The job began running (Idle -> Running); `attrs` (where it runs: RemoteHost...)
        set first as `update` sets them, in the same transaction (one commit)."""
        with self._writing() as txn:
            if attrs:
                self._update(txn, job_id, attrs)
            edit = txn.load(job_id_of(job_id))
            actions.start(edit, txn.now)
            txn.save(edit)

    def job_evicted(
        self,
        job_id: JobId | str,
        reason: str = "",
        code: int = 0,
        subcode: int = 0,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        """The job stopped without exiting and goes back to Idle to run again; `reason`,
        when given, becomes its VacateReason (`code` its VacateReasonCode); `attrs` set
        first, as `job_started`'s."""
        with self._writing() as txn:
            if attrs:
                self._update(txn, job_id, attrs)
            edit = txn.load(job_id_of(job_id))
            actions.evict(edit, txn.now, reason, code, subcode)
            txn.save(edit)

    def job_exited(
        self,
        job_id: JobId | str,
        exit_code: int,
        *,
        by_signal: bool = False,
        usage: Mapping[str, float] | None = None,
    ) -> ExitOutcome:
        """The job's process ended with `exit_code` (a signal number if `by_signal`).

        Records `usage` (RemoteWallClockTime, RemoteUserCpu...: what the policy may read),
        ExitCode/ExitSignal/ExitBySignal and NumJobCompletions, then lets the job's policy
        decide (see `_policy`): hold, requeue, or complete, and a completed job leaves for
        the history unless LeaveJobInQueue is true. One transaction, one change.
        """
        with self._writing() as txn:
            edit = txn.load(job_id_of(job_id))
            for name, value in (usage or {}).items():
                edit.set(name, value)
            actions.record_exit(edit, exit_code, by_signal)
            decision = _exit_decision(edit, txn.now)
            if decision.action is PolicyAction.HOLD:
                actions.hold(edit, decision.reason, decision.code, decision.subcode, txn.now)
                outcome = ExitOutcome.HELD
            elif decision.action is PolicyAction.REQUEUE:
                actions.evict(edit, txn.now)
                outcome = ExitOutcome.REQUEUED
            else:
                actions.complete(edit, txn.now)
                left = self._finish(txn, edit)
                return ExitOutcome.COMPLETED if left else ExitOutcome.LEFT_IN_QUEUE
            txn.save(edit)
            return outcome

    def destroy(self, job_id: JobId | str) -> bool:
        """Whatever ran a Removed or Completed job let go of it (HTCondor's DestroyProc).

        The job moves to the history unless LeaveJobInQueue is true; whether it moved.
        """
        with self._writing() as txn:
            edit = txn.load(job_id_of(job_id))
            if edit.status not in (JobStatus.REMOVED, JobStatus.COMPLETED):
                raise InvalidTransition(f"job {edit.job_id} is {edit.status.label}, not finished")
            return self._finish(txn, edit)

    def update(self, job_id: JobId | str, attrs: Mapping[str, Any]) -> None:
        """Set attributes as the schedd's own components do (values, not expression text).

        `JobStatus` may move between Idle, Running, Suspended and TransferringOutput, as
        the table allows; holds, exits and removals have their own calls.
        """
        with self._writing() as txn:
            self._update(txn, job_id, attrs)

    def update_many(
        self, updates: Sequence[tuple[JobId | str, Mapping[str, Any]]]
    ) -> list[QueueError | None]:
        """`update` of each job, all in one transaction; a job's refusal (not found, a
        transition or attribute refused) is its own, in its place in the list returned."""
        errors: list[QueueError | None] = []
        with self._writing() as txn:
            for job_id, attrs in updates:
                try:
                    self._update(txn, job_id, attrs)
                except (JobNotFound, InvalidTransition, ProtectedAttribute) as err:
                    errors.append(err)  # nothing of this job's was saved
                else:
                    errors.append(None)
        return errors

    def grid_matched(
        self, job_id: JobId | str, updates: Mapping[str, Any], expanded: Iterable[str]
    ) -> bool:
        """Record a grid match in an idle job: `updates` (the match's history, its MATCH_
        records and the filled-in attributes), the templates of the `expanded` attributes,
        and Matched = true (see `_matches`). False when the job is no longer idle."""
        with self._writing() as txn:
            edit = txn.load(job_id_of(job_id))
            if edit.status != JobStatus.IDLE:  # held or removed since the cycle began
                return False
            record_match(edit, updates, expanded)
            txn.save(edit)
        return True

    @staticmethod
    def _update(txn: Txn, job_id: JobId | str, attrs: Mapping[str, Any]) -> None:
        edit = txn.load(job_id_of(job_id))
        for name, value in attrs.items():
            if name.lower() == "jobstatus":
                try:
                    new = JobStatus(value)
                except ValueError:
                    raise InvalidTransition(f"job {edit.job_id}: no JobStatus {value!r}") from None
                if new not in _RUNTIME:
                    raise InvalidTransition(
                        f"job {edit.job_id}: {new.label} has its own call, not update"
                    )
                actions.set_status(edit, new, txn.now, f"become {new.label}")
            elif name.lower() in PROTECTED:
                raise ProtectedAttribute(f"job {edit.job_id}: {name} cannot change")
            else:
                edit.set(name, value)
        txn.save(edit)

    def evaluate_periodic(self, now: int | None = None) -> list[tuple[JobId, PolicyDecision]]:
        """The schedd's periodic pass: PeriodicHold/Release/Remove and TimerRemove on every
        job, and completed jobs whose LeaveJobInQueue turned false leave for the history.

        Running jobs are included (HTCondor leaves those to their shadow; here nothing
        else would evaluate them): whatever runs a job that became Held or Removed sees
        it in the change feed. Jobs managed by the grid manager (Managed == "External")
        are its to evaluate. `now` (default: the clock) is the time of the pass. Returns
        the decisions applied (`periodic_pass` also says which jobs failed).
        """
        return self.periodic_pass(now)[0]

    def periodic_pass(
        self, now: int | None = None, *, system: SystemPolicy | None = None
    ) -> tuple[list[tuple[JobId, PolicyDecision]], list[JobFailure]]:
        """`evaluate_periodic` (with the pool's `system` policy, SYSTEM_PERIODIC_*), and
        the jobs whose policy could not be evaluated: each is held for it
        (JobPolicyUndefined) when its status allows, and the others go on."""
        with self._writing(now) as txn:
            return periodic_pass(txn, self._apply_policy, system)

    def _apply_policy(self, txn: Txn, edit: JobEdit, decision: PolicyDecision) -> None:
        if decision.action is PolicyAction.HOLD:
            self._apply(txn, edit, JobAction.Hold, decision.reason, decision.code, decision.subcode)
        elif decision.action is PolicyAction.RELEASE:
            self._apply(txn, edit, JobAction.Release, decision.reason, decision.code, 0)
        elif decision.action is PolicyAction.REMOVE:
            self._apply(txn, edit, JobAction.Remove, decision.reason, decision.code, 0)

    def _finish(self, txn: Txn, edit: JobEdit) -> bool:
        """The job is finished: JobFinishedHookDone, then to the history unless kept."""
        edit.set("JobFinishedHookDone", txn.now)
        keep = keep_in_queue(edit, txn.now)
        txn.save(edit)
        if not keep:
            txn.leave(edit)
        return not keep

    # -- plumbing -----------------------------------------------------------------------

    @contextmanager
    def _writing(self, now: int | None = None) -> Iterator[Txn]:
        with self._lock, gc_paused():
            self._check_open()
            with self._store.writing(int(self._clock()) if now is None else now) as txn:
                yield txn


class _TrialDone(Exception):
    """Ends a trial's transaction (rolled back), carrying what it would have done."""

    def __init__(self, jobs: list[JobId]) -> None:
        super().__init__("trial")
        self.jobs = jobs


def _exit_decision(edit: JobEdit, now: int) -> PolicyDecision:
    """The exit policy's decision; a hold when it cannot be evaluated (the job's process
    ended either way, so its exit is recorded rather than lost with the transaction)."""
    try:
        return exit_decision(edit.view(), now)
    except Exception as exc:
        if daemon_fault(exc):
            raise
        return PolicyDecision(
            PolicyAction.HOLD,
            "OnExitRemove",
            EXIT_POLICY_FAILED.format(problem(exc)),
            HoldReasonCode.JobPolicyUndefined,
        )


def _act_on_factory(
    txn: Txn, cluster: int, action: JobAction, identity: Identity, reason: str, code: int
) -> bool:
    """condor_hold, condor_release or condor_rm of a whole cluster act on its factory too:
    paused, resumed, removed. Whether the cluster has a factory."""
    owner = _factory.owner_of(txn.conn, cluster)
    if owner is None:
        return False
    if not identity.may_act_on(owner):
        raise NotAuthorized(
            f"cluster {cluster} is owned by {owner}; {identity.name} may not {_VERBS[action][0]} it"
        )
    if action is JobAction.Hold:
        _factory.set_paused(txn, cluster, _factory.PAUSED_BY_USER, reason, code)
    elif action is JobAction.Release:
        _factory.set_paused(txn, cluster, _factory.RUNNING, reason, code)
    else:
        _factory.remove(txn, cluster)
    txn.changed(cluster)  # made up to its limits, or closed, at the commit
    return True


def _parsed(name: str, text: str) -> ExprTree:
    """An edit's expression text parsed; ClassAdSyntaxError naming the attribute."""
    try:
        return ExprTree(text)
    except ClassAdSyntaxError as exc:
        raise ClassAdSyntaxError(
            exc.reason, text=text, offset=exc.offset, origin=f"the value of {name}"
        ) from None


def _finished(edit: JobEdit) -> bool:
    """Completed, or Removed and let go of by whatever ran it (kept only by LeaveJobInQueue)."""
    status = edit.status
    return status == JobStatus.COMPLETED or (
        status == JobStatus.REMOVED and edit.has("JobFinishedHookDone")
    )
