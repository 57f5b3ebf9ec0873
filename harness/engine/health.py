"""The harness watching itself: event-loop lag and CPU of the process that times the rollouts.

A saturated harness inflates every latency it measures, so a run reports how late its own loop was and how
busy its process was; a run whose loop lag p99 is a sizeable share of the TTI it reports is not to be trusted.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time

import psutil
from hdrh.histogram import HdrHistogram

from foundation.quantiles import hdr_quantile, nearest_rank_index
from harness.engine.stage_health import StageHealth
from harness.engine.stall_log import StallLog, length_outside
from harness.wire.messages import RECENT_WINDOW_S, HealthSnapshot

LAG_PROBE_INTERVAL_S = 0.1
_LAG_MAX_US = 3_600_000_000  # one hour, in microseconds
_STALL_MIN_S = 0.001  # a probe later than this is kept as a stall a rollout may have to bear


class LoopHealth:
    """Samples how late `asyncio.sleep` wakes up: the delay every other coroutine also suffered."""

    def __init__(self, interval_s: float = LAG_PROBE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.histogram = HdrHistogram(1, _LAG_MAX_US, 3)
        self._recent = [HdrHistogram(1, _LAG_MAX_US, 3), HdrHistogram(1, _LAG_MAX_US, 3)]
        # both recent halves, kept as the probes come (not rebuilt per snapshot: a reset walks 23k counts in Python)
        self._merged = HdrHistogram(1, _LAG_MAX_US, 3)
        self._rotated = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        self.last_lag_s = 0.0  # the latest probe's lag: how late anything that woke just now ran
        self._late_from = 0.0  # the latest probe's lag as monotonic instants: from when it should have woken
        self._late_to = 0.0  # to when it did
        self._stalls = StallLog()
        self.stages = StageHealth()  # the same probes, per stage in force, with the CPU of each stage

    def lag_now(self) -> float:
        """The loop's current lag in seconds (the latest probe's; probes run every LAG_PROBE_INTERVAL_S)."""
        return self.last_lag_s

    def lag_since(self, since: float, outside: tuple[float, float] | None = None) -> float:
        """The worst stall of the loop after monotonic instant `since`, the part outside the window `outside`: a
        rollout charges the lag that could have delayed what it timed since it began (a freeze while it waited for
        its create answer delayed that answer as much). The window `outside` is the readiness poll window a
        rollout already charges: a freeze inside it is not counted a second time."""
        worst = self._stalls.worst_since(since, outside)
        if self._late_to > since:  # the latest probe's, however small: how late anything that woke just now ran
            worst = max(worst, length_outside(max(self._late_from, since), self._late_to, outside))
        return worst

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._probe())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _probe(self) -> None:
        while True:
            start = time.monotonic()
            await asyncio.sleep(self.interval_s)
            self.record(start, time.monotonic())

    def record(self, start: float, now: float) -> None:
        """One probe: it slept from monotonic `start` and woke at `now`."""
        lag_us = min(max(1, int((now - start - self.interval_s) * 1e6)), _LAG_MAX_US)
        self.last_lag_s = lag_us / 1e6
        self._late_from, self._late_to = now - self.last_lag_s, now
        if self.last_lag_s >= _STALL_MIN_S:
            self._stalls.append(self._late_from, now)
        self.histogram.record_value(lag_us)
        self.stages.record_lag(lag_us)
        if now - self._rotated >= RECENT_WINDOW_S:
            self._recent = [self._recent[1], self._recent[0]]
            self._recent[1].reset()
            self._merged.reset()
            self._merged.add(self._recent[0])
            self._rotated = now
        self._recent[1].record_value(lag_us)
        self._merged.record_value(lag_us)

    def reset(self) -> None:
        self.histogram.reset()
        self.stages.reset()
        for histogram in (*self._recent, self._merged):
            histogram.reset()

    def snapshot(self) -> HealthSnapshot:
        """Asked twice a second by the Locust side: the quantiles come from one pass over each histogram's counts."""
        times = self._process.cpu_times()
        count = self.histogram.get_total_count()
        recent = self._merged
        has_recent = recent.get_total_count() > 0
        (recent_p99,) = hdr_quantiles(recent, (0.99,))
        p50, p99 = hdr_quantiles(self.histogram, (0.5, 0.99))
        return HealthSnapshot(
            recent_lag_p99_ms=(recent_p99 or 0) / 1000,
            recent_lag_max_ms=recent.get_max_value() / 1000 if has_recent else 0.0,
            loop_lag_p50_ms=(p50 or 0) / 1000,
            loop_lag_p99_ms=(p99 or 0) / 1000,
            loop_lag_max_ms=self.histogram.get_max_value() / 1000 if count else 0.0,
            loop_lag_samples=count,
            cpu_percent=self._process.cpu_percent(None),
            cpu_seconds=times.user + times.system,
            rss_mb=self._process.memory_info().rss / 2**20,
        )


def hdr_quantiles(histogram: HdrHistogram, qs: tuple[float, ...]) -> list[int | None]:
    """`foundation.quantiles.hdr_quantile(histogram, q)` for each q, to the value, from one pass over the counts.

    hdrh finds a percentile by walking its counts one Python call per index (~0.25 ms for a lag of a few ms, and
    a stats answer asked for four); here the counts up to the histogram's maximum are summed at C speed and each
    rank found by bisection: the first index whose running total reaches hdrh's own target count, as its walk.
    """
    n = histogram.get_total_count()
    if n == 0:
        return [None] * len(qs)
    top = histogram._counts_index_for(histogram.max_value)  # hdrh has no public index lookup
    running = list(itertools.accumulate(histogram.counts[: top + 1]))
    values: list[int | None] = []
    for q in qs:
        target = histogram.get_target_count_at_percentile(100.0 * (nearest_rank_index(n, q) + 1) / n)
        index = bisect.bisect_left(running, target)
        if index >= len(running):  # counts and total disagree (never for a histogram of ours): hdrh's own walk
            values.append(hdr_quantile(histogram, q))
        else:
            values.append(int(histogram.get_highest_equivalent_value(histogram.get_value_from_index(index))))
    return values
