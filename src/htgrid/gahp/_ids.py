"""Request ids, handed out the way the grid manager does it."""

from __future__ import annotations

from htgrid.gahp._codec import REQUEST_ID_MAX
from htgrid.gahp._errors import LocalGahpError

__all__ = ["RequestIds"]


class RequestIds:
    """Request ids as the grid manager hands them out (`GahpServer::new_reqid`).

    Sequential from 1; after REQUEST_ID_MAX they wrap to 1 and from then on skip ids still
    in use. An id stays in use until `release()`, even for an abandoned request, so a late
    result cannot be taken for a newer request's.
    """

    def __init__(self, first: int = 1, limit: int = REQUEST_ID_MAX) -> None:
        self._next = first
        self._limit = limit
        self._rotated = False
        self._in_use: set[int] = set()

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._in_use

    def __len__(self) -> int:
        return len(self._in_use)

    def allocate(self) -> int:
        """A fresh id, marked in use."""
        for _ in range(self._limit):
            candidate = self._next
            self._next += 1
            if self._next > self._limit:
                self._next = 1
                self._rotated = True
            if candidate not in self._in_use:
                self._in_use.add(candidate)
                return candidate
        raise LocalGahpError("every GAHP request id is in use")

    def release(self, request_id: int) -> None:
        """The id may be handed out again."""
        self._in_use.discard(request_id)
