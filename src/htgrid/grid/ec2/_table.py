"""The ec2 job's state machine: ONE Enum of states, ONE of events, ONE transition table.

As for every grid type: the job's code (`_job.py`) runs the action of the state it
is in, the action answers with an event, and this table alone says where that leads;
a move it does not list is a bug (`BadTransition`).

The shape is HTCondor's EC2Job (ec2job.cpp): the client token is committed to GridJobId
(SAVE_TOKEN) before EC2_VM_START, and a job found with a token but no instance id looks
the token up in the resource's next EC2_VM_STATUS_ALL (SEEK) instead of starting again.
Cancelling (EC2_VM_STOP) is confirmed by a later poll (CANCEL_CHECK), as in HTCondor.

A job with EC2SpotPrice takes HTCondor's GM_SPOT_* side road between the token and the
instance (`_spot`): SPOT_START sends EC2_VM_START_SPOT with the committed token (its
launch group), SPOT_SUBMITTED follows the request in the resource's EC2_VM_STATUS_ALL_SPOT
until it is fulfilled (then SAVE_INSTANCE: an ordinary instance from there on) or fails
(HOLD, then SPOT_CANCEL if the request is still open). A token without a request id looks
the request up by token (SPOT_CHECK); rm and hold of an open request cancel it
(SPOT_CANCEL, confirmed by SPOT_CANCEL_CHECK, which adopts an instance that won the race).

    state              event               next state
    INIT               READY               START
    INIT               BAD_JOB             HOLD
    START              NO_ID               UNSUBMITTED
    START              HAS_TOKEN           SEEK
    START              HAS_INSTANCE        SUBMITTED
    START              HAS_SPOT_TOKEN      SPOT_CHECK
    START              HAS_REQUEST         SPOT_SUBMITTED
    START              FINISHED            DELETE
    UNSUBMITTED        WANT_SUBMIT         SAVE_TOKEN
    UNSUBMITTED        LOCAL_HELD          DELETE
    UNSUBMITTED        LOCAL_REMOVED       DELETE
    SAVE_TOKEN         SAVED               CREATE_KEYPAIR
    CREATE_KEYPAIR     KEYPAIR_READY       START_VM
    CREATE_KEYPAIR     SPOT_READY          SPOT_START
    CREATE_KEYPAIR     KEYPAIR_FAILED      HOLD
    CREATE_KEYPAIR     LOCAL_HELD          CLEAR
    CREATE_KEYPAIR     LOCAL_REMOVED       CLEAR
    START_VM           STARTED             SAVE_INSTANCE
    START_VM           SUBMIT_RETRY        START_VM
    START_VM           SUBMIT_REFUSED      HOLD
    START_VM           START_LOST          SEEK
    START_VM           LOCAL_HELD          CLEAR
    START_VM           LOCAL_REMOVED       CLEAR
    SEEK               FOUND               SAVE_INSTANCE
    SEEK               NOT_FOUND           CREATE_KEYPAIR
    SEEK               LOCAL_HELD          CLEAR
    SEEK               LOCAL_REMOVED       CLEAR
    SPOT_START         REQUESTED           SPOT_SUBMITTED
    SPOT_START         SUBMIT_RETRY        SPOT_START
    SPOT_START         SUBMIT_REFUSED      HOLD
    SPOT_START         START_LOST          SPOT_CHECK
    SPOT_START         LOCAL_HELD          CLEAR
    SPOT_START         LOCAL_REMOVED       CLEAR
    SPOT_CHECK         FOUND               SPOT_SUBMITTED
    SPOT_CHECK         FULFILLED           SAVE_INSTANCE
    SPOT_CHECK         NOT_FOUND           SPOT_START
    SPOT_CHECK         LOCAL_HELD          CLEAR
    SPOT_CHECK         LOCAL_REMOVED       CLEAR
    SPOT_SUBMITTED     FULFILLED           SAVE_INSTANCE
    SPOT_SUBMITTED     REQUEST_FAILED      HOLD
    SPOT_SUBMITTED     REQUEST_LOST        HOLD
    SPOT_SUBMITTED     LOCAL_HELD          SPOT_CANCEL
    SPOT_SUBMITTED     LOCAL_REMOVED       SPOT_CANCEL
    SPOT_CANCEL        STOP_SENT           SPOT_CANCEL_CHECK
    SPOT_CANCEL        STOP_FAILED         SPOT_CANCEL
    SPOT_CANCEL_CHECK  FULFILLED           SAVE_INSTANCE
    SPOT_CANCEL_CHECK  CANCELLED           CLEAR
    SPOT_CANCEL_CHECK  CANCELLED_REMOVED   DELETE
    SPOT_CANCEL_CHECK  STILL_THERE         SPOT_CANCEL
    SAVE_INSTANCE      SAVED               SUBMITTED
    SUBMITTED          STATUS              SUBMITTED
    SUBMITTED          VM_ENDED            DONE_SAVE
    SUBMITTED          VM_STOPPED          CANCEL
    SUBMITTED          VM_FAILED           HOLD
    SUBMITTED          VM_LOST             HOLD
    SUBMITTED          LOCAL_HELD          CANCEL
    SUBMITTED          LOCAL_REMOVED       CANCEL
    DONE_SAVE          EXITED              DELETE
    DONE_SAVE          REQUEUED            CLEAR
    DONE_SAVE          POLICY_HELD         CLEAR
    DONE_SAVE          LOCAL_HELD          CLEAR
    DONE_SAVE          LOCAL_REMOVED       DELETE
    HOLD               CANCEL_NEEDED       CANCEL
    HOLD               SPOT_CANCEL_NEEDED  SPOT_CANCEL
    HOLD               NOTHING_TO_CANCEL   CLEAR
    CANCEL             STOP_SENT           CANCEL_CHECK
    CANCEL             STOP_FAILED         CANCEL
    CANCEL_CHECK       CANCELLED           CLEAR
    CANCEL_CHECK       CANCELLED_REMOVED   DELETE
    CANCEL_CHECK       CANCELLED_DONE      DONE_SAVE
    CANCEL_CHECK       STILL_THERE         CANCEL
    CLEAR              RESUBMIT            UNSUBMITTED
    CLEAR              CLEARED             DELETE

(`tests/grid/test_ec2_table.py` checks this drawing against the table.)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from htgrid.grid._table import Table, stops

__all__ = ["TABLE", "TRANSITIONS", "Ec2Event", "Ec2State"]


class Ec2State(enum.Enum):
    """Where an ec2 job is in the grid manager (HTCondor's GM_* states of EC2Job)."""

    INIT = "init"  # waiting for the resource's first ping; checking the key files
    START = "start"  # deciding from GridJobId: fresh job, recovery, or already started
    UNSUBMITTED = "unsubmitted"  # no instance; waiting for a submit slot
    SAVE_TOKEN = "save_token"  # committing GridJobId = ec2 <url> <token> (and the keypair name)
    CREATE_KEYPAIR = "create_keypair"  # EC2_VM_CREATE_KEYPAIR when ec2_keypair_file asks
    START_VM = "start_vm"  # EC2_VM_START with the client token
    SEEK = "seek"  # a token without an instance id: look it up in the next status poll
    SPOT_START = "spot_start"  # EC2_VM_START_SPOT with the client token as launch group
    SPOT_CHECK = "spot_check"  # a spot token without a request id: look the request up
    SPOT_SUBMITTED = "spot_submitted"  # the request is open: the spot poll reports on it
    SPOT_CANCEL = "spot_cancel"  # EC2_VM_STOP_SPOT (cancel the request)
    SPOT_CANCEL_CHECK = "spot_cancel_check"  # waiting for a spot poll to show it cancelled
    SAVE_INSTANCE = "save_instance"  # committing GridJobId with the instance id, then 027
    SUBMITTED = "submitted"  # the instance exists; the resource's bulk poll reports on it
    DONE_SAVE = "done_save"  # the VM ended: the job completes in the queue
    HOLD = "hold"  # putting the job on hold with its reason
    CANCEL = "cancel"  # EC2_VM_STOP (terminate)
    CANCEL_CHECK = "cancel_check"  # waiting for a poll to show the instance gone
    CLEAR = "clear"  # forgetting the instance: GridJobId cleared
    DELETE = "delete"  # done: keypair destroyed, job destroyed or handed back


class Ec2Event(enum.Enum):
    """What a state's action found."""

    READY = "ready"
    BAD_JOB = "bad_job"
    NO_ID = "no_id"
    HAS_TOKEN = "has_token"
    HAS_INSTANCE = "has_instance"
    HAS_SPOT_TOKEN = "has_spot_token"
    HAS_REQUEST = "has_request"
    FINISHED = "finished"
    WANT_SUBMIT = "want_submit"
    SAVED = "saved"
    KEYPAIR_READY = "keypair_ready"
    SPOT_READY = "spot_ready"
    REQUESTED = "requested"
    FULFILLED = "fulfilled"
    REQUEST_FAILED = "request_failed"
    REQUEST_LOST = "request_lost"
    KEYPAIR_FAILED = "keypair_failed"
    STARTED = "started"
    SUBMIT_RETRY = "submit_retry"
    SUBMIT_REFUSED = "submit_refused"
    START_LOST = "start_lost"
    FOUND = "found"
    NOT_FOUND = "not_found"
    STATUS = "status"
    VM_ENDED = "vm_ended"
    VM_STOPPED = "vm_stopped"
    VM_FAILED = "vm_failed"
    VM_LOST = "vm_lost"
    EXITED = "exited"
    REQUEUED = "requeued"
    POLICY_HELD = "policy_held"
    CANCEL_NEEDED = "cancel_needed"
    SPOT_CANCEL_NEEDED = "spot_cancel_needed"
    NOTHING_TO_CANCEL = "nothing_to_cancel"
    STOP_SENT = "stop_sent"
    STOP_FAILED = "stop_failed"
    CANCELLED = "cancelled"
    CANCELLED_REMOVED = "cancelled_removed"
    CANCELLED_DONE = "cancelled_done"
    STILL_THERE = "still_there"
    RESUBMIT = "resubmit"
    CLEARED = "cleared"
    LOCAL_HELD = "local_held"
    LOCAL_REMOVED = "local_removed"


_S = Ec2State
_E = Ec2Event

TRANSITIONS: Final[Mapping[Ec2State, Mapping[Ec2Event, Ec2State]]] = {
    _S.INIT: {_E.READY: _S.START, _E.BAD_JOB: _S.HOLD},
    _S.START: {
        _E.NO_ID: _S.UNSUBMITTED,
        _E.HAS_TOKEN: _S.SEEK,
        _E.HAS_INSTANCE: _S.SUBMITTED,
        _E.HAS_SPOT_TOKEN: _S.SPOT_CHECK,
        _E.HAS_REQUEST: _S.SPOT_SUBMITTED,
        _E.FINISHED: _S.DELETE,
    },
    _S.UNSUBMITTED: {_E.WANT_SUBMIT: _S.SAVE_TOKEN, **stops(_E, _S.DELETE)},
    _S.SAVE_TOKEN: {_E.SAVED: _S.CREATE_KEYPAIR},
    _S.CREATE_KEYPAIR: {
        _E.KEYPAIR_READY: _S.START_VM,
        _E.SPOT_READY: _S.SPOT_START,
        _E.KEYPAIR_FAILED: _S.HOLD,
        **stops(_E, _S.CLEAR),
    },
    _S.START_VM: {
        _E.STARTED: _S.SAVE_INSTANCE,
        _E.SUBMIT_RETRY: _S.START_VM,
        _E.SUBMIT_REFUSED: _S.HOLD,
        _E.START_LOST: _S.SEEK,
        **stops(_E, _S.CLEAR),
    },
    _S.SEEK: {
        _E.FOUND: _S.SAVE_INSTANCE,
        _E.NOT_FOUND: _S.CREATE_KEYPAIR,
        **stops(_E, _S.CLEAR),
    },
    _S.SPOT_START: {
        _E.REQUESTED: _S.SPOT_SUBMITTED,
        _E.SUBMIT_RETRY: _S.SPOT_START,
        _E.SUBMIT_REFUSED: _S.HOLD,
        _E.START_LOST: _S.SPOT_CHECK,
        **stops(_E, _S.CLEAR),
    },
    _S.SPOT_CHECK: {
        _E.FOUND: _S.SPOT_SUBMITTED,
        _E.FULFILLED: _S.SAVE_INSTANCE,
        _E.NOT_FOUND: _S.SPOT_START,
        **stops(_E, _S.CLEAR),
    },
    _S.SPOT_SUBMITTED: {
        _E.FULFILLED: _S.SAVE_INSTANCE,
        _E.REQUEST_FAILED: _S.HOLD,
        _E.REQUEST_LOST: _S.HOLD,
        **stops(_E, _S.SPOT_CANCEL),
    },
    _S.SPOT_CANCEL: {_E.STOP_SENT: _S.SPOT_CANCEL_CHECK, _E.STOP_FAILED: _S.SPOT_CANCEL},
    _S.SPOT_CANCEL_CHECK: {
        _E.FULFILLED: _S.SAVE_INSTANCE,
        _E.CANCELLED: _S.CLEAR,
        _E.CANCELLED_REMOVED: _S.DELETE,
        _E.STILL_THERE: _S.SPOT_CANCEL,
    },
    _S.SAVE_INSTANCE: {_E.SAVED: _S.SUBMITTED},
    _S.SUBMITTED: {
        _E.STATUS: _S.SUBMITTED,
        _E.VM_ENDED: _S.DONE_SAVE,
        _E.VM_STOPPED: _S.CANCEL,
        _E.VM_FAILED: _S.HOLD,
        _E.VM_LOST: _S.HOLD,
        **stops(_E, _S.CANCEL),
    },
    _S.DONE_SAVE: {
        _E.EXITED: _S.DELETE,
        _E.REQUEUED: _S.CLEAR,
        _E.POLICY_HELD: _S.CLEAR,
        _E.LOCAL_HELD: _S.CLEAR,
        _E.LOCAL_REMOVED: _S.DELETE,
    },
    _S.HOLD: {
        _E.CANCEL_NEEDED: _S.CANCEL,
        _E.SPOT_CANCEL_NEEDED: _S.SPOT_CANCEL,
        _E.NOTHING_TO_CANCEL: _S.CLEAR,
    },
    _S.CANCEL: {_E.STOP_SENT: _S.CANCEL_CHECK, _E.STOP_FAILED: _S.CANCEL},
    _S.CANCEL_CHECK: {
        _E.CANCELLED: _S.CLEAR,
        _E.CANCELLED_REMOVED: _S.DELETE,
        _E.CANCELLED_DONE: _S.DONE_SAVE,
        _E.STILL_THERE: _S.CANCEL,
    },
    _S.CLEAR: {_E.RESUBMIT: _S.UNSUBMITTED, _E.CLEARED: _S.DELETE},
    _S.DELETE: {},
}


TABLE: Final = Table("ec2", _E, TRANSITIONS, _S.INIT, frozenset({_S.DELETE}), 19)
