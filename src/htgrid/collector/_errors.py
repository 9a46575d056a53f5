"""The collector's errors: every one is a `CollectorError`, itself an `HTGridError`.

CollectorError
├── UnknownCommand         (not an UPDATE_* / INVALIDATE_* command this collector keeps)
├── InvalidAd              (an ad the collector cannot store: no Name, the wrong MyType)
├── InvalidQuery           (a query it cannot run: bad constraint, projection or limit)
├── CollectorUnavailable   (nothing answers at the pool's address)
└── ProtocolError          (an answer or a request that is not what the API promises)

Constraints with a syntax error raise `htgrid.errors.ClassAdSyntaxError`, which points at
the line and column; over HTTP they come back as `InvalidQuery` with the same message.
"""

from __future__ import annotations

from htgrid.errors import HTGridError

__all__ = [
    "CollectorError",
    "CollectorUnavailable",
    "InvalidAd",
    "InvalidQuery",
    "ProtocolError",
    "UnknownCommand",
]


class CollectorError(HTGridError):
    """The collector could not do what was asked."""


class UnknownCommand(CollectorError):
    """The collector does not know this command."""


class InvalidAd(CollectorError):
    """The collector cannot store this ad."""


class InvalidQuery(CollectorError):
    """The collector cannot run this query."""


class CollectorUnavailable(CollectorError):
    """The collector does not answer; start it with `htgrid collector`."""


class ProtocolError(CollectorError):
    """The message is not what the collector's API promises."""
