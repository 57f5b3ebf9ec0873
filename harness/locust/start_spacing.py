"""Users' first rollouts spaced evenly at the spawn rate, not in the one-second batches Locust releases them in.

Locust's dispatcher hands out a spawn rate of 200 users a second as 200 users at once, once a second. Each leased
user starts its first rollout at once, so a "ramp at 200 starts/s" reached the engine as a burst of 200 creates
every second: the engine and the vendor queued them, and every create in the batch recorded the harness's own
queue as vendor latency (in the ramp to 10,000, the create's way to the vendor had a p50 of ~35 ms). Spaced, the
same ramp is one start every 5 ms, the rate the user asked for. A shape that wants a burst gates its users (the
burst scenario) and is not spaced.
"""

from __future__ import annotations

import time

import gevent


class StartSpacer:
    """One per Locust process: hands each newly started user the next free slot, `1 / rate` after the last."""

    def __init__(self) -> None:
        self._next = 0.0

    def slot(self, rate: float, now: float | None = None) -> float:
        """Seconds to wait before this start (0 when the last slot is already past)."""
        now = time.monotonic() if now is None else now
        if rate <= 0:
            return 0.0
        start = max(now, self._next)
        self._next = start + 1.0 / rate
        return start - now

    def wait_turn(self, rate: float) -> None:
        """In a user's greenlet: sleep until its slot (a killed user simply stops waiting)."""
        delay = self.slot(rate)
        if delay > 0:
            gevent.sleep(delay)
