"""The engine-wide watchdog over vendor calls: the same outcomes as an `asyncio.timeout` around each call."""

from __future__ import annotations

import asyncio
import time

import pytest

from harness.engine.phase_watchdog import PhaseWatchdog

RESOLUTION_S = 0.02


async def guarded(watchdog: PhaseWatchdog, call_s: float, budget_s: float) -> str:
    """What `rollout.timed` does around a call: arm, await, release; a release that says so is a TimeoutError."""
    task = asyncio.current_task()
    assert task is not None
    watchdog.arm(task, time.monotonic() + budget_s)
    try:
        await asyncio.sleep(call_s)
    except BaseException as exc:
        if watchdog.release(task, isinstance(exc, asyncio.CancelledError)):
            raise TimeoutError from exc
        raise
    watchdog.release(task, False)
    return "done"


def test_a_call_past_its_deadline_fails_as_a_timeout_within_the_resolution():
    async def main() -> float:
        watchdog = PhaseWatchdog(RESOLUTION_S)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await guarded(watchdog, call_s=10.0, budget_s=0.05)
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # the watchdog's cancel is taken back, as asyncio.timeout
        assert watchdog.fired == 1
        return time.monotonic() - start

    took = asyncio.run(main())
    assert 0.05 <= took < 0.05 + 5 * RESOLUTION_S + 0.5


def test_a_call_in_time_ends_as_it_ended_and_leaves_no_timer():
    async def main() -> None:
        watchdog = PhaseWatchdog(RESOLUTION_S)
        assert await guarded(watchdog, call_s=0.0, budget_s=1.0) == "done"
        await asyncio.sleep(3 * RESOLUTION_S)  # the sweep finds nothing armed and stops
        assert watchdog._timer is None and watchdog.fired == 0
        assert await guarded(watchdog, call_s=0.0, budget_s=1.0) == "done"  # a later arm starts it again
        assert watchdog._timer is not None
        watchdog.close()

    asyncio.run(main())


def test_an_outside_cancel_stays_a_cancel_even_when_the_deadline_also_passed():
    async def main() -> None:
        watchdog = PhaseWatchdog(RESOLUTION_S)
        plain = asyncio.ensure_future(guarded(watchdog, call_s=10.0, budget_s=5.0))
        await asyncio.sleep(RESOLUTION_S)
        plain.cancel()
        with pytest.raises(asyncio.CancelledError):
            await plain
        assert watchdog.fired == 0

        watchdog.close()
        slow = PhaseWatchdog(resolution_s=60.0)  # swept by hand below, so nothing runs between the two cancels
        both = asyncio.ensure_future(guarded(slow, call_s=10.0, budget_s=0.01))
        await asyncio.sleep(0.05)
        slow._sweep()  # the watchdog cancels it past its deadline...
        assert slow.fired == 1
        both.cancel()  # ...and its caller cancels it too before it runs again
        with pytest.raises(asyncio.CancelledError):
            await both
        slow.close()

    asyncio.run(main())


def test_one_sweep_cuts_off_only_the_calls_past_their_own_deadlines():
    async def main() -> list[str]:
        watchdog = PhaseWatchdog(RESOLUTION_S)
        calls = [guarded(watchdog, call_s=0.3, budget_s=budget) for budget in (0.05, 5.0, 0.05, 5.0)]
        results = await asyncio.gather(*calls, return_exceptions=True)
        watchdog.close()
        return [type(result).__name__ if isinstance(result, BaseException) else result for result in results]

    assert asyncio.run(main()) == ["TimeoutError", "done", "TimeoutError", "done"]
