"""The batch job's state machine: ONE Enum of states, ONE of events, ONE transition table.

Rule 1 (h11's): every way a batch job can move lives in `TRANSITIONS`; the job's code
(`_job.py`) only runs the action of the state it is in, which answers with an event.
An event the table does not list for a state is a bug (`BadTransition`), never a guess.

The shape is HTCondor's INFNBatchJob (infnbatchjob.cpp) with one change: the submission's
tag is committed to the job ad (SAVE_TAG) before BLAH_JOB_SUBMIT, and a submit whose answer
was lost is looked up by that tag (RECOVER) instead of being sent again blindly.

    state         event               next state
    INIT          READY               START
    START         NO_ID               UNSUBMITTED
    START         HAS_TAG             RECOVER
    START         HAS_BLAH_ID         SUBMITTED
    START         FINISHED            DELETE
    UNSUBMITTED   WANT_SUBMIT         SAVE_TAG
    UNSUBMITTED   LOCAL_HELD          DELETE
    UNSUBMITTED   LOCAL_REMOVED       DELETE
    SAVE_TAG      SAVED               SUBMIT
    SUBMIT        SUBMIT_OK           SUBMIT_SAVE
    SUBMIT        SUBMIT_RETRY        SUBMIT
    SUBMIT        SUBMIT_REFUSED      HOLD
    SUBMIT        SUBMIT_LOST         RECOVER
    SUBMIT        LOCAL_HELD          CLEAR
    SUBMIT        LOCAL_REMOVED       CLEAR
    RECOVER       FOUND               SUBMIT_SAVE
    RECOVER       NOT_FOUND           SUBMIT
    RECOVER       LOOKUP_FAILED       RECOVER
    RECOVER       LOCAL_HELD          CLEAR
    RECOVER       LOCAL_REMOVED       CLEAR
    SUBMIT_SAVE   SAVED               SUBMITTED
    SUBMITTED     STATUS              SUBMITTED
    SUBMITTED     REMOTE_DONE         DONE_SAVE
    SUBMITTED     REMOTE_GONE         HOLD
    SUBMITTED     REMOTE_HELD         HOLD
    SUBMITTED     REMOTE_LOST         HOLD
    SUBMITTED     LOCAL_HELD          CANCEL
    SUBMITTED     LOCAL_REMOVED       CANCEL
    DONE_SAVE     EXITED              DELETE
    DONE_SAVE     REQUEUED            CLEAR
    DONE_SAVE     POLICY_HELD         CLEAR
    DONE_SAVE     EXIT_UNKNOWN        HOLD
    DONE_SAVE     LOCAL_HELD          CLEAR
    DONE_SAVE     LOCAL_REMOVED       DELETE
    HOLD          CANCEL_NEEDED       CANCEL
    HOLD          NOTHING_TO_CANCEL   CLEAR
    CANCEL        CANCELLED           CLEAR
    CANCEL        CANCELLED_REMOVED   DELETE
    CANCEL        CANCEL_FAILED       CANCEL
    CLEAR         RESUBMIT            UNSUBMITTED
    CLEAR         CLEARED             DELETE

(`tests/grid/test_batch_table.py` checks this drawing against the table.)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from htgrid.grid._table import Table, stops

__all__ = ["TABLE", "TRANSITIONS", "BatchEvent", "BatchState"]


class BatchState(enum.Enum):
    """Where a batch job is in the grid manager (HTCondor's GM_* states)."""

    INIT = "init"  # waiting for the GAHP server and the resource's first ping
    START = "start"  # deciding from GridJobId: fresh job, recovery, or already submitted
    UNSUBMITTED = "unsubmitted"  # nothing at the batch system
    SAVE_TAG = "save_tag"  # committing GridJobId = batch <lrms> <tag> before submitting
    SUBMIT = "submit"  # waiting for a submit slot, then BLAH_JOB_SUBMIT
    RECOVER = "recover"  # a submit's answer was lost: look the tag up
    SUBMIT_SAVE = "submit_save"  # committing GridJobId with the batch job id
    SUBMITTED = "submitted"  # at the batch system; the resource's bulk poll reports on it
    DONE_SAVE = "done_save"  # the batch job ended: exit code and completion to the queue
    HOLD = "hold"  # putting the job on hold with its reason
    CANCEL = "cancel"  # BLAH_JOB_CANCEL (before a removed job may leave the queue)
    CLEAR = "clear"  # forgetting the submission: GridJobId cleared
    DELETE = "delete"  # done: destroy a removed job, hand a held one back to the queue


class BatchEvent(enum.Enum):
    """What a state's action found."""

    READY = "ready"
    NO_ID = "no_id"
    HAS_TAG = "has_tag"
    HAS_BLAH_ID = "has_blah_id"
    FINISHED = "finished"
    WANT_SUBMIT = "want_submit"
    SAVED = "saved"
    SUBMIT_OK = "submit_ok"
    SUBMIT_RETRY = "submit_retry"
    SUBMIT_REFUSED = "submit_refused"
    SUBMIT_LOST = "submit_lost"
    FOUND = "found"
    NOT_FOUND = "not_found"
    LOOKUP_FAILED = "lookup_failed"
    STATUS = "status"
    REMOTE_DONE = "remote_done"
    REMOTE_GONE = "remote_gone"
    REMOTE_HELD = "remote_held"
    REMOTE_LOST = "remote_lost"
    EXITED = "exited"
    REQUEUED = "requeued"
    POLICY_HELD = "policy_held"
    EXIT_UNKNOWN = "exit_unknown"
    CANCEL_NEEDED = "cancel_needed"
    NOTHING_TO_CANCEL = "nothing_to_cancel"
    CANCELLED = "cancelled"
    CANCELLED_REMOVED = "cancelled_removed"
    CANCEL_FAILED = "cancel_failed"
    RESUBMIT = "resubmit"
    CLEARED = "cleared"
    LOCAL_HELD = "local_held"
    LOCAL_REMOVED = "local_removed"


_S = BatchState
_E = BatchEvent

TRANSITIONS: Final[Mapping[BatchState, Mapping[BatchEvent, BatchState]]] = {
    _S.INIT: {_E.READY: _S.START},
    _S.START: {
        _E.NO_ID: _S.UNSUBMITTED,
        _E.HAS_TAG: _S.RECOVER,
        _E.HAS_BLAH_ID: _S.SUBMITTED,
        _E.FINISHED: _S.DELETE,
    },
    _S.UNSUBMITTED: {_E.WANT_SUBMIT: _S.SAVE_TAG, **stops(_E, _S.DELETE)},
    _S.SAVE_TAG: {_E.SAVED: _S.SUBMIT},
    _S.SUBMIT: {
        _E.SUBMIT_OK: _S.SUBMIT_SAVE,
        _E.SUBMIT_RETRY: _S.SUBMIT,
        _E.SUBMIT_REFUSED: _S.HOLD,
        _E.SUBMIT_LOST: _S.RECOVER,
        **stops(_E, _S.CLEAR),
    },
    _S.RECOVER: {
        _E.FOUND: _S.SUBMIT_SAVE,
        _E.NOT_FOUND: _S.SUBMIT,
        _E.LOOKUP_FAILED: _S.RECOVER,
        **stops(_E, _S.CLEAR),
    },
    _S.SUBMIT_SAVE: {_E.SAVED: _S.SUBMITTED},
    _S.SUBMITTED: {
        _E.STATUS: _S.SUBMITTED,
        _E.REMOTE_DONE: _S.DONE_SAVE,
        _E.REMOTE_GONE: _S.HOLD,
        _E.REMOTE_HELD: _S.HOLD,
        _E.REMOTE_LOST: _S.HOLD,
        **stops(_E, _S.CANCEL),
    },
    _S.DONE_SAVE: {
        _E.EXITED: _S.DELETE,
        _E.REQUEUED: _S.CLEAR,
        _E.POLICY_HELD: _S.CLEAR,
        _E.EXIT_UNKNOWN: _S.HOLD,
        _E.LOCAL_HELD: _S.CLEAR,
        _E.LOCAL_REMOVED: _S.DELETE,
    },
    _S.HOLD: {_E.CANCEL_NEEDED: _S.CANCEL, _E.NOTHING_TO_CANCEL: _S.CLEAR},
    _S.CANCEL: {
        _E.CANCELLED: _S.CLEAR,
        _E.CANCELLED_REMOVED: _S.DELETE,
        _E.CANCEL_FAILED: _S.CANCEL,
    },
    _S.CLEAR: {_E.RESUBMIT: _S.UNSUBMITTED, _E.CLEARED: _S.DELETE},
    _S.DELETE: {},
}


TABLE: Final = Table("batch", _E, TRANSITIONS, _S.INIT, frozenset({_S.DELETE}), 14)
