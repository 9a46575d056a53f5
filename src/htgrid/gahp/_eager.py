"""Run a handler's first step at once; only a handler that has to wait gets a task.

Most GAHP requests (a cached status, a ping) finish without waiting for anything, and a
task per request costs more than the request itself. Python 3.12 calls this eager task
execution; on 3.11 it is done here by hand: the coroutine is stepped once in the caller,
and if it waits, a task takes over and keeps stepping it the way asyncio's Task would
(await what it yielded, then resume it; a cancellation of the task reaches the handler).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["finish_in_task", "run_eagerly"]

_T = TypeVar("_T")


def run_eagerly(
    coro: Coroutine[Any, Any, _T],
    done: Callable[[_T], None],
    failed: Callable[[BaseException], None],
) -> asyncio.Task[None] | None:
    """Step `coro` now; `done(value)` or `failed(error)` is called exactly once.

    Returns the task that finishes it, or None when it finished here. `failed` also
    receives the CancelledError of a cancelled task (and the task then ends cancelled).
    """
    try:
        awaited = coro.send(None)
    except StopIteration as stop:
        done(stop.value)
        return None
    except Exception as err:
        failed(err)
        return None
    return finish_in_task(coro, awaited, done, failed)


def finish_in_task(
    coro: Coroutine[Any, Any, _T],
    awaited: Any,
    done: Callable[[_T], None],
    failed: Callable[[BaseException], None],
) -> asyncio.Task[None]:
    """A task that goes on with `coro`, already stepped once and waiting on `awaited`."""
    return asyncio.create_task(_finish(coro, awaited, done, failed))


async def _finish(
    coro: Coroutine[Any, Any, _T],
    awaited: Any,
    done: Callable[[_T], None],
    failed: Callable[[BaseException], None],
) -> None:
    while True:
        try:
            if awaited is None:
                # A bare yield (asyncio.sleep(0)): give the loop one turn.
                await asyncio.sleep(0)
            else:
                # Take the future over as Task.__step would: clear the flag its yield
                # set, or awaiting it again here would be refused.
                awaited._asyncio_future_blocking = False
                await awaited
        except asyncio.CancelledError:
            if awaited is None or not awaited.cancelled():
                # This task was cancelled while the handler's future was not: cancel the
                # handler. (A cancelled future cancels it by itself when it resumes.)
                awaited = _step(coro, done, failed, cancel=True)
                if awaited is _FINISHED:
                    return
                continue
        except BaseException:
            pass  # the handler sees the outcome of its own await when resumed
        awaited = _step(coro, done, failed, cancel=False)
        if awaited is _FINISHED:
            return


_FINISHED = object()


def _step(
    coro: Coroutine[Any, Any, _T],
    done: Callable[[_T], None],
    failed: Callable[[BaseException], None],
    *,
    cancel: bool,
) -> Any:
    """Resume the handler once: what it yields next, or _FINISHED."""
    try:
        if cancel:
            return coro.throw(asyncio.CancelledError())
        return coro.send(None)
    except StopIteration as stop:
        done(stop.value)
    except asyncio.CancelledError as err:
        failed(err)
        raise
    except Exception as err:
        failed(err)
    return _FINISHED
