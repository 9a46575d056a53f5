"""The GRAM job's state machine: ONE Enum of states, ONE of events, ONE transition table.

The shape is HTCondor's GlobusJob (globusjob.cpp: GM_SUBMIT, GM_SUBMIT_SAVE,
GM_SUBMIT_COMMIT, GM_SUBMITTED, GM_DONE_SAVE, GM_DONE_COMMIT, GM_CANCEL) with GRAM's
two-phase commit: the job manager takes the request but runs nothing until COMMIT_REQUEST,
which is sent only once the job contact is in the queue (SUBMIT_SAVE). A grid manager
killed before that save leaves an uncommitted request that the job manager drops when
its commit time runs out: the job is submitted again and runs once. A request whose
answer was lost is sent again for the same reason. On restart a saved contact goes to
COMMIT, which asks the job's state first and commits only an uncommitted job.
DONE is committed to the queue (GridJobStatus) before COMMIT_END lets the job manager
forget the job (DONE_COMMIT), so a restart after it still completes the job.

    state         event               next state
    INIT          READY               START
    START         NO_CONTACT          UNSUBMITTED
    START         HAS_CONTACT         COMMIT
    START         HAS_EXIT            DONE_COMMIT
    START         FINISHED            DELETE
    UNSUBMITTED   WANT_SUBMIT         SUBMIT
    UNSUBMITTED   LOCAL_HELD          DELETE
    UNSUBMITTED   LOCAL_REMOVED       DELETE
    SUBMIT        SUBMIT_OK           SUBMIT_SAVE
    SUBMIT        SUBMIT_REFUSED      HOLD
    SUBMIT        SUBMIT_RETRY        SUBMIT
    SUBMIT        SUBMIT_UNSURE       SUBMIT
    SUBMIT        LOCAL_HELD          CLEAR
    SUBMIT        LOCAL_REMOVED       CLEAR
    SUBMIT_SAVE   SAVED               COMMIT
    COMMIT        COMMITTED           SUBMITTED
    COMMIT        SUBMIT_RETRY        COMMIT
    COMMIT        NOT_FOUND           CLEAR
    COMMIT        LOCAL_HELD          CANCEL
    COMMIT        LOCAL_REMOVED       CANCEL
    SUBMITTED     STATUS              SUBMITTED
    SUBMITTED     ENDED               DONE_COMMIT
    SUBMITTED     JOB_FAILED          CANCEL
    SUBMITTED     LOCAL_HELD          CANCEL
    SUBMITTED     LOCAL_REMOVED       CANCEL
    DONE_COMMIT   COMMITTED           DONE_SAVE
    DONE_COMMIT   SUBMIT_RETRY        DONE_COMMIT
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

(`tests/grid/test_gram.py` checks this drawing against the table.)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from htgrid.grid._table import Table, stops

__all__ = ["TABLE", "TRANSITIONS", "GramEvent", "GramState"]


class GramState(enum.Enum):
    """Where a GRAM job is in the grid manager (HTCondor's GM_* states of GlobusJob)."""

    INIT = "init"  # waiting for the GAHP server and the resource's first ping
    START = "start"  # deciding from GridJobId and GridJobStatus: fresh, recovery, done
    UNSUBMITTED = "unsubmitted"  # nothing at the job manager; waiting for a submit slot
    SUBMIT = "submit"  # GRAM_JOB_REQUEST (two-phase): the job manager holds it uncommitted
    SUBMIT_SAVE = "submit_save"  # committing GridJobId (the job contact); 027
    COMMIT = "commit"  # GRAM_JOB_SIGNAL COMMIT_REQUEST: now the job may run
    SUBMITTED = "submitted"  # GRAM_JOB_STATUS polls report on the job
    DONE_COMMIT = "done_commit"  # DONE saved, then COMMIT_END: the job manager forgets it
    DONE_SAVE = "done_save"  # the job's exit into the queue
    CANCEL = "cancel"  # GRAM_JOB_CANCEL, then COMMIT_END
    HOLD = "hold"  # putting the job on hold with its reason
    CLEAR = "clear"  # forgetting the submission: GridJobId... cleared
    DELETE = "delete"  # done: destroy a removed job, hand a held one back to the queue


class GramEvent(enum.Enum):
    """What a state's action found."""

    READY = "ready"
    NO_CONTACT = "no_contact"
    HAS_CONTACT = "has_contact"
    HAS_EXIT = "has_exit"
    FINISHED = "finished"
    WANT_SUBMIT = "want_submit"
    SUBMIT_OK = "submit_ok"
    SUBMIT_REFUSED = "submit_refused"
    SUBMIT_RETRY = "submit_retry"
    SUBMIT_UNSURE = "submit_unsure"
    SAVED = "saved"
    COMMITTED = "committed"
    NOT_FOUND = "not_found"
    STATUS = "status"
    ENDED = "ended"
    JOB_FAILED = "job_failed"
    EXITED = "exited"
    REQUEUED = "requeued"
    POLICY_HELD = "policy_held"
    CANCELLED = "cancelled"
    CANCELLED_REMOVED = "cancelled_removed"
    CANCEL_FAILED = "cancel_failed"
    CANCEL_NEEDED = "cancel_needed"
    NOTHING_TO_CANCEL = "nothing_to_cancel"
    RESUBMIT = "resubmit"
    CLEARED = "cleared"
    LOCAL_HELD = "local_held"
    LOCAL_REMOVED = "local_removed"


_S = GramState
_E = GramEvent

TRANSITIONS: Final[Mapping[GramState, Mapping[GramEvent, GramState]]] = {
    _S.INIT: {_E.READY: _S.START},
    _S.START: {
        _E.NO_CONTACT: _S.UNSUBMITTED,
        _E.HAS_CONTACT: _S.COMMIT,
        _E.HAS_EXIT: _S.DONE_COMMIT,
        _E.FINISHED: _S.DELETE,
    },
    _S.UNSUBMITTED: {_E.WANT_SUBMIT: _S.SUBMIT, **stops(_E, _S.DELETE)},
    _S.SUBMIT: {
        _E.SUBMIT_OK: _S.SUBMIT_SAVE,
        _E.SUBMIT_REFUSED: _S.HOLD,
        _E.SUBMIT_RETRY: _S.SUBMIT,
        _E.SUBMIT_UNSURE: _S.SUBMIT,
        **stops(_E, _S.CLEAR),
    },
    _S.SUBMIT_SAVE: {_E.SAVED: _S.COMMIT},
    _S.COMMIT: {
        _E.COMMITTED: _S.SUBMITTED,
        _E.SUBMIT_RETRY: _S.COMMIT,
        _E.NOT_FOUND: _S.CLEAR,
        **stops(_E, _S.CANCEL),
    },
    _S.SUBMITTED: {
        _E.STATUS: _S.SUBMITTED,
        _E.ENDED: _S.DONE_COMMIT,
        _E.JOB_FAILED: _S.CANCEL,
        **stops(_E, _S.CANCEL),
    },
    _S.DONE_COMMIT: {_E.COMMITTED: _S.DONE_SAVE, _E.SUBMIT_RETRY: _S.DONE_COMMIT},
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


TABLE: Final = Table("gram", _E, TRANSITIONS, _S.INIT, frozenset({_S.DELETE}), 14)
