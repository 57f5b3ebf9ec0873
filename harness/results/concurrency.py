"""True concurrency from rollout intervals: a sweep line, because `inflight_at_submit` is per engine.

In distributed runs each engine counts only its own rollouts; the real load on the vendor is the number of
intervals [t_submit, t_submit + total_s) that cover an instant, across all rows. Sorting the start and end
times once answers that for every row (or every instant of a timeline) with one searchsorted each.
"""

from __future__ import annotations

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

    The one definition behind "peak in flight" (the end-of-run summary), the report's measured concurrency
    and the latency export's buckets. Ends sort before starts at equal times: [t_submit, end) is half-open.
    """
    starts = frame["t_submit"].to_numpy(dtype=float)
    return concurrency_at(starts, starts, interval_ends(frame))


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
