"""Batching lookups: many requests ask about different keys, few AWS calls answer them.

While one fetch runs, the keys asked for meanwhile wait and go out together in the next
one. There is no waiting window: a lone request goes out at once, and a burst of 500
starts costs a handful of DescribeInstances. A key never joins a fetch already under
way, so no answer predates its question.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Batcher"]

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")

Fetch = Callable[[Sequence[str]], Awaitable[Mapping[str, _V]]]


def _consume(future: asyncio.Future[Any]) -> None:
    # Callers may all have been cancelled; keep asyncio from reporting the error as lost.
    if not future.cancelled():
        future.exception()


@dataclass(slots=True)
class _Round(Generic[_V]):
    done: asyncio.Future[Mapping[str, _V]]
    keys: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Queue(Generic[_V]):
    waiting: _Round[_V] | None = None
    runner: asyncio.Task[None] | None = None


class Batcher(Generic[_K, _V]):
    """Answers `find(group, key, fetch)` with one `fetch(keys)` per round and group."""

    def __init__(self) -> None:
        self._queues: dict[_K, _Queue[_V]] = {}

    async def find(self, group: _K, key: str, fetch: Fetch[_V]) -> _V | None:
        """The value for `key`, or None when the fetch did not return it."""
        queue = self._queues.setdefault(group, _Queue())
        if queue.waiting is None:
            done: asyncio.Future[Mapping[str, _V]] = asyncio.get_running_loop().create_future()
            done.add_done_callback(_consume)
            queue.waiting = _Round(done)
        round_ = queue.waiting
        round_.keys.add(key)
        if queue.runner is None or queue.runner.done():
            queue.runner = asyncio.create_task(self._run(queue, fetch))
        found = await asyncio.shield(round_.done)
        return found.get(key)

    async def _run(self, queue: _Queue[_V], fetch: Fetch[_V]) -> None:
        while queue.waiting is not None:
            round_, queue.waiting = queue.waiting, None
            try:
                found = await fetch(sorted(round_.keys))
            except Exception as err:
                round_.done.set_exception(err)
            else:
                round_.done.set_result(found)
