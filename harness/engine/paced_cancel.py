"""Cancelling thousands of rollouts without stalling the loop that times the rest.

A run's stop cancels every rollout in flight at once (Locust stops its users, or the drain does). Cancelled
in one go, the next loop iteration runs every one of them: each unwinds through its provider's client and
starts its terminate call. At 3,840 in flight that was one iteration of ~200 ms, and every rollout still
timing something, and the loop-lag probe, waited for it. Paced, each iteration runs at most a slice of them,
and timers and I/O of everything else get their turn between slices.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

CANCELS_PER_ITERATION = 32
TURN_BUDGET_S = 0.01  # a loop turn longer than this halves the slice (the wave's terminate answers count too)


class CancelPacer:
    """Cancels tasks in order, at most `per_iteration` per turn of the event loop, fewer while turns run long."""

    def __init__(self, per_iteration: int = CANCELS_PER_ITERATION, turn_budget_s: float = TURN_BUDGET_S) -> None:
        self.per_iteration = max(1, per_iteration)
        self.turn_budget_s = turn_budget_s
        self._queue: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._worker: asyncio.Task[None] | None = None

    def cancel(self, task: asyncio.Future[Any]) -> None:
        """Cancel `task` soon: at once when nothing else waits, else within a few loop iterations."""
        if task.done():
            return
        if not self._queue and (self._worker is None or self._worker.done()):
            task.cancel()  # the first of a wave goes now; a lone cancel is never delayed
            self._worker = asyncio.get_running_loop().create_task(self._run())
            return
        self._queue.append(task)

    def pending(self) -> int:
        return len(self._queue)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        slice_size = self.per_iteration
        last = loop.time()
        await asyncio.sleep(0)  # the first cancel's unwinding runs in this turn; the wave starts on the next
        while self._queue:
            now = loop.time()
            if now - last > self.turn_budget_s:  # the last turn ran long: unwind fewer at a time (AIMD)
                slice_size = max(1, slice_size // 2)
            else:
                slice_size = min(self.per_iteration, slice_size + 4)
            last = now
            for _ in range(min(slice_size, len(self._queue))):
                self._queue.popleft().cancel()
            await asyncio.sleep(0)
