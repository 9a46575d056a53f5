"""The ARC job's state machine: ONE Enum of states, ONE of events, ONE transition table.

The shape is HTCondor's ArcJob (arcjob.cpp: DELEGATE_PROXY, SUBMIT, SUBMIT_SAVE, STAGE_IN,
SUBMITTED, EXIT_INFO, STAGE_OUT, DONE_SAVE, DONE_COMMIT, CANCEL, CANCEL_CLEAN), with one
step HTCondor lacks: the job's name at the CE (ArcJobName, a fresh tag) is committed
before ARC_JOB_NEW (SAVE_NAME), so that a submit whose answer was lost, or a grid manager
killed between the submit and its save, is looked up by name (CHECK) and never made
twice. An ACCEPTED job stays SUBMITTED however long the CE's information provider takes.
CANCEL kills the CE's job and cleans it (HTCondor's CANCEL then CANCEL_CLEAN). A finished
job's session is removed from the CE (CLEAN) once its output is back and BEFORE its exit
goes into the queue (HTCondor cleans after): a job that left the queue has nothing left
at the CE. CLEAN first commits the exit code (ArcExitCode), so that a grid manager killed
between the clean and the exit finds it (START: HAS_EXIT) and completes the job.

    state         event               next state
    INIT          READY               START
    START         NO_NAME             UNSUBMITTED
    START         HAS_NAME            CHECK
    START         HAS_JOB             STAGE_IN
    START         HAS_EXIT            CLEAN
    START         FINISHED            DELETE
    UNSUBMITTED   WANT_SUBMIT         SAVE_NAME
    UNSUBMITTED   LOCAL_HELD          DELETE
    UNSUBMITTED   LOCAL_REMOVED       DELETE
    SAVE_NAME     SAVED               DELEGATE
    DELEGATE      DELEGATED           SUBMIT
    DELEGATE      SUBMIT_REFUSED      HOLD
    DELEGATE      SUBMIT_RETRY        DELEGATE
    DELEGATE      LOCAL_HELD          CLEAR
    DELEGATE      LOCAL_REMOVED       CLEAR
    SUBMIT        SUBMIT_OK           SUBMIT_SAVE
    SUBMIT        SUBMIT_REFUSED      HOLD
    SUBMIT        SUBMIT_RETRY        CHECK
    SUBMIT        SUBMIT_UNSURE       CHECK
    SUBMIT        LOCAL_HELD          CLEAR
    SUBMIT        LOCAL_REMOVED       CLEAR
    CHECK         FOUND               SUBMIT_SAVE
    CHECK         NOT_FOUND           DELEGATE
    CHECK         LOCAL_HELD          CLEAR
    CHECK         LOCAL_REMOVED       CLEAR
    SUBMIT_SAVE   SAVED               STAGE_IN
    STAGE_IN      STAGED              SUBMITTED
    STAGE_IN      SUBMIT_RETRY        STAGE_IN
    STAGE_IN      STAGE_FAILED        CANCEL
    STAGE_IN      LOCAL_HELD          CANCEL
    STAGE_IN      LOCAL_REMOVED       CANCEL
    SUBMITTED     STATUS              SUBMITTED
    SUBMITTED     ENDED               EXIT_INFO
    SUBMITTED     JOB_FAILED          CANCEL
    SUBMITTED     LOCAL_HELD          CANCEL
    SUBMITTED     LOCAL_REMOVED       CANCEL
    EXIT_INFO     EXIT_KNOWN          STAGE_OUT
    EXIT_INFO     SUBMIT_RETRY        EXIT_INFO
    EXIT_INFO     JOB_FAILED          CANCEL
    EXIT_INFO     LOCAL_HELD          CANCEL
    EXIT_INFO     LOCAL_REMOVED       CANCEL
    STAGE_OUT     STAGED              CLEAN
    STAGE_OUT     SUBMIT_RETRY        STAGE_OUT
    STAGE_OUT     STAGE_FAILED        CANCEL
    STAGE_OUT     LOCAL_HELD          CANCEL
    STAGE_OUT     LOCAL_REMOVED       CANCEL
    CLEAN         CLEANED             DONE_SAVE
    CLEAN         CANCEL_FAILED       CLEAN
    CLEAN         LOCAL_HELD          CANCEL
    CLEAN         LOCAL_REMOVED       CANCEL
    DONE_SAVE     EXITED              DELETE
    DONE_SAVE     REQUEUED            CLEAR
    DONE_SAVE     POLICY_HELD         CLEAR
    DONE_SAVE     LOCAL_HELD          CLEAR
    DONE_SAVE     LOCAL_REMOVED       DELETE
    CANCEL        CANCELLED           CLEAR
    CANCEL        CANCELLED_REMOVED   DELETE
    CANCEL        CANCEL_FAILED       CANCEL
    HOLD          CANCEL_NEEDED       CANCEL
    HOLD          NOTHING_TO_CANCEL   CLEAR
    CLEAR         RESUBMIT            UNSUBMITTED
    CLEAR         CLEARED             DELETE

(`tests/grid/test_arc_table.py` checks this drawing against the table.)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from htgrid.grid._table import Table, stops

__all__ = ["TABLE", "TRANSITIONS", "ArcEvent", "ArcState"]


class ArcState(enum.Enum):
    """Where an ARC job is in the grid manager (HTCondor's GM_* states of ArcJob)."""

    INIT = "init"  # waiting for the GAHP server and the resource's first ping
    START = "start"  # deciding from GridJobId and ArcJobName: fresh, recovery, submitted
    UNSUBMITTED = "unsubmitted"  # nothing at the CE; waiting for a submit slot
    SAVE_NAME = "save_name"  # committing ArcJobName before anything is sent
    DELEGATE = "delegate"  # ARC_DELEGATION_NEW: the job's proxy delegated to the CE
    SUBMIT = "submit"  # ARC_JOB_NEW with the job's ADL
    CHECK = "check"  # did an earlier submit land? the CE's jobs are looked up by name
    SUBMIT_SAVE = "submit_save"  # committing GridJobId = arc <url> <id>; 027
    STAGE_IN = "stage_in"  # ARC_JOB_STAGE_IN: the input files into the session directory
    SUBMITTED = "submitted"  # the resource's ARC_JOB_STATUS_ALL reports on the job
    EXIT_INFO = "exit_info"  # ARC_JOB_INFO: the exit code, or why the job failed
    STAGE_OUT = "stage_out"  # ARC_JOB_STAGE_OUT: stdout, stderr and output files back
    CLEAN = "clean"  # ArcExitCode committed, then ARC_JOB_CLEAN: the session removed
    DONE_SAVE = "done_save"  # the job's exit into the queue
    CANCEL = "cancel"  # ARC_JOB_KILL then ARC_JOB_CLEAN
    HOLD = "hold"  # putting the job on hold with its reason
    CLEAR = "clear"  # forgetting the submission: GridJobId, ArcJobName... cleared
    DELETE = "delete"  # done: destroy a removed job, hand a held one back to the queue


class ArcEvent(enum.Enum):
    """What a state's action found."""

    READY = "ready"
    NO_NAME = "no_name"
    HAS_NAME = "has_name"
    HAS_JOB = "has_job"
    HAS_EXIT = "has_exit"
    FINISHED = "finished"
    WANT_SUBMIT = "want_submit"
    SAVED = "saved"
    DELEGATED = "delegated"
    SUBMIT_OK = "submit_ok"
    SUBMIT_REFUSED = "submit_refused"
    SUBMIT_RETRY = "submit_retry"
    SUBMIT_UNSURE = "submit_unsure"
    FOUND = "found"
    NOT_FOUND = "not_found"
    STAGED = "staged"
    STAGE_FAILED = "stage_failed"
    STATUS = "status"
    ENDED = "ended"
    JOB_FAILED = "job_failed"
    EXIT_KNOWN = "exit_known"
    EXITED = "exited"
    REQUEUED = "requeued"
    POLICY_HELD = "policy_held"
    CLEANED = "cleaned"
    CANCELLED = "cancelled"
    CANCELLED_REMOVED = "cancelled_removed"
    CANCEL_FAILED = "cancel_failed"
    CANCEL_NEEDED = "cancel_needed"
    NOTHING_TO_CANCEL = "nothing_to_cancel"
    RESUBMIT = "resubmit"
    CLEARED = "cleared"
    LOCAL_HELD = "local_held"
    LOCAL_REMOVED = "local_removed"


_S = ArcState
_E = ArcEvent

TRANSITIONS: Final[Mapping[ArcState, Mapping[ArcEvent, ArcState]]] = {
    _S.INIT: {_E.READY: _S.START},
    _S.START: {
        _E.NO_NAME: _S.UNSUBMITTED,
        _E.HAS_NAME: _S.CHECK,
        _E.HAS_JOB: _S.STAGE_IN,
        _E.HAS_EXIT: _S.CLEAN,
        _E.FINISHED: _S.DELETE,
    },
    _S.UNSUBMITTED: {_E.WANT_SUBMIT: _S.SAVE_NAME, **stops(_E, _S.DELETE)},
    _S.SAVE_NAME: {_E.SAVED: _S.DELEGATE},
    _S.DELEGATE: {
        _E.DELEGATED: _S.SUBMIT,
        _E.SUBMIT_REFUSED: _S.HOLD,
        _E.SUBMIT_RETRY: _S.DELEGATE,
        **stops(_E, _S.CLEAR),
    },
    _S.SUBMIT: {
        _E.SUBMIT_OK: _S.SUBMIT_SAVE,
        _E.SUBMIT_REFUSED: _S.HOLD,
        _E.SUBMIT_RETRY: _S.CHECK,
        _E.SUBMIT_UNSURE: _S.CHECK,
        **stops(_E, _S.CLEAR),
    },
    _S.CHECK: {
        _E.FOUND: _S.SUBMIT_SAVE,
        _E.NOT_FOUND: _S.DELEGATE,
        **stops(_E, _S.CLEAR),
    },
    _S.SUBMIT_SAVE: {_E.SAVED: _S.STAGE_IN},
    _S.STAGE_IN: {
        _E.STAGED: _S.SUBMITTED,
        _E.SUBMIT_RETRY: _S.STAGE_IN,
        _E.STAGE_FAILED: _S.CANCEL,
        **stops(_E, _S.CANCEL),
    },
    _S.SUBMITTED: {
        _E.STATUS: _S.SUBMITTED,
        _E.ENDED: _S.EXIT_INFO,
        _E.JOB_FAILED: _S.CANCEL,
        **stops(_E, _S.CANCEL),
    },
    _S.EXIT_INFO: {
        _E.EXIT_KNOWN: _S.STAGE_OUT,
        _E.SUBMIT_RETRY: _S.EXIT_INFO,
        _E.JOB_FAILED: _S.CANCEL,
        **stops(_E, _S.CANCEL),
    },
    _S.STAGE_OUT: {
        _E.STAGED: _S.CLEAN,
        _E.SUBMIT_RETRY: _S.STAGE_OUT,
        _E.STAGE_FAILED: _S.CANCEL,
        **stops(_E, _S.CANCEL),
    },
    _S.CLEAN: {
        _E.CLEANED: _S.DONE_SAVE,
        _E.CANCEL_FAILED: _S.CLEAN,
        **stops(_E, _S.CANCEL),
    },
    _S.DONE_SAVE: {
        _E.EXITED: _S.DELETE,
        _E.REQUEUED: _S.CLEAR,
        _E.POLICY_HELD: _S.CLEAR,
        _E.LOCAL_HELD: _S.CLEAR,
        _E.LOCAL_REMOVED: _S.DELETE,
    },
    _S.CANCEL: {
        _E.CANCELLED: _S.CLEAR,
        _E.CANCELLED_REMOVED: _S.DELETE,
        _E.CANCEL_FAILED: _S.CANCEL,
    },
    _S.HOLD: {_E.CANCEL_NEEDED: _S.CANCEL, _E.NOTHING_TO_CANCEL: _S.CLEAR},
    _S.CLEAR: {_E.RESUBMIT: _S.UNSUBMITTED, _E.CLEARED: _S.DELETE},
    _S.DELETE: {},
}


TABLE: Final = Table("arc", _E, TRANSITIONS, _S.INIT, frozenset({_S.DELETE}), 14)
