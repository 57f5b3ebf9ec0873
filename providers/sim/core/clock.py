"""Time for the vendor simulator: vendor seconds, played live on an asyncio loop or virtually.

The simulator only ever asks a `SimClock` what time it is and to call it back later, so one model runs
both as a live stub (`LoopClock`, vendor time scaled onto the loop's monotonic clock) and as a fast,
deterministic offline simulation (`VirtualClock`, a heap of timers and no real sleeping).
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import os
import time
from collections.abc import Callable
from typing import Protocol

VIRTUAL_EPOCH = 1_767_225_600.0
"""2026-01-01T00:00:00Z: the wall-clock anchor of a VirtualClock, fixed so that truth is reproducible."""


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class SimClock(Protocol):
    """Vendor time. `now()` counts vendor seconds since the simulator started; one vendor second lasts
    `time_scale` real seconds (1.0 on a virtual clock, where nothing really waits)."""

    time_scale: float

    def now(self) -> float: ...

    def call_at(self, t: float, cb: Callable[[], None]) -> TimerHandle: ...

    async def sleep(self, seconds: float) -> None: ...

    def wall(self, t: float) -> float: ...

    def note_arrival(self) -> None: ...


class _VirtualTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


PACE_IDLE_S = 1.0
"""Real seconds without a create before the next one opens a wave: a burst starts from a quiet vendor."""
PACE_WINDOW_S = 0.5
"""Real seconds: a create arriving this soon after the previous one is part of the same wave, still being sent."""
PACE_MAX_S = 3.0
"""Real seconds: the longest a wave's sending is played 1:1 (a harness sends 960 creates in ~0.6 s here)."""
BURST_PACING_ENV = "STAMPEDE_SIM_BURST_PACING"
"""`0` (or off/false/no) turns the 1:1 pacing of create bursts off in every simulated vendor started with it in
its environment. `stampede run` does for a scenario whose users start at a pace the user chose (a ramp's spawn rate:
harness.locust.setting_values.PACED_BY_THE_USER), and `stampede rehearse` does: its emulated RL loop runs at the
time scale throughout (its rates are wall / time scale), so a vendor slowed to 1:1 whenever the trainer's gate let a
burst of groups through stretched their boots tenfold on the loop's clock (a prime-rl rehearsal ran at 3.30
samples/s against 5.2 unpaced)."""


def burst_pacing_enabled() -> bool:
    return os.environ.get(BURST_PACING_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


COMPACT_MIN = 4096
"""A live clock's timer heap is swept of cancelled timers once it reaches this size (and twice its live size)."""


class LoopClock:
    """Vendor time on the running asyncio loop: one vendor second lasts `time_scale` real seconds, except while
    the harness is still sending a burst.

    Why the exception: at time scale 0.1 the ~0.5 real seconds a harness needs to send 960 creates would reach the
    vendor as 5 vendor seconds of spread-out arrivals, during which the first sandboxes finish booting and leave
    the start pipeline, so the later ones meet less congestion than they would at scale 1 (51.6% against 68.5%
    failures under modal-like). A real vendor sees the harness's sending delay as it is. So `note_arrival()` (the
    simulator calls it for every create) plays vendor time 1:1 with real time while a wave of creates is being
    sent: a wave opens with a create that follows `pace_idle_s` real seconds without one (a burst meets a quiet
    vendor), and closes `pace_window_s` after its last create, or `pace_max_s` after it opened. Creates that keep
    coming after a wave closed (a closed loop replacing rollouts as they end, a steady load) open none until the
    vendor has been quiet again, so steady loads run at their scale (pacing them played a closed loop's first
    10 s at 1:1 and halved a rehearsal's generator rate). Gaps between a wave's creates count 1:1 in vendor
    seconds, and so does everything the vendor does meanwhile, which keeps the model consistent (no event is
    replayed in the past).
    Vendor durations do not depend on the pacing; only the real time they take does, which is why the vendor's
    truth records vendor seconds beside the wall clock (`wall` follows the actual mapping).

    Timers live on this clock's own heap (one loop timer for the earliest), so a change of pace moves them all;
    the loop's monotonic clock drives it (never wall time), so NTP steps cannot fire or stall them. The clock
    anchors itself (vendor t=0) on first use inside a running loop, or on `start()`.
    """

    def __init__(
        self,
        time_scale: float = 1.0,
        *,
        pace_window_s: float | None = None,  # None: PACE_WINDOW_S, or 0 (no pacing) per BURST_PACING_ENV
        pace_max_s: float = PACE_MAX_S,
        pace_idle_s: float = PACE_IDLE_S,
    ) -> None:
        if not 0 < time_scale < float("inf"):
            raise ValueError(f"time_scale must be a positive finite number, got {time_scale!r}")
        self.time_scale = float(time_scale)
        if pace_window_s is None:
            pace_window_s = PACE_WINDOW_S if burst_pacing_enabled() else 0.0
        self.pace_window_s = max(0.0, float(pace_window_s))
        self.pace_max_s = max(0.0, float(pace_max_s))
        self.pace_idle_s = max(self.pace_window_s, float(pace_idle_s))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0 = 0.0
        self._wall0 = 0.0
        # the current piece of the real -> vendor mapping: vendor = _v_a + (real - _r_a) * _rate
        self._r_a = 0.0
        self._v_a = 0.0
        self._rate = 1.0 / self.time_scale
        self._seg_v: list[float] = [0.0]  # every piece so far, for `wall` (vendor start, real start, rate)
        self._seg_r: list[float] = [0.0]
        self._seg_rate: list[float] = [self._rate]
        # pacing
        self._paced = False
        self._last_arrival = -float("inf")
        self._burst_start = -float("inf")
        self._wave_open = False
        self.waves = 0  # waves of creates played 1:1 so far (for diagnostics and tests)
        self._pace_handle: asyncio.TimerHandle | None = None
        self.paced_real_s = 0.0  # real seconds played 1:1 so far (for diagnostics and tests)
        self._paced_since = 0.0
        # timers
        self._heap: list[tuple[float, int, _VirtualTimer, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at = float("inf")
        self._compact_at = COMPACT_MIN

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Anchor vendor t=0 at the loop's current time (idempotent)."""
        if self._loop is None:
            self._loop = loop or asyncio.get_running_loop()
            self._t0 = self._loop.time()
            self._wall0 = time.time()
            self._r_a = self._t0
            self._seg_r[0] = self._t0

    def _ensure(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self.start()
        assert self._loop is not None
        return self._loop

    def now(self) -> float:
        loop = self._ensure()
        return self._v_a + (loop.time() - self._r_a) * self._rate

    def _real_at(self, t: float) -> float:
        """The loop time at which vendor time `t` comes, at the current pace."""
        return self._r_a + (t - self._v_a) / self._rate

    def call_at(self, t: float, cb: Callable[[], None]) -> TimerHandle:
        self._ensure()
        timer = _VirtualTimer()
        heapq.heappush(self._heap, (t, next(self._seq), timer, cb))
        if len(self._heap) >= self._compact_at:
            self._compact()
        if t < self._armed_at:
            self._arm()
        return timer

    def _compact(self) -> None:
        """Drop cancelled timers. A sandbox that ends cancels its lifetime timer, due maybe an hour later; kept
        until then, each would hold its sandbox alive, and a soak's memory would grow for that hour."""
        self._heap[:] = [entry for entry in self._heap if not entry[2].cancelled]
        heapq.heapify(self._heap)
        self._compact_at = max(COMPACT_MIN, 2 * len(self._heap))  # amortised O(1) per timer

    def _arm(self) -> None:
        loop = self._ensure()
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not heap:
            self._armed_at = float("inf")
            return
        self._armed_at = heap[0][0]
        self._handle = loop.call_at(self._real_at(self._armed_at), self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_at = float("inf")
        now = self.now()
        due: list[tuple[float, int, _VirtualTimer, Callable[[], None]]] = []
        heap = self._heap
        while heap and heap[0][0] <= now + 1e-9:
            due.append(heapq.heappop(heap))
        try:
            for _, _, timer, cb in due:
                if not timer.cancelled:
                    timer.cancelled = True  # fired: a late cancel() is a no-op
                    cb()
        finally:
            self._arm()

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = self._ensure().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        timer = self.call_at(self.now() + max(0.0, seconds), wake)
        try:
            await fut
        finally:
            timer.cancel()

    def _set_rate(self, rate: float) -> None:
        """Continue the mapping from now at a new pace, and move the pending timers with it."""
        loop = self._ensure()
        real = loop.time()
        vendor = self._v_a + (real - self._r_a) * self._rate
        self._r_a, self._v_a, self._rate = real, vendor, rate
        self._seg_v.append(vendor)
        self._seg_r.append(real)
        self._seg_rate.append(rate)
        self._arm()

    def note_arrival(self) -> None:
        """A create arrived: play vendor time 1:1 while the harness is still sending this wave (see class doc)."""
        if self.time_scale == 1.0 or self.pace_window_s <= 0.0:
            return
        loop = self._ensure()
        real = loop.time()
        if real - self._last_arrival >= self.pace_idle_s:
            self._burst_start = real  # a quiet vendor before it: a new wave opens
            self._wave_open = True
            self.waves += 1
        self._last_arrival = real
        if not self._wave_open:
            return
        if real - self._burst_start >= self.pace_max_s:
            self._close_wave()
            return
        if not self._paced:
            self._paced = True
            self._paced_since = real
            self._set_rate(1.0)
        if self._pace_handle is None:
            self._pace_handle = loop.call_at(self._pace_end(), self._pace_check)

    def _pace_end(self) -> float:
        return min(self._last_arrival + self.pace_window_s, self._burst_start + self.pace_max_s)

    def _pace_check(self) -> None:
        self._pace_handle = None
        loop = self._ensure()
        end = self._pace_end()
        if loop.time() < end:
            self._pace_handle = loop.call_at(end, self._pace_check)
        else:
            self._close_wave()

    def _close_wave(self) -> None:
        self._wave_open = False
        self._unpace()

    def _unpace(self) -> None:
        if self._pace_handle is not None:
            self._pace_handle.cancel()
            self._pace_handle = None
        if self._paced:
            self._paced = False
            self.paced_real_s += self._ensure().time() - self._paced_since
            self._set_rate(1.0 / self.time_scale)

    def wall(self, t: float) -> float:
        """Epoch seconds (real) at which vendor time `t` happens(ed), through the mapping as it was played."""
        self._ensure()
        i = max(0, bisect.bisect_right(self._seg_v, t) - 1)
        real = self._seg_r[i] + (t - self._seg_v[i]) / self._seg_rate[i]
        return self._wall0 + (real - self._t0)

    def to_real(self, vendor_seconds: float) -> float:
        """A vendor duration in real seconds at the nominal scale (for values a client acts on, such as
        Retry-After)."""
        return vendor_seconds * self.time_scale


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

    def note_arrival(self) -> None:
        """Arrivals need no pacing here: the caller places them on this clock exactly."""

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
