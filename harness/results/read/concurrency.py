"""True concurrency from rollout intervals: a sweep line, because `inflight_at_submit` is per engine.

In distributed runs each engine counts only its own rollouts; the real load on the vendor is the number of
intervals [t_submit, t_submit + total_s) that cover an instant, across all rows. Sorting the start and end
times once answers that for every row (or every instant of a timeline) with one searchsorted each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd


def interval_ends(frame: pd.DataFrame, run_end: float | None = None) -> np.ndarray:
    """End of each rollout (submit + total_s); a row without total_s is taken to last until the run's end.

    A rollout with no total_s was cut off (a kill, the end of the run) while it held a sandbox: it was in flight
    from its submit until then. Dropping it, or giving it zero length, would undercount the load exactly when
    the vendor was slowest (the slow rollouts are the ones left unfinished).
    """
    start = frame["t_submit"].to_numpy(dtype=float)
    end = start + frame["total_s"].to_numpy(dtype=float)
    missing = np.isnan(end)
    if missing.any():
        fallback = run_end if run_end is not None else float(np.nanmax(end)) if (~missing).any() else start.max()
        end[missing] = np.maximum(fallback, start[missing])
    return end


def concurrency_at(instants: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many intervals [start, end) contain each instant (instants need not be sorted)."""
    sorted_starts = np.sort(starts)
    sorted_ends = np.sort(ends)
    return np.searchsorted(sorted_starts, instants, side="right") - np.searchsorted(sorted_ends, instants, side="right")


def concurrency_at_submit(frame: pd.DataFrame) -> np.ndarray:
    """The fleet-wide number of rollouts in flight when each row was submitted (itself included).

    The definition behind "peak in flight" (the end-of-run summary). Stages are labelled by `concurrency_during`
    (what each row met while it ran). Ends sort before starts at equal times: [t_submit, end) is half-open.
    """
    starts = frame["t_submit"].to_numpy(dtype=float)
    return concurrency_at(starts, starts, interval_ends(frame))


def start_window_ends(frame: pd.DataFrame) -> np.ndarray:
    """When each row's start ended: submit + create + ready if it became usable, else the end of its interval."""
    starts = frame["t_submit"].to_numpy(dtype=float)
    usable = starts + frame["create_s"].to_numpy(dtype=float) + frame["ready_s"].to_numpy(dtype=float)
    ends = interval_ends(frame)
    return np.where(np.isnan(usable), ends, np.minimum(usable, ends))


def concurrency_during(frame: pd.DataFrame) -> np.ndarray:
    """The most rollouts in flight fleet-wide at any instant while each row was starting (itself included).

    The load a rollout's start met: the window is [t_submit, usable) (`start_window_ends`), the part of a
    rollout whose latency and failures depend on the vendor's load, and the part the latency model buckets.
    Why not the count at submit: the rows of a burst of N are submitted within a few hundred milliseconds, so at
    their submits they see 1, 2, ... N in flight (median N/2), though every one of them started against N. The
    peak over the start window is N for each of them, N for a closed loop holding N, and the few that overlap
    for rollouts started one at a time (a staggered 100 at 600 ms: ~2-3, not 100). Rows submitted at random
    around a mean of L in flight read a little above L (the peak of a short window).
    """
    starts = frame["t_submit"].to_numpy(dtype=float)
    n = starts.size
    if n == 0:
        return np.empty(0, dtype=np.int64)
    ends = interval_ends(frame)
    window_end = np.maximum(start_window_ends(frame), starts)
    times = np.concatenate([ends, starts])
    kinds = np.concatenate([np.zeros(n, dtype=np.int8), np.ones(n, dtype=np.int8)])  # ends before starts at ties
    order = np.lexsort((kinds, times))
    times = times[order]
    inflight = np.cumsum(np.where(kinds[order] == 1, 1, -1))  # the count just after each event
    # the count at a row's submit is the one after every event at or before it; then each event before its end
    first = np.searchsorted(times, starts, side="right") - 1
    last = np.maximum(np.searchsorted(times, window_end, side="left"), first + 1)
    padded = np.append(inflight, 0)
    pairs = np.empty(2 * n, dtype=np.int64)
    pairs[0::2], pairs[1::2] = first, last
    return np.maximum(np.maximum.reduceat(padded, pairs)[0::2], 1).astype(np.int64)  # a zero-length row: itself


def stage_concurrency(measured: float) -> int:
    """A stage's concurrency label: the median of its rows' `concurrency_during`, rounded (at least 1)."""
    return max(round(measured), 1) if measured == measured else 1


LEVEL_TOLERANCE = 0.15
"""Stages whose measured concurrency is within 15% of each other describe one level (pooled, joined)."""


def group_levels(levels: Sequence[float], tolerance: float = LEVEL_TOLERANCE) -> list[int]:
    """For each measured stage level, the index of its group: levels within `tolerance` of the group's lowest.

    Why: measured concurrency is never exactly a target (a run at scale 0.1 of a closed 100 reads 104, the
    same at scale 1 reads 106), so exact labels would split one load level across runs in the export's buckets
    and the report's side-by-side join. Ramps step by 2x, far apart at this tolerance.
    """
    order = sorted(range(len(levels)), key=lambda i: levels[i])
    groups = [0] * len(levels)
    group, base = -1, None
    for i in order:
        if base is None or levels[i] > base * (1.0 + tolerance):
            group, base = group + 1, max(levels[i], 1.0)
        groups[i] = group
    return groups


@dataclass(frozen=True, slots=True)
class Timeline:
    """Seconds since the run's first submit, and per instant: in flight, sandboxes usable, failures so far."""

    t: np.ndarray
    inflight: np.ndarray
    ready: np.ndarray
    failed_cumulative: np.ndarray


def timeline(frame: pd.DataFrame, points: int = 1000) -> Timeline:
    """Sample in-flight, ready and failed counts on an even grid (the plot's resolution, not the data's)."""
    if frame.empty:
        empty = np.empty(0)
        return Timeline(empty, empty, empty, empty)
    starts = frame["t_submit"].to_numpy(dtype=float)
    ends = interval_ends(frame)
    t0, t1 = float(starts.min()), float(max(ends.max(), starts.max()))
    grid = np.linspace(t0, t1, points)
    inflight = concurrency_at(grid, starts, ends)
    create = frame["create_s"].to_numpy(dtype=float)
    ready_after = frame["ready_s"].to_numpy(dtype=float)
    ready_at = starts + create + ready_after
    usable = ~np.isnan(ready_at)
    ready = concurrency_at(grid, ready_at[usable], np.maximum(ends[usable], ready_at[usable]))
    failed = (frame["outcome"] == "failed").to_numpy()
    failed_cumulative = np.searchsorted(np.sort(ends[failed]), grid, side="right")
    return Timeline(t=grid - t0, inflight=inflight, ready=ready, failed_cumulative=failed_cumulative)
