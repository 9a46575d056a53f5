"""The job queue's errors: every one is a `QueueError`, itself an `HTGridError`.

QueueError
├── JobNotFound          (no such job in the queue)
├── NotAuthorized        (the identity does not own the job and is not an administrator)
├── InvalidTransition    (the status change is not in the transition table)
├── ProtectedAttribute   (an edit of ClusterId, ProcId, Owner, JobStatus, ...)
├── InvalidSubmit        (a cluster that cannot be queued as given)
├── InvalidValue         (a value the queue cannot store and read back: a NUL in a string...)
└── StoreError           (SQLite failed: disk full, locked, corrupt; wraps sqlite3.Error)

Malformed constraints and edit expressions raise `htgrid.errors.ClassAdSyntaxError`, which
carries the line and column.
"""

from __future__ import annotations

from htgrid.errors import HTGridError

__all__ = [
    "InvalidSubmit",
    "InvalidTransition",
    "InvalidValue",
    "JobNotFound",
    "NotAuthorized",
    "ProtectedAttribute",
    "QueueError",
    "StoreError",
]


class QueueError(HTGridError):
    """The job queue could not do what was asked."""


class JobNotFound(QueueError):
    """No such job in the queue."""


class NotAuthorized(QueueError):
    """The identity may not act on this job."""


class InvalidTransition(QueueError):
    """The job's status does not allow this change."""


class ProtectedAttribute(QueueError):
    """This attribute cannot be edited."""


class InvalidSubmit(QueueError):
    """The cluster cannot be queued as given."""


class InvalidValue(QueueError):
    """An attribute's value cannot be stored in the queue."""


class StoreError(QueueError):
    """The queue's database failed."""
