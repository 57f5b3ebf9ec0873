"""The harness's own deadline on a vendor call that never returns: one engine-wide sweep, not a timer per call.

Every vendor call a rollout makes is bounded past its phase's own budget (`rollout.WATCHDOG_GRACE_S` beyond it): a
stuck SDK call must not hold a rollout, and its sandbox, for ever. `asyncio.timeout` around each call did that at
~5 us a call (a Timeout object, a TimerHandle pushed on the loop's heap and cancelled, the heap's clean-ups): four
calls a lifecycle, about 20 us of engine CPU, the largest single item of the harness's own per-lifecycle work.

Here a call's deadline is one dict entry (set before the call, removed after it), and one timer a second looks for
the calls past theirs: such a task is cancelled and marked, and `expired()` (asked where the call's cancellation is
caught) turns that cancellation into the TimeoutError `asyncio.timeout` raised, only when no other cancel request is
pending on the task (`Task.uncancel`, as `asyncio.timeout` decides). A deadline fires at most `resolution_s` late: it
is a watchdog of half a minute past a budget, not a measurement.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

SWEEP_INTERVAL_S = 1.0


class PhaseWatchdog:
    """Deadlines (on `time.monotonic()`) of the vendor calls in flight, by the task making each; swept every
    `resolution_s`. Use: `arm(task, deadline)` before the call, `release(task, cancelled)` after it, however it
    ended; a release that says True is a call the watchdog cut off: raise TimeoutError in its place."""

    def __init__(self, resolution_s: float = SWEEP_INTERVAL_S) -> None:
        self.resolution_s = resolution_s
        self._deadlines: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fired = 0  # calls the watchdog cut off, over its life

    def arm(self, task: asyncio.Task[Any], deadline: float) -> None:
        """`task`'s call must end by `deadline` (monotonic seconds); one call per task at a time."""
        self._deadlines[task] = deadline
        if self._timer is None:
            self._loop = task.get_loop()
            self._timer = self._loop.call_later(self.resolution_s, self._sweep)

    def release(self, task: asyncio.Task[Any], cancelled: bool) -> bool:
        """The call ended (`cancelled`: with CancelledError). True when that cancellation is the watchdog's own and
        no other cancel request is pending on the task (`Task.uncancel`, as `asyncio.timeout` decides)."""
        self._deadlines.pop(task, None)
        if task not in self._expired:
            return False
        self._expired.discard(task)
        return task.uncancel() == 0 and cancelled

    def _sweep(self) -> None:
        self._timer = None
        if not self._deadlines:
            return  # nothing armed: the next arm starts the timer again
        now = time.monotonic()
        late = [task for task, deadline in self._deadlines.items() if deadline <= now]
        for task in late:
            del self._deadlines[task]
            if not task.done():
                self._expired.add(task)
                self.fired += 1
                task.cancel()
        if self._deadlines and self._loop is not None:
            self._timer = self._loop.call_later(self.resolution_s, self._sweep)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
