"""The Azure job's state machine: ONE Enum of states, ONE of events, ONE transition table.

Every way an Azure job can move lives in `TRANSITIONS`; the job's code (`_job.py`)
only runs the action of the state it is in, which answers with an event. An event the
table does not list for a state is a bug (`BadTransition`).

The shape is HTCondor's AzureJob (azurejob.cpp): the VM's name is committed to GridJobId
(SAVE_NAME) before AZURE_VM_CREATE, and a job found with a name but no AzureVmId, or
whose create got no answer, waits for the resource's next AZURE_VM_LIST (CHECK, HTCondor's
GM_CHECK_SUBMISSION) rather than creating blindly. A VM that stops, is deallocated or
disappears ends the job: it is deleted first (CANCEL, which also removes its NIC, IP and
disks), then the job completes (DONE_SAVE). HTCondor completes first; deleting first
means a job never leaves the queue while its VM still costs money. A removal or a hold
deletes the VM too.

    state         event               next state
    INIT          READY               START
    START         NO_NAME             UNSUBMITTED
    START         HAS_NAME            CHECK
    START         HAS_VM              SUBMITTED
    START         FINISHED            DELETE
    UNSUBMITTED   WANT_SUBMIT         SAVE_NAME
    UNSUBMITTED   LOCAL_HELD          DELETE
    UNSUBMITTED   LOCAL_REMOVED       DELETE
    SAVE_NAME     SAVED               CREATE
    CREATE        CREATE_OK           CREATE_SAVE
    CREATE        SUBMIT_REFUSED      HOLD
    CREATE        SUBMIT_RETRY        CHECK
    CREATE        CREATE_UNSURE       CHECK
    CREATE        LOCAL_HELD          CLEAR
    CREATE        LOCAL_REMOVED       CLEAR
    CHECK         FOUND               CREATE_SAVE
    CHECK         NOT_FOUND           CREATE
    CHECK         LOCAL_HELD          CLEAR
    CHECK         LOCAL_REMOVED       CLEAR
    CREATE_SAVE   SAVED               SUBMITTED
    SUBMITTED     STATUS              SUBMITTED
    SUBMITTED     VM_ENDED            CANCEL
    SUBMITTED     VM_FAILED           HOLD
    SUBMITTED     LOCAL_HELD          CANCEL
    SUBMITTED     LOCAL_REMOVED       CANCEL
    CANCEL        CANCELLED           CLEAR
    CANCEL        CANCELLED_REMOVED   DELETE
    CANCEL        CANCELLED_DONE      DONE_SAVE
    CANCEL        CANCEL_FAILED       CANCEL
    DONE_SAVE     EXITED              DELETE
    DONE_SAVE     REQUEUED            CLEAR
    DONE_SAVE     POLICY_HELD         CLEAR
    DONE_SAVE     LOCAL_HELD          CLEAR
    DONE_SAVE     LOCAL_REMOVED       DELETE
    HOLD          CANCEL_NEEDED       CANCEL
    HOLD          NOTHING_TO_CANCEL   CLEAR
    CLEAR         RESUBMIT            UNSUBMITTED
    CLEAR         CLEARED             DELETE

(`tests/grid/test_azure_table.py` checks this drawing against the table.)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from htgrid.grid._table import Table, stops

__all__ = ["TABLE", "TRANSITIONS", "AzureEvent", "AzureState"]


class AzureState(enum.Enum):
    """Where an Azure job is in the grid manager (HTCondor's GM_* states of AzureJob)."""

    INIT = "init"  # waiting for the GAHP server and the resource's first ping
    START = "start"  # deciding from GridJobId and AzureVmId: fresh, recovery, or created
    UNSUBMITTED = "unsubmitted"  # no VM; waiting for a submit slot
    SAVE_NAME = "save_name"  # committing GridJobId = azure <vm name> before the create
    CREATE = "create"  # AZURE_VM_CREATE
    CHECK = "check"  # did an earlier create land? the next AZURE_VM_LIST says
    CREATE_SAVE = "create_save"  # committing AzureVmId and VmIpAddress; 027
    SUBMITTED = "submitted"  # the VM exists; the resource's bulk list reports on it
    CANCEL = "cancel"  # AZURE_VM_DELETE (before the job may leave the queue)
    DONE_SAVE = "done_save"  # the VM ended and is deleted: the job completes
    HOLD = "hold"  # putting the job on hold with its reason
    CLEAR = "clear"  # forgetting the VM: GridJobId, AzureVmId... cleared
    DELETE = "delete"  # done: destroy a removed job, hand a held one back to the queue


class AzureEvent(enum.Enum):
    """What a state's action found."""

    READY = "ready"
    NO_NAME = "no_name"
    HAS_NAME = "has_name"
    HAS_VM = "has_vm"
    FINISHED = "finished"
    WANT_SUBMIT = "want_submit"
    SAVED = "saved"
    CREATE_OK = "create_ok"
    SUBMIT_REFUSED = "submit_refused"
    SUBMIT_RETRY = "submit_retry"
    CREATE_UNSURE = "create_unsure"
    FOUND = "found"
    NOT_FOUND = "not_found"
    STATUS = "status"
    VM_ENDED = "vm_ended"
    VM_FAILED = "vm_failed"
    CANCELLED = "cancelled"
    CANCELLED_REMOVED = "cancelled_removed"
    CANCELLED_DONE = "cancelled_done"
    CANCEL_FAILED = "cancel_failed"
    EXITED = "exited"
    REQUEUED = "requeued"
    POLICY_HELD = "policy_held"
    CANCEL_NEEDED = "cancel_needed"
    NOTHING_TO_CANCEL = "nothing_to_cancel"
    RESUBMIT = "resubmit"
    CLEARED = "cleared"
    LOCAL_HELD = "local_held"
    LOCAL_REMOVED = "local_removed"


_S = AzureState
_E = AzureEvent

TRANSITIONS: Final[Mapping[AzureState, Mapping[AzureEvent, AzureState]]] = {
    _S.INIT: {_E.READY: _S.START},
    _S.START: {
        _E.NO_NAME: _S.UNSUBMITTED,
        _E.HAS_NAME: _S.CHECK,
        _E.HAS_VM: _S.SUBMITTED,
        _E.FINISHED: _S.DELETE,
    },
    _S.UNSUBMITTED: {_E.WANT_SUBMIT: _S.SAVE_NAME, **stops(_E, _S.DELETE)},
    _S.SAVE_NAME: {_E.SAVED: _S.CREATE},
    _S.CREATE: {
        _E.CREATE_OK: _S.CREATE_SAVE,
        _E.SUBMIT_REFUSED: _S.HOLD,
        _E.SUBMIT_RETRY: _S.CHECK,
        _E.CREATE_UNSURE: _S.CHECK,
        **stops(_E, _S.CLEAR),
    },
    _S.CHECK: {
        _E.FOUND: _S.CREATE_SAVE,
        _E.NOT_FOUND: _S.CREATE,
        **stops(_E, _S.CLEAR),
    },
    _S.CREATE_SAVE: {_E.SAVED: _S.SUBMITTED},
    _S.SUBMITTED: {
        _E.STATUS: _S.SUBMITTED,
        _E.VM_ENDED: _S.CANCEL,
        _E.VM_FAILED: _S.HOLD,
        **stops(_E, _S.CANCEL),
    },
    _S.CANCEL: {
        _E.CANCELLED: _S.CLEAR,
        _E.CANCELLED_REMOVED: _S.DELETE,
        _E.CANCELLED_DONE: _S.DONE_SAVE,
        _E.CANCEL_FAILED: _S.CANCEL,
    },
    _S.DONE_SAVE: {
        _E.EXITED: _S.DELETE,
        _E.REQUEUED: _S.CLEAR,
        _E.POLICY_HELD: _S.CLEAR,
        _E.LOCAL_HELD: _S.CLEAR,
        _E.LOCAL_REMOVED: _S.DELETE,
    },
    _S.HOLD: {_E.CANCEL_NEEDED: _S.CANCEL, _E.NOTHING_TO_CANCEL: _S.CLEAR},
    _S.CLEAR: {_E.RESUBMIT: _S.UNSUBMITTED, _E.CLEARED: _S.DELETE},
    _S.DELETE: {},
}


TABLE: Final = Table("azure", _E, TRANSITIONS, _S.INIT, frozenset({_S.DELETE}), 14)
