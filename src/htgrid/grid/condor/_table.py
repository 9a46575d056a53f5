"""The condor (HTCondor-C) job's state machine: ONE Enum of states, ONE of events, ONE table.

Every way a condor job can move lives in `TRANSITIONS`; the job's code (`_job.py`) only
runs the action of the state it is in, which answers with an event. An event the table
does not list for a state is a bug (`BadTransition`).

The shape is HTCondor's CondorJob (condorjob.cpp) with one change, as in the batch type:
a fresh submit tag is committed to the job ad (SAVE_TAG) before CONDOR_JOB_SUBMIT and
travels in the remote ad, so a submit whose answer was lost is looked up by that tag
(RECOVER) instead of being sent again blindly: never two remote copies. POLL_ACTIVE is
HTCondor's GM_POLL_ACTIVE and GM_RECOVER_POLL in one: one job's status, asked directly
(after a restart, or when a bulk poll missed the job). A fresh stage in goes straight to
SUBMITTED: the remote schedd released the job with the upload, and the next bulk poll
tells (one request for all the jobs instead of one per job); a job still spooling there
goes back to POLL_ACTIVE.

    state           event               next state
    INIT            READY               START
    START           NO_ID               UNSUBMITTED
    START           HAS_TAG             RECOVER
    START           HAS_REMOTE_ID       POLL_ACTIVE
    START           COMMIT_NEEDED       DONE_COMMIT
    START           LOCAL_REMOVED       CANCEL
    START           FINISHED            DELETE
    UNSUBMITTED     WANT_SUBMIT         SAVE_TAG
    UNSUBMITTED     LOCAL_HELD          DELETE
    UNSUBMITTED     LOCAL_REMOVED       DELETE
    SAVE_TAG        SAVED               SUBMIT
    SUBMIT          SUBMIT_OK           SUBMIT_SAVE
    SUBMIT          SUBMIT_RETRY        SUBMIT
    SUBMIT          SUBMIT_REFUSED      HOLD
    SUBMIT          SUBMIT_LOST         RECOVER
    SUBMIT          LOCAL_HELD          CLEAR
    SUBMIT          LOCAL_REMOVED       CLEAR
    RECOVER         FOUND               SUBMIT_SAVE
    RECOVER         NOT_FOUND           SUBMIT
    RECOVER         LOOKUP_FAILED       RECOVER
    RECOVER         LOCAL_HELD          CLEAR
    RECOVER         LOCAL_REMOVED       CLEAR
    SUBMIT_SAVE     SAVED               STAGE_IN
    STAGE_IN        STAGED              SUBMITTED
    STAGE_IN        CALL_FAILED         STAGE_IN
    STAGE_IN        STAGE_FAILED        HOLD
    STAGE_IN        LOCAL_REMOVED       CANCEL
    POLL_ACTIVE     STATUS              SUBMITTED
    POLL_ACTIVE     SPOOLING            POLL_ACTIVE
    POLL_ACTIVE     NEEDS_STAGE_IN      STAGE_IN
    POLL_ACTIVE     CALL_FAILED         POLL_ACTIVE
    POLL_ACTIVE     REMOTE_GONE         HOLD
    POLL_ACTIVE     LOCAL_REMOVED       CANCEL
    SUBMITTED       STATUS              SUBMITTED
    SUBMITTED       REMOTE_MISSING      POLL_ACTIVE
    SUBMITTED       SPOOLING            POLL_ACTIVE
    SUBMITTED       REMOTE_DONE         STAGE_OUT
    SUBMITTED       REMOTE_HELD         HOLD
    SUBMITTED       REMOTE_GONE         HOLD
    SUBMITTED       RELEASE_NEEDED      RELEASE_REMOTE
    SUBMITTED       LOCAL_HELD          HOLD_REMOTE
    SUBMITTED       BOTH_HELD           DELETE
    SUBMITTED       LOCAL_REMOVED       CANCEL
    SUBMITTED       PROXY_NEWER         REFRESH_PROXY
    REFRESH_PROXY   REFRESHED           SUBMITTED
    REFRESH_PROXY   CALL_FAILED         SUBMITTED
    HOLD_REMOTE     HELD_THERE          DELETE
    HOLD_REMOTE     CALL_FAILED         HOLD_REMOTE
    HOLD_REMOTE     LOCAL_RELEASED      POLL_ACTIVE
    HOLD_REMOTE     LOCAL_REMOVED       CANCEL
    RELEASE_REMOTE  RELEASED_THERE      POLL_ACTIVE
    RELEASE_REMOTE  CALL_FAILED         RELEASE_REMOTE
    RELEASE_REMOTE  LOCAL_HELD          POLL_ACTIVE
    RELEASE_REMOTE  LOCAL_REMOVED       CANCEL
    STAGE_OUT       STAGED              DONE_SAVE
    STAGE_OUT       CALL_FAILED         STAGE_OUT
    STAGE_OUT       STAGE_FAILED        HOLD
    STAGE_OUT       LOCAL_REMOVED       CANCEL
    DONE_SAVE       SAVED               DONE_COMMIT
    DONE_COMMIT     CLEANED             DELETE
    DONE_COMMIT     CLEANED_AGAIN       CLEAR
    HOLD            CANCEL_NEEDED       CANCEL
    HOLD            KEEP_REMOTE         DELETE
    HOLD            NOTHING_TO_CANCEL   CLEAR
    CANCEL          CANCELLED           CLEAR
    CANCEL          CANCELLED_REMOVED   DELETE
    CANCEL          CANCEL_FAILED       CANCEL
    CLEAR           RESUBMIT            UNSUBMITTED
    CLEAR           CLEARED             DELETE

(`tests/grid/test_condor_table.py` checks this drawing against the table.)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from htgrid.grid._table import Table, stops

__all__ = ["TABLE", "TRANSITIONS", "CondorEvent", "CondorState"]


class CondorState(enum.Enum):
    """Where an HTCondor-C job is in the grid manager (HTCondor's GM_* states)."""

    INIT = "init"  # waiting for the resource's first ping
    START = "start"  # deciding from GridJobId and the submit tag
    UNSUBMITTED = "unsubmitted"  # nothing at the remote schedd
    SAVE_TAG = "save_tag"  # committing a fresh submit tag before submitting
    SUBMIT = "submit"  # waiting for a submit slot, then CONDOR_JOB_SUBMIT
    RECOVER = "recover"  # a submit's answer was lost: look the tag up remotely
    SUBMIT_SAVE = "submit_save"  # committing GridJobId = condor <schedd> <pool> <c.p>
    STAGE_IN = "stage_in"  # CONDOR_JOB_STAGE_IN: the input sandbox; the remote releases it
    POLL_ACTIVE = "poll_active"  # this one job's status, asked directly
    SUBMITTED = "submitted"  # the resource's bulk poll reports on it
    REFRESH_PROXY = "refresh_proxy"  # CONDOR_JOB_REFRESH_PROXY: the X.509 proxy, renewed here
    HOLD_REMOTE = "hold_remote"  # held here: CONDOR_JOB_HOLD there
    RELEASE_REMOTE = "release_remote"  # released here: CONDOR_JOB_RELEASE there
    STAGE_OUT = "stage_out"  # CONDOR_JOB_STAGE_OUT: the output back into the local Iwd
    DONE_SAVE = "done_save"  # the exit code and completion to the local queue
    DONE_COMMIT = "done_commit"  # LeaveJobInQueue = false: the remote copy may go
    HOLD = "hold"  # putting the local job on hold with its reason
    CANCEL = "cancel"  # CONDOR_JOB_REMOVE
    CLEAR = "clear"  # forgetting the submission: GridJobId and the tag cleared
    DELETE = "delete"  # done: destroy a removed job, hand a held one back to the queue


class CondorEvent(enum.Enum):
    """What a state's action found."""

    READY = "ready"
    NO_ID = "no_id"
    HAS_TAG = "has_tag"
    HAS_REMOTE_ID = "has_remote_id"
    COMMIT_NEEDED = "commit_needed"
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
    STAGED = "staged"
    STAGE_FAILED = "stage_failed"
    CALL_FAILED = "call_failed"
    STATUS = "status"
    SPOOLING = "spooling"
    NEEDS_STAGE_IN = "needs_stage_in"
    REMOTE_MISSING = "remote_missing"
    REMOTE_DONE = "remote_done"
    REMOTE_HELD = "remote_held"
    REMOTE_GONE = "remote_gone"
    RELEASE_NEEDED = "release_needed"
    BOTH_HELD = "both_held"
    HELD_THERE = "held_there"
    RELEASED_THERE = "released_there"
    LOCAL_RELEASED = "local_released"
    CLEANED = "cleaned"
    CLEANED_AGAIN = "cleaned_again"
    CANCEL_NEEDED = "cancel_needed"
    KEEP_REMOTE = "keep_remote"
    NOTHING_TO_CANCEL = "nothing_to_cancel"
    CANCELLED = "cancelled"
    CANCELLED_REMOVED = "cancelled_removed"
    CANCEL_FAILED = "cancel_failed"
    RESUBMIT = "resubmit"
    CLEARED = "cleared"
    LOCAL_HELD = "local_held"
    LOCAL_REMOVED = "local_removed"
    PROXY_NEWER = "proxy_newer"
    REFRESHED = "refreshed"


_S = CondorState
_E = CondorEvent

TRANSITIONS: Final[Mapping[CondorState, Mapping[CondorEvent, CondorState]]] = {
    _S.INIT: {_E.READY: _S.START},
    _S.START: {
        _E.NO_ID: _S.UNSUBMITTED,
        _E.HAS_TAG: _S.RECOVER,
        _E.HAS_REMOTE_ID: _S.POLL_ACTIVE,
        _E.COMMIT_NEEDED: _S.DONE_COMMIT,
        _E.LOCAL_REMOVED: _S.CANCEL,
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
    _S.SUBMIT_SAVE: {_E.SAVED: _S.STAGE_IN},
    _S.STAGE_IN: {
        _E.STAGED: _S.SUBMITTED,
        _E.CALL_FAILED: _S.STAGE_IN,
        _E.STAGE_FAILED: _S.HOLD,
        _E.LOCAL_REMOVED: _S.CANCEL,
    },
    _S.POLL_ACTIVE: {
        _E.STATUS: _S.SUBMITTED,
        _E.SPOOLING: _S.POLL_ACTIVE,
        _E.NEEDS_STAGE_IN: _S.STAGE_IN,
        _E.CALL_FAILED: _S.POLL_ACTIVE,
        _E.REMOTE_GONE: _S.HOLD,
        _E.LOCAL_REMOVED: _S.CANCEL,
    },
    _S.SUBMITTED: {
        _E.STATUS: _S.SUBMITTED,
        _E.REMOTE_MISSING: _S.POLL_ACTIVE,
        _E.SPOOLING: _S.POLL_ACTIVE,
        _E.REMOTE_DONE: _S.STAGE_OUT,
        _E.REMOTE_HELD: _S.HOLD,
        _E.REMOTE_GONE: _S.HOLD,
        _E.RELEASE_NEEDED: _S.RELEASE_REMOTE,
        _E.LOCAL_HELD: _S.HOLD_REMOTE,
        _E.BOTH_HELD: _S.DELETE,
        _E.LOCAL_REMOVED: _S.CANCEL,
        _E.PROXY_NEWER: _S.REFRESH_PROXY,
    },
    _S.REFRESH_PROXY: {_E.REFRESHED: _S.SUBMITTED, _E.CALL_FAILED: _S.SUBMITTED},
    _S.HOLD_REMOTE: {
        _E.HELD_THERE: _S.DELETE,
        _E.CALL_FAILED: _S.HOLD_REMOTE,
        _E.LOCAL_RELEASED: _S.POLL_ACTIVE,
        _E.LOCAL_REMOVED: _S.CANCEL,
    },
    _S.RELEASE_REMOTE: {
        _E.RELEASED_THERE: _S.POLL_ACTIVE,
        _E.CALL_FAILED: _S.RELEASE_REMOTE,
        _E.LOCAL_HELD: _S.POLL_ACTIVE,
        _E.LOCAL_REMOVED: _S.CANCEL,
    },
    _S.STAGE_OUT: {
        _E.STAGED: _S.DONE_SAVE,
        _E.CALL_FAILED: _S.STAGE_OUT,
        _E.STAGE_FAILED: _S.HOLD,
        _E.LOCAL_REMOVED: _S.CANCEL,
    },
    _S.DONE_SAVE: {_E.SAVED: _S.DONE_COMMIT},
    _S.DONE_COMMIT: {_E.CLEANED: _S.DELETE, _E.CLEANED_AGAIN: _S.CLEAR},
    _S.HOLD: {
        _E.CANCEL_NEEDED: _S.CANCEL,
        _E.KEEP_REMOTE: _S.DELETE,
        _E.NOTHING_TO_CANCEL: _S.CLEAR,
    },
    _S.CANCEL: {
        _E.CANCELLED: _S.CLEAR,
        _E.CANCELLED_REMOVED: _S.DELETE,
        _E.CANCEL_FAILED: _S.CANCEL,
    },
    _S.CLEAR: {_E.RESUBMIT: _S.UNSUBMITTED, _E.CLEARED: _S.DELETE},
    _S.DELETE: {},
}


TABLE: Final = Table("condor", _E, TRANSITIONS, _S.INIT, frozenset({_S.DELETE}), 16)
