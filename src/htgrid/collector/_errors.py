"""The collector's errors: every one is a `CollectorError`, itself an `HTGridError`.

CollectorError
├── UnknownCommand         (not an UPDATE_* / INVALIDATE_* command this collector keeps)
├── InvalidAd              (an ad the collector cannot store: no Name, the wrong MyType)
├── InvalidQuery           (a query it cannot run: bad constraint, projection or limit)
├── CollectorUnavailable   (nothing answers at the pool's address, or not over trusted TLS)
├── CollectorRefused       (no token of the pool, or one that does not allow the request)
├── NotRegistered          (no execute node is registered with the broker (CCB) by that id)
└── ProtocolError          (an answer or a request that is not what the API promises)

Constraints with a syntax error raise `htgrid.errors.ClassAdSyntaxError`, which points at
the line and column; over HTTP they come back as `InvalidQuery` with the same message.
"""

from __future__ import annotations

from htgrid.errors import HTGridError

__all__ = [
    "CollectorError",
    "CollectorRefused",
    "CollectorUnavailable",
    "InvalidAd",
    "InvalidQuery",
    "NotRegistered",
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


class CollectorRefused(CollectorError):
    """The collector refused the request: no valid token of its pool, or too few rights."""

    def __init__(self, message: str, *, status: int = 401, realm: str | None = None) -> None:
        self.status = status  # 401: who are you; 403: not allowed
        self.realm = realm  # the collector's trust domain, from its challenge
        super().__init__(message)


class NotRegistered(CollectorError):
    """No execute node is registered with the connection broker (CCB) by that id."""


class ProtocolError(CollectorError):
    """The message is not what the collector's API promises."""
