"""Hold, release, remove and edit: status changes, the attributes written, owner checks."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import htgrid.classad as classad
import htgrid.queue._status as status_module
from htgrid.errors import ClassAdSyntaxError
from htgrid.queue import (
    TRANSITIONS,
    HoldReasonCode,
    Identity,
    InvalidTransition,
    JobAction,
    JobId,
    JobNotFound,
    JobQueue,
    JobStatus,
    NotAuthorized,
    ProtectedAttribute,
    QueueError,
)
from htgrid.queue._status import check_transition

ALICE = Identity("alice")
BOB = Identity("bob")
ADMIN = Identity("condor", admin=True)
T0 = 1_700_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def q(tmp_path: Path, clock: Clock) -> Iterator[JobQueue]:
    with JobQueue.open(tmp_path, clock=clock, fsync=False) as queue:
        yield queue


def job(**attrs: object) -> classad.ClassAd:
    return classad.ClassAd({"Cmd": "/bin/sleep", **attrs})


def test_hold_writes_what_the_schedd_writes(q: JobQueue, clock: Clock) -> None:
    q.submit(ALICE, job())
    clock.now = T0 + 10
    assert q.act(JobAction.Hold, "1.0", ALICE) == [JobId(1, 0)]
    ad = q.get("1.0")
    assert ad["JobStatus"] == JobStatus.HELD
    assert ad["LastJobStatus"] == JobStatus.IDLE
    assert ad["EnteredCurrentStatus"] == T0 + 10
    assert ad["HoldReason"] == "via condor_hold (by user alice)"
    assert ad["HoldReasonCode"] == int(HoldReasonCode.UserRequest) == 1
    assert ad["HoldReasonSubCode"] == 0
    assert ad["NumHolds"] == 1
    assert dict(ad["NumHoldsByReason"]) == {"UserRequest": 1}
    assert ad["LastSuspensionTime"] == 0
    assert "NumSystemHolds" not in ad  # a user hold is not a system hold


def test_a_trial_says_what_an_action_would_do_and_changes_nothing(q: JobQueue) -> None:
    """ACT_ON_JOBS answers before the client's go-ahead: a trial gives the same jobs and
    the same refusals as the action, and leaves the queue (and its feed) untouched."""
    q.submit(ALICE, job(), 2)
    q.submit(BOB, job())
    before = (q.last_seq, [q.get(f"1.{p}") for p in (0, 1)])
    held = q.act(JobAction.Hold, "JobStatus == 1", ALICE, trial=True)
    assert held == [JobId(1, 0), JobId(1, 1)]
    removed = q.act(JobAction.Remove, 1, ALICE, trial=True)
    assert removed == [JobId(1, 0), JobId(1, 1)]
    with pytest.raises(NotAuthorized, match="bob"):
        q.act(JobAction.Hold, ["1.0", "2.0"], ALICE, trial=True)
    with pytest.raises(InvalidTransition):
        q.act(JobAction.Release, "1.0", ALICE, trial=True)
    after = (q.last_seq, [q.get(f"1.{p}") for p in (0, 1)])
    assert [dict(ad) for ad in after[1]] == [dict(ad) for ad in before[1]]
    assert after[0] == before[0]
    assert q.act(JobAction.Hold, "JobStatus == 1", ALICE) == held


def test_system_hold_counts_in_num_system_holds(q: JobQueue) -> None:
    q.submit(ALICE, job(NumSystemHolds=0))
    q.act(
        JobAction.Hold,
        "1.0",
        ADMIN,
        "Transfer input files failure",
        code=HoldReasonCode.TransferInputError,
        subcode=2,
    )
    ad = q.get("1.0")
    assert (ad["HoldReasonCode"], ad["HoldReasonSubCode"]) == (13, 2)
    assert ad["NumSystemHolds"] == 1
    assert dict(ad["NumHoldsByReason"]) == {"TransferInputError": 1}


def test_release_moves_hold_reasons_to_last(q: JobQueue, clock: Clock) -> None:
    q.submit(ALICE, job())
    q.act(JobAction.Hold, "1.0", ALICE, "wait for data")
    clock.now = T0 + 60
    q.act(JobAction.Release, "1.0", ALICE)
    ad = q.get("1.0")
    assert ad["JobStatus"] == JobStatus.IDLE
    assert ad["LastJobStatus"] == JobStatus.HELD
    assert ad["EnteredCurrentStatus"] == T0 + 60
    assert ad["ReleaseReason"] == "via condor_release (by user alice)"
    assert ad["LastHoldReason"] == "wait for data"
    assert ad["LastHoldReasonCode"] == 1
    assert ad["LastHoldReasonSubCode"] == 0
    for gone in ("HoldReason", "HoldReasonCode", "HoldReasonSubCode"):
        assert gone not in ad
    q.act(JobAction.Hold, "1.0", ALICE, "again")
    ad = q.get("1.0")
    assert ad["LastReleaseReason"] == "via condor_release (by user alice)"
    assert "ReleaseReason" not in ad
    assert ad["NumHolds"] == 2
    assert dict(ad["NumHoldsByReason"]) == {"UserRequest": 2}


def test_release_of_jobs_submitted_on_hold_hides_the_cluster_reason(q: JobQueue) -> None:
    # The hold reason lives in the cluster ad, shared by all procs: releasing one proc
    # must hide it for that proc only.
    q.submit(ALICE, job(JobStatus=5), 2)
    q.act(JobAction.Release, "1.0", ALICE)
    released, held = q.get("1.0"), q.get("1.1")
    assert "HoldReason" not in released and "HoldReasonCode" not in released
    assert released["LastHoldReasonCode"] == HoldReasonCode.SubmittedOnHold
    assert held["HoldReasonCode"] == 15 and held["JobStatus"] == JobStatus.HELD


def test_remove_of_an_idle_job_moves_it_to_the_history(q: JobQueue, clock: Clock) -> None:
    q.submit(ALICE, job())
    q.act(JobAction.Hold, "1.0", ALICE, "oops")
    clock.now = T0 + 5
    q.act(JobAction.Remove, "1.0", ALICE, "not needed")
    assert q.query() == []
    (ad,) = q.history()
    assert ad["JobStatus"] == JobStatus.REMOVED
    assert ad["LastJobStatus"] == JobStatus.HELD
    assert ad["RemoveReason"] == "not needed"
    assert ad["LastHoldReason"] == "oops"
    assert "HoldReason" not in ad
    assert ad["JobFinishedHookDone"] == T0 + 5
    assert ad["EnteredCurrentStatus"] == T0 + 5


def test_removed_running_job_stays_until_its_runner_lets_go(q: JobQueue) -> None:
    q.submit(ALICE, job())
    q.job_started("1.0")
    q.act(JobAction.Remove, "1.0", ALICE)
    assert q.get("1.0")["JobStatus"] == JobStatus.REMOVED
    assert q.destroy("1.0") is True
    assert q.query() == [] and len(q.history()) == 1


def test_grid_managed_job_stays_until_the_grid_manager_is_done(q: JobQueue) -> None:
    q.submit(ALICE, job(Managed="External"))
    q.act(JobAction.Remove, "1.0", ALICE)
    assert q.get("1.0")["JobStatus"] == JobStatus.REMOVED
    q.destroy("1.0")
    assert q.query() == []


def test_leave_in_queue_keeps_a_removed_job_until_forcex(q: JobQueue) -> None:
    q.submit(ALICE, job(LeaveJobInQueue=True))
    q.act(JobAction.Remove, "1.0", ALICE)
    assert q.get("1.0")["JobStatus"] == JobStatus.REMOVED
    with pytest.raises(InvalidTransition, match="already Removed"):
        q.act(JobAction.Remove, "1.0", ALICE)
    assert q.act(JobAction.RemoveX, "1.0", ALICE) == [JobId(1, 0)]
    assert q.query() == []
    assert q.history()[0]["JobStatus"] == JobStatus.REMOVED


def test_forcex_only_applies_to_removed_jobs(q: JobQueue) -> None:
    q.submit(ALICE, job())
    with pytest.raises(QueueError, match="Removed jobs only"):
        q.act(JobAction.RemoveX, "1.0", ALICE)
    assert q.act(JobAction.RemoveX, "true", ALICE) == []


def test_others_cannot_act_on_alices_jobs(q: JobQueue) -> None:
    q.submit(ALICE, job())
    q.submit(BOB, job())
    for action in (JobAction.Hold, JobAction.Remove):
        with pytest.raises(NotAuthorized, match=r"job 1\.0 is owned by alice; bob may not"):
            q.act(action, ["2.0", "1.0"], BOB)
    # Nothing happened to bob's own job either: one transaction.
    assert q.get("2.0")["JobStatus"] == JobStatus.IDLE
    with pytest.raises(NotAuthorized, match="owned by alice"):
        q.act(JobAction.Hold, 1, BOB)
    assert q.act(JobAction.Hold, "true", BOB) == [JobId(2, 0)]
    assert q.act(JobAction.Hold, 1, ADMIN, "admin hold") == [JobId(1, 0)]
    assert q.get("1.0")["HoldReason"] == "admin hold"


def test_unknown_jobs(q: JobQueue) -> None:
    q.submit(ALICE, job())
    with pytest.raises(JobNotFound, match=r"job 1\.3"):
        q.act(JobAction.Hold, JobId(1, 3), ALICE)
    with pytest.raises(JobNotFound, match="cluster 9"):
        q.act(JobAction.Hold, "9", ALICE)
    assert q.act(JobAction.Hold, "ClusterId == 9", ALICE) == []


def test_named_jobs_in_the_wrong_status_are_refused(q: JobQueue) -> None:
    q.submit(ALICE, job(), 2)
    with pytest.raises(InvalidTransition, match=r"job 1\.0: cannot release: it is Idle, not Held"):
        q.act(JobAction.Release, "1.0", ALICE)
    q.act(JobAction.Hold, "1.1", ALICE)
    with pytest.raises(InvalidTransition, match=r"job 1\.1: cannot hold: it is already Held"):
        q.act(JobAction.Hold, ["1.0", "1.1"], ALICE)
    assert q.get("1.0")["JobStatus"] == JobStatus.IDLE  # all or nothing


def test_constraints_skip_jobs_the_action_does_not_apply_to(q: JobQueue) -> None:
    q.submit(ALICE, job(), 4)
    q.act(JobAction.Hold, "1.1", ALICE)
    q.job_started("1.2")
    q.job_started("1.3")
    q.job_exited("1.3", 0)
    assert q.act(JobAction.Hold, "true", ALICE) == [JobId(1, 0), JobId(1, 2)]
    assert q.act(JobAction.Release, 1, ALICE) == [JobId(1, 0), JobId(1, 1), JobId(1, 2)]


def test_user_hold_replaces_a_policy_hold_but_not_a_user_hold(q: JobQueue) -> None:
    q.submit(ALICE, job())
    q.act(JobAction.Hold, "1.0", ADMIN, "policy", code=HoldReasonCode.JobPolicy)
    q.act(JobAction.Hold, "1.0", ALICE, "mine now")
    ad = q.get("1.0")
    assert (ad["HoldReasonCode"], ad["HoldReason"], ad["NumHolds"]) == (1, "mine now", 1)
    with pytest.raises(InvalidTransition, match="already Held"):
        q.act(JobAction.Hold, "1.0", ALICE)


def test_edit_sets_expressions(q: JobQueue) -> None:
    q.submit(ALICE, job(RequestMemory=1024), 2)
    edited = q.edit(1, {"RequestMemory": "2048 * 2", "Note": '"rerun"', "Prio": 5}, ALICE)
    assert edited == [JobId(1, 0), JobId(1, 1)]
    ad = q.get("1.1")
    assert repr(ad.lookup("RequestMemory")) == "2048 * 2"
    assert ad.eval("RequestMemory") == 4096
    assert (ad["Note"], ad["Prio"]) == ("rerun", 5)


@pytest.mark.parametrize("name", ["Owner", "ClusterId", "ProcId", "JobStatus", "mytype"])
def test_edit_refuses_protected_attributes(q: JobQueue, name: str) -> None:
    q.submit(ALICE, job())
    with pytest.raises(ProtectedAttribute, match=f"cannot edit {name}"):
        q.edit("1.0", {"Note": '"x"', name: "3"}, ADMIN)
    assert "Note" not in q.get("1.0")


def test_edit_with_a_malformed_expression_changes_nothing(q: JobQueue) -> None:
    q.submit(ALICE, job())
    with pytest.raises(ClassAdSyntaxError) as err:
        q.edit("1.0", {"Note": '"fine"', "RequestMemory": "2048 *"}, ALICE)
    assert (err.value.line, err.value.column) == (1, 7)
    assert "Note" not in q.get("1.0")
    with pytest.raises(QueueError, match="not an attribute name"):
        q.edit("1.0", {"bad name": "1"}, ALICE)


def test_edit_checks_the_owner(q: JobQueue) -> None:
    q.submit(ALICE, job())
    with pytest.raises(NotAuthorized, match=r"job 1\.0 is owned by alice; bob may not edit"):
        q.edit("1.0", {"Note": "1"}, BOB)
    assert q.edit("true", {"Note": "1"}, BOB) == []


def test_start_and_evict(q: JobQueue, clock: Clock) -> None:
    q.submit(ALICE, job())
    clock.now = T0 + 1
    q.job_started("1.0")
    ad = q.get("1.0")
    assert (ad["JobStatus"], ad["NumJobStarts"]) == (JobStatus.RUNNING, 1)
    assert ad["JobStartDate"] == ad["JobCurrentStartDate"] == T0 + 1
    clock.now = T0 + 2
    q.job_evicted("1.0")
    clock.now = T0 + 3
    q.job_started("1.0")
    ad = q.get("1.0")
    assert ad["NumJobStarts"] == 2
    assert (ad["JobStartDate"], ad["JobCurrentStartDate"]) == (T0 + 1, T0 + 3)
    assert ad["LastVacateTime"] == T0 + 2
    with pytest.raises(InvalidTransition, match="Running -> Running"):
        q.job_started("1.0")


def test_an_eviction_says_why_until_the_job_runs_again(q: JobQueue) -> None:
    q.submit(ALICE, job())
    q.job_started("1.0")
    q.job_evicted("1.0", "PREEMPT expression evaluated to True", 1011)
    ad = q.get("1.0")
    assert ad["JobStatus"] == JobStatus.IDLE
    assert ad["VacateReason"] == "PREEMPT expression evaluated to True"
    assert (ad["VacateReasonCode"], ad["VacateReasonSubCode"]) == (1011, 0)
    q.job_started("1.0")  # HTCondor's schedd drops an earlier run's reason at a start
    ad = q.get("1.0")
    assert "VacateReason" not in ad and "VacateReasonCode" not in ad
    q.job_evicted("1.0")  # no reason known: none is made up
    assert "VacateReason" not in q.get("1.0")


def test_update_moves_only_between_runtime_states(q: JobQueue) -> None:
    q.submit(ALICE, job())
    q.job_started("1.0")
    q.update("1.0", {"JobStatus": 7, "RemoteHost": "slot1@ep"})
    ad = q.get("1.0")
    assert (ad["JobStatus"], ad["LastJobStatus"], ad["RemoteHost"]) == (7, 2, "slot1@ep")
    with pytest.raises(InvalidTransition, match="Suspended -> TransferringOutput"):
        q.update("1.0", {"JobStatus": 6})
    with pytest.raises(QueueError, match="own call"):
        q.update("1.0", {"JobStatus": 4})
    with pytest.raises(ProtectedAttribute):
        q.update("1.0", {"Owner": "bob"})
    q.update("1.0", {"JobStatus": 2})
    q.update("1.0", {"JobStatus": 6})
    assert q.job_exited("1.0", 0).value == "completed"


def test_update_many_refuses_each_job_on_its_own_in_one_transaction(q: JobQueue) -> None:
    q.submit(ALICE, job(), 4)
    q.job_started("1.1")
    before = q.last_seq

    errors = q.update_many(
        [
            ("1.0", {"GridJobId": "a"}),
            ("1.1", {"JobStatus": 7, "RemoteHost": "slot1@ep"}),
            ("1.2", {"Owner": "bob", "GridJobId": "not kept"}),
            ("9.0", {"GridJobId": "nobody"}),
            ("1.3", {"JobStatus": 99}),
            ("1.0", {"GridJobSubmitTime": 5}),
        ]
    )

    assert [type(error).__name__ if error else None for error in errors] == [
        None,
        None,
        "ProtectedAttribute",
        "JobNotFound",
        "InvalidTransition",
        None,
    ]
    assert "no JobStatus 99" in str(errors[4])
    first = q.get("1.0")
    assert (first["GridJobId"], first["GridJobSubmitTime"]) == ("a", 5)
    assert (q.get("1.1")["JobStatus"], q.get("1.1")["RemoteHost"]) == (7, "slot1@ep")
    assert "GridJobId" not in q.get("1.2")  # nothing of a refused job's update is kept
    changed = [job for change in q.changes_since(before) for job in change.job_ids]
    assert changed == [JobId(1, 0), JobId(1, 1), JobId(1, 0)]


def test_input_staged_sets_the_times_and_releases_the_spooling_jobs_in_one_transaction(
    q: JobQueue, clock: Clock
) -> None:
    spooling = {
        "JobStatus": int(JobStatus.HELD),
        "HoldReasonCode": int(HoldReasonCode.SpoolingInput),
        "HoldReason": "Spooling input data files",
    }
    q.submit(ALICE, job(**spooling), 2)  # 1.0, 1.1: held for their input
    q.submit(ALICE, job())  # 2.0: idle, nothing to release
    q.submit(BOB, job(**spooling))  # 3.0: not alice's
    q.submit(ALICE, job())  # 4.0: held by its owner, not for its input
    q.act(JobAction.Hold, "4.0", ALICE, "wait")
    before = q.last_seq
    clock.now = T0 + 9
    times = {"StageInStart": T0 + 5, "StageInFinish": T0 + 8}

    done = q.input_staged(
        [JobId(1, 0), JobId(1, 1), JobId(2, 0), JobId(3, 0), JobId(4, 0), JobId(9, 0)],
        ALICE,
        times,
        "Data files spooled",
    )

    assert done == [JobId(1, 0), JobId(1, 1), JobId(2, 0), JobId(4, 0)]
    for jid in ("1.0", "1.1"):
        ad = q.get(jid)
        assert ad["JobStatus"] == JobStatus.IDLE
        assert ad["ReleaseReason"] == "Data files spooled"
        assert ad["LastHoldReasonCode"] == HoldReasonCode.SpoolingInput
        assert (ad["StageInStart"], ad["StageInFinish"]) == (T0 + 5, T0 + 8)
        assert ad["EnteredCurrentStatus"] == T0 + 9
    assert q.get("2.0")["JobStatus"] == JobStatus.IDLE
    assert q.get("2.0")["StageInFinish"] == T0 + 8
    assert q.get("3.0")["JobStatus"] == JobStatus.HELD  # bob's: untouched
    assert "StageInFinish" not in q.get("3.0")
    held = q.get("4.0")  # its owner's hold stands
    assert (held["JobStatus"], held["HoldReason"]) == (JobStatus.HELD, "wait")
    changes = q.changes_since(before)
    # 1.0 and 1.1 were released alike: one change of the two (see test_queue_feed).
    assert [(c.job_ids, c.status) for c in changes] == [
        ([JobId(1, 0), JobId(1, 1)], JobStatus.IDLE),
        ([JobId(2, 0)], JobStatus.IDLE),
        ([JobId(4, 0)], JobStatus.HELD),
    ]
    assert len({c.seq for c in changes}) == 3


def test_an_edit_does_not_change_what_other_readers_of_the_same_ad_see(q: JobQueue) -> None:
    # Ads decoded from the same stored text are shared between readers.
    q.submit(ALICE, job(), [classad.ClassAd({"Note": "a"}) for _ in range(3)])
    first, again = q.get("1.0"), q.query("ProcId == 0")[0]
    q.edit(["1.0"], {"Note": '"b"'}, ALICE)
    q.update("1.1", {"RemoteHost": "slot1@ep"})
    assert (first["Note"], again["Note"]) == ("a", "a")
    assert "RemoteHost" not in first
    assert [ad["Note"] for ad in q.query()] == ["b", "a", "a"]
    assert q.get("1.1")["RemoteHost"] == "slot1@ep"
    assert "RemoteHost" not in q.get("1.2")


def test_the_transition_table_is_enforced_everywhere() -> None:
    for old, new in itertools.product(JobStatus, JobStatus):
        if new in TRANSITIONS[old]:
            check_transition("1.0", old, new, "change")
        else:
            with pytest.raises(InvalidTransition, match=f"{old.label} -> {new.label}"):
                check_transition("1.0", old, new, "change")
    assert TRANSITIONS[JobStatus.REMOVED] == frozenset()
    assert JobStatus.TRANSFERRING_OUTPUT.label == "TransferringOutput"
    assert [int(s) for s in JobStatus] == [1, 2, 3, 4, 5, 6, 7]


def test_hold_codes_are_htcondors() -> None:
    codes = {c.name: int(c) for c in HoldReasonCode}
    assert codes["SubmittedOnHold"] == 15
    assert codes["JobPolicy"] == 3
    assert codes["JobPolicyUndefined"] == 5
    assert codes["JobOutOfResources"] == 34
    assert HoldReasonCode(48).name == "HookShadowPrepareJobFailure"


def test_the_documented_table_is_the_table() -> None:
    """The table drawn in _status's docstring says what TRANSITIONS says."""
    labels = {s.label: s for s in JobStatus}
    drawn = {}
    for line in (status_module.__doc__ or "").splitlines():
        cells = line.split()
        if len(cells) == 8 and cells[0] in labels:
            allowed = {new for new, cell in zip(JobStatus, cells[1:], strict=True) if cell == "yes"}
            drawn[labels[cells[0]]] = allowed
    assert drawn == dict(TRANSITIONS)


def test_present_names_the_jobs_still_in_the_queue(q: JobQueue) -> None:
    q.submit(ALICE, job(), 2)
    q.job_started("1.0")
    q.job_exited("1.0", 0, by_signal=False)  # completed: it leaves for the history
    asked = {JobId(1, 0), JobId(1, 1), JobId(7, 0)}
    assert q.present(asked) == {JobId(1, 1)}
