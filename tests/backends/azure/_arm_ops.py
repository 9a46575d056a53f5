"""The fake ARM's long-running operations: Azure-AsyncOperation and Location polling."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._arm_types import ArmError

Reply = tuple[int, dict[str, str], Any]


@dataclass
class _Op:
    polls_left: int
    done: Callable[[], None]
    on_fail: Callable[[], None]
    started: float
    failure: tuple[str, str] | None = None
    finished: bool = False
    status: str = "InProgress"


class Operations:
    """Operations that answer `InProgress` `polls` times, then finish (or fail on request).

    One that nobody polls still finishes, `settle_after` seconds after it started: Azure
    provisions a VM whether or not its creator is still there to watch (a GAHP killed
    with its grid manager leaves the VM's create to Azure).
    """

    def __init__(self, polls: int, settle_after: float = 2.0) -> None:
        self.polls = polls
        self.settle_after = settle_after
        self._ops: dict[str, _Op] = {}
        self._unfinished: dict[str, _Op] = {}
        self._failures: list[tuple[re.Pattern[str], str, str]] = []
        self._ids = itertools.count(1)

    def fail_next(self, pattern: str, code: str, message: str) -> None:
        self._failures.append((re.compile(pattern, re.I), code, message))

    def start(
        self,
        base: str,
        path: str,
        done: Callable[[], None],
        on_fail: Callable[[], None] = lambda: None,
    ) -> tuple[str, dict[str, str]]:
        """A new operation for the request on `path`; its id and polling headers.

        `base` is `<url>/subscriptions/<s>/providers/<namespace>/locations/<location>`.
        """
        op_id = f"op{next(self._ids)}"
        failure = None
        for index, (pattern, code, message) in enumerate(self._failures):
            if pattern.search(path):
                failure = (code, message)
                del self._failures[index]
                break
        op = _Op(self.polls, done, on_fail, time.monotonic(), failure)
        self._ops[op_id] = self._unfinished[op_id] = op
        return op_id, {
            "Azure-AsyncOperation": f"{base}/operations/{op_id}?api-version=2024-01-01",
            "Retry-After": "0",
        }

    def settle(self) -> None:
        """Finish every operation that has run `settle_after` seconds, polled or not."""
        due = time.monotonic() - self.settle_after
        for op_id, op in list(self._unfinished.items()):
            if op.started <= due:
                self._finish(op_id, op)

    def _advance(self, op_id: str) -> _Op:
        op = self._ops.get(op_id)
        if op is None:
            raise ArmError(404, "OperationNotFound", f"operation {op_id} not found")
        if op.polls_left > 0:
            op.polls_left -= 1
        elif not op.finished:
            self._finish(op_id, op)
        return op

    def _finish(self, op_id: str, op: _Op) -> None:
        op.finished = True
        op.polls_left = 0
        del self._unfinished[op_id]
        if op.failure is None:
            op.done()
            op.status = "Succeeded"
        else:
            op.on_fail()
            op.status = "Failed"

    def status(self, op_id: str) -> Reply:
        """GET on an Azure-AsyncOperation URL."""
        op = self._advance(op_id)
        body: dict[str, Any] = {"name": op_id, "status": op.status}
        if op.failure is not None and op.finished:
            body["error"] = {"code": op.failure[0], "message": op.failure[1]}
        return 200, {"Retry-After": "0"}, body

    def result(self, op_id: str, again: str) -> Reply:
        """GET on a Location URL (`again` is that URL, for while it runs)."""
        op = self._advance(op_id)
        if not op.finished:
            return 202, {"Location": again, "Retry-After": "0"}, None
        if op.failure is not None:
            raise ArmError(400, op.failure[0], op.failure[1])
        return 200, {}, None
