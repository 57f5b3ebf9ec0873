"""The clock the open model's schedule runs on: epoch seconds that advance with the monotonic clock.

The arrival and staggered shapes count intended start times and stage ends from an epoch instant. Read from
the wall clock each time, an NTP step moves the whole schedule: a step back stops arrivals until the wall
clock catches up, a step forward fires every missed start at once. So the wall clock is read once, at the
anchor (when this process first asks), and every later reading is that instant plus the monotonic time since:
intended start times are still reported in UTC (as the wall clock stood at the anchor), and no step moves a
deadline. A master and its workers each anchor once; their schedules agree as closely as their clocks did then.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class AnchoredClock:
    """`now()`: the wall clock read once, plus the monotonic seconds since. Sources are injectable for tests."""

    def __init__(self, wall: Callable[[], float] | None = None, monotonic: Callable[[], float] | None = None) -> None:
        # Looked up at call time (not bound as defaults), so a test that steps time.time sees it at the anchor.
        self._wall = wall or (lambda: time.time())
        self._monotonic = monotonic or (lambda: time.monotonic())
        self._anchor: tuple[float, float] | None = None

    def now(self) -> float:
        """Epoch seconds for scheduling and for t_intended; never jumps with a wall-clock step."""
        mono = self._monotonic()
        if self._anchor is None:
            self._anchor = (self._wall(), mono)
        wall0, mono0 = self._anchor
        return wall0 + (mono - mono0)


SCHEDULE_CLOCK = AnchoredClock()


def schedule_now() -> float:
    """This process's schedule time (epoch seconds, anchored once)."""
    return SCHEDULE_CLOCK.now()
