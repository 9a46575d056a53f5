"""Many jobs' CPU-heavy steps share the event loop: the loop gets its turn between slices."""

from __future__ import annotations

import asyncio

import pytest

from htgrid.grid._turns import Turns


class _Timer:
    """Each step costs 1 ms of this clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_steps_run_in_order_and_the_loop_turns_between_slices() -> None:
    async def main() -> tuple[list[int], list[int], int]:
        timer = _Timer()
        turns = Turns(slice_=0.005, timer=timer)
        ran: list[int] = []
        seen_by_loop: list[int] = []  # how many steps had run each time the loop got a turn

        def step(n: int) -> int:
            timer.now += 0.001
            ran.append(n)
            return n * n

        async def watcher() -> None:
            while len(ran) < 100:
                seen_by_loop.append(len(ran))
                await asyncio.sleep(0)

        watching = asyncio.create_task(watcher())
        results = await asyncio.gather(*(turns.run(lambda n=n: step(n)) for n in range(100)))
        await watching
        return ran, results, len({count for count in seen_by_loop if 0 < count < 100})

    ran, results, turns_between = asyncio.run(main())
    assert ran == list(range(100))
    assert results == [n * n for n in range(100)]
    assert turns_between >= 15  # 5 steps a slice: the loop saw the steps go by


def test_a_failing_step_fails_its_own_caller_only() -> None:
    async def main() -> list[object]:
        turns = Turns()

        def bad() -> int:
            raise ValueError("no ad")

        return await asyncio.gather(
            turns.run(lambda: 1), turns.run(bad), turns.run(lambda: 3), return_exceptions=True
        )

    first, second, third = asyncio.run(main())
    assert (first, third) == (1, 3)
    assert isinstance(second, ValueError)


def test_a_caller_gone_away_is_skipped_and_a_stopped_worker_leaves_nobody_waiting() -> None:
    async def main() -> None:
        turns = Turns(slice_=0.0)  # one step a turn
        ran: list[str] = []
        gone = asyncio.ensure_future(turns.run(lambda: ran.append("gone")))
        kept = asyncio.ensure_future(turns.run(lambda: ran.append("kept")))
        gone.cancel()
        await kept
        assert ran == ["kept"]
        waiting = [asyncio.ensure_future(turns.run(lambda: None)) for _ in range(3)]
        await asyncio.sleep(0)
        assert turns._worker is not None
        turns._worker.cancel()
        done = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(item, asyncio.CancelledError) for item in done)

    asyncio.run(main())


@pytest.mark.parametrize("count", [1, 2])
def test_few_steps_need_no_extra_turn(count: int) -> None:
    async def main() -> int:
        turns = Turns()
        await asyncio.gather(*(turns.run(lambda: None) for _ in range(count)))
        return turns.turns

    assert asyncio.run(main()) == 0


def test_a_step_given_as_the_worker_ends_is_run_by_the_next_one() -> None:
    async def main() -> list[int]:
        turns = Turns()
        first = await turns.run(lambda: 1)
        # The first worker ended with its line empty; its end must not touch this one.
        return [first, await turns.run(lambda: 2), await turns.run(lambda: 3)]

    assert asyncio.run(main()) == [1, 2, 3]
