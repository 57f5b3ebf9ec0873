"""Time for the vendor simulator: vendor seconds, played live on an asyncio loop or virtually.

The simulator only ever asks a `SimClock` what time it is and to call it back later, so one model runs
both as a live stub (`LoopClock`, vendor time scaled onto the loop's monotonic clock) and as a fast,
deterministic offline simulation (`VirtualClock`, a heap of timers and no real sleeping).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

VIRTUAL_EPOCH = 1_767_225_600.0
"""2026-01-01T00:00:00Z: the wall-clock anchor of a VirtualClock, fixed so that truth is reproducible."""


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class SimClock(Protocol):
    """Vendor time. `now()` counts vendor seconds since the simulator started."""

    def now(self) -> float: ...

    def call_at(self, t: float, cb: Callable[[], None]) -> TimerHandle: ...

    async def sleep(self, seconds: float) -> None: ...

    def wall(self, t: float) -> float: ...


class LoopClock:
    """Vendor time on the running asyncio loop: one vendor second lasts `time_scale` real seconds.

    Timers use the loop's monotonic clock (never wall time), so NTP steps cannot fire or stall them.
    The clock anchors itself (vendor t=0) on first use inside a running loop, or on `start()`.
    """

    def __init__(self, time_scale: float = 1.0) -> None:
        if not 0 < time_scale < float("inf"):
            raise ValueError(f"time_scale must be a positive finite number, got {time_scale!r}")
        self.time_scale = float(time_scale)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0 = 0.0
        self._wall0 = 0.0

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Anchor vendor t=0 at the loop's current time (idempotent)."""
        if self._loop is None:
            self._loop = loop or asyncio.get_running_loop()
            self._t0 = self._loop.time()
            self._wall0 = time.time()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self.start()
        assert self._loop is not None
        return self._loop

    def now(self) -> float:
        loop = self._ensure()
        return (loop.time() - self._t0) / self.time_scale

    def call_at(self, t: float, cb: Callable[[], None]) -> TimerHandle:
        loop = self._ensure()
        return loop.call_at(self._t0 + t * self.time_scale, cb)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) * self.time_scale)

    def wall(self, t: float) -> float:
        """Epoch seconds (real) at which vendor time `t` happens(ed)."""
        self._ensure()
        return self._wall0 + t * self.time_scale

    def to_real(self, vendor_seconds: float) -> float:
        """A vendor duration in real seconds (for values a client acts on, such as Retry-After)."""
        return vendor_seconds * self.time_scale


class _VirtualTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock:
    """A heap of timers advanced explicitly: deterministic and as fast as the callbacks.

    Timers due at the same time run in the order they were scheduled. A timer scheduled in the past
    runs at the current time. `sleep` only works if something advances the clock while it waits.
    """

    time_scale = 1.0

    def __init__(self, epoch: float = VIRTUAL_EPOCH) -> None:
        self._now = 0.0
        self._epoch = epoch
        self._heap: list[tuple[float, int, _VirtualTimer, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.events_run = 0

    def now(self) -> float:
        return self._now

    def call_at(self, t: float, cb: Callable[[], None]) -> TimerHandle:
        timer = _VirtualTimer()
        heapq.heappush(self._heap, (max(t, self._now), next(self._seq), timer, cb))
        return timer

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        self.call_at(self._now + max(0.0, seconds), wake)
        await fut

    def wall(self, t: float) -> float:
        return self._epoch + t

    def to_real(self, vendor_seconds: float) -> float:
        return vendor_seconds

    def next_time(self) -> float | None:
        """When the next live timer is due, or None when idle."""
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def run_until(self, t: float) -> None:
        """Run every timer due at or before `t`, then stand at `t`."""
        heap = self._heap
        while heap and heap[0][0] <= t:
            when, _, timer, cb = heapq.heappop(heap)
            if timer.cancelled:
                continue
            self._now = when
            self.events_run += 1
            cb()
        self._now = max(self._now, t)

    def run(self, *, max_events: int = 50_000_000) -> None:
        """Run until no timer is left (bounded: raises RuntimeError after `max_events` callbacks)."""
        heap = self._heap
        budget = max_events
        while heap:
            when, _, timer, cb = heapq.heappop(heap)
            if timer.cancelled:
                continue
            budget -= 1
            if budget < 0:
                raise RuntimeError(f"VirtualClock.run: more than {max_events} events; is a timer rescheduling itself?")
            self._now = when
            self.events_run += 1
            cb()
