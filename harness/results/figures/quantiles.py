"""Grouped, untrimmed, nearest-rank quantiles without a Python loop over rows.

One sort per metric (by group, then value) serves every group and every quantile: the value at rank
ceil(q·n) within a group is picked by index arithmetic (the one rule, `foundation.quantiles`, numpy's
`inverted_cdf` to the bit, so the numbers equal `quantiles` of one sample), and the sorted runs are kept for
the CDF plots.

`REPORT_QUANTILES` / `QUANTILE_NAMES` are the one list of levels every table, CSV and summary prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from foundation.quantiles import nearest_rank, nearest_rank_index

REPORT_QUANTILES: tuple[tuple[str, float], ...] = (
    ("p50", 0.5),
    ("p90", 0.9),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p99.9", 0.999),
)
QUANTILE_NAMES: tuple[str, ...] = (*(name for name, _ in REPORT_QUANTILES), "max")  # the columns tables print
MIN_TAIL_SAMPLES = 10
"""A quantile q of n samples is estimated from the n·(1-q) samples beyond it; below this many it is mostly noise."""
SMALL_SAMPLE_MARK = "~"
SMALL_SAMPLE_NOTE = (
    f"{SMALL_SAMPLE_MARK} fewer than {MIN_TAIL_SAMPLES} samples lie beyond this quantile "
    f"(n·(1-q) < {MIN_TAIL_SAMPLES}: p90 needs {10 * MIN_TAIL_SAMPLES:,} rollouts, p99 {100 * MIN_TAIL_SAMPLES:,}, "
    f"p99.9 {1000 * MIN_TAIL_SAMPLES:,}): mostly noise"
)
"""The one explanation of the mark, under every table that shows one (summary, report, compare)."""


def supported(q: float, n: int) -> bool:
    """Whether n samples hold enough beyond quantile q to print it unmarked (p99 needs 1,000, p99.9 10,000).

    Every table, summary and export marks a quantile this says no to (the one small-sample rule).
    """
    return round(n * (1.0 - q), 9) >= MIN_TAIL_SAMPLES  # rounded: 100 * (1 - 0.9) is 9.999999999999998


def quantiles(values: Any, qs: tuple[tuple[str, float], ...] = REPORT_QUANTILES) -> dict[str, float]:
    """Nearest-rank quantiles plus max of one sample (an array or a pandas Series); NaN when there are none."""
    if hasattr(values, "dropna"):
        values = values.dropna()
    array = np.asarray(values, dtype=float)
    array = array[~np.isnan(array)]
    if array.size == 0:
        return {name: float("nan") for name, _ in qs} | {"max": float("nan")}
    array.sort()
    result = {name: nearest_rank(array, q) for name, q in qs}
    result["max"] = float(array[-1])
    return result


@dataclass(frozen=True, slots=True)
class GroupedSample:
    """Non-null values of one metric sorted within each group: group g is sorted[starts[g]:starts[g]+counts[g]]."""

    sorted_values: np.ndarray
    starts: np.ndarray
    counts: np.ndarray

    def group(self, index: int) -> np.ndarray:
        start = int(self.starts[index])
        return self.sorted_values[start : start + int(self.counts[index])]

    def quantiles(self, levels: np.ndarray | Sequence[float]) -> np.ndarray:
        """(groups x levels) nearest-rank quantiles; NaN for empty groups."""
        qs = [float(q) for q in levels]
        # one index per (group, level): a handful of stages times five levels, never a loop over rows
        rank = np.array(
            [[nearest_rank_index(n, q) if n else 0 for q in qs] for n in self.counts.tolist()], dtype=np.int64
        ).reshape(len(self.counts), len(qs))
        index = self.starts[:, None] + rank
        out = np.full(index.shape, np.nan)
        nonempty = self.counts > 0
        if self.sorted_values.size:
            out[nonempty] = self.sorted_values[np.minimum(index[nonempty], self.sorted_values.size - 1)]
        return out

    def maxima(self) -> np.ndarray:
        out = np.full(self.counts.shape, np.nan)
        nonempty = self.counts > 0
        out[nonempty] = self.sorted_values[self.starts[nonempty] + self.counts[nonempty] - 1]
        return out

    def means(self) -> np.ndarray:
        sums: np.ndarray | list[float] = (
            np.add.reduceat(self.sorted_values, self.starts[self.counts > 0]) if self.sorted_values.size else []
        )
        out = np.full(self.counts.shape, np.nan)
        out[self.counts > 0] = np.asarray(sums, dtype=float) / self.counts[self.counts > 0]
        return out


def group_sorted(codes: np.ndarray, values: np.ndarray, n_groups: int) -> GroupedSample:
    """Sort the non-null values by (group, value); `codes` are 0..n_groups-1 (negative codes are skipped)."""
    values = np.asarray(values, dtype=float)
    codes = np.asarray(codes, dtype=np.int64)
    keep = ~np.isnan(values) & (codes >= 0)
    kept_codes = codes[keep]
    kept_values = values[keep]
    # group first (a stable integer sort), then sort each group's slice in place: much faster than a lexsort
    sorted_values = kept_values[np.argsort(kept_codes, kind="stable")]
    counts = np.bincount(kept_codes, minlength=n_groups).astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    for start, count in zip(starts.tolist(), counts.tolist(), strict=True):  # one per group, not per row
        sorted_values[start : start + count].sort()
    return GroupedSample(sorted_values=sorted_values, starts=starts, counts=counts)


def quantile_summary(sample: GroupedSample, index: int) -> dict[str, float]:
    """p50 … p99.9, max, mean and n of one group, as the tables print them."""
    levels = [q for _, q in REPORT_QUANTILES]
    row = sample.quantiles(levels)[index]
    result = {name: float(value) for (name, _), value in zip(REPORT_QUANTILES, row, strict=True)}
    result["max"] = float(sample.maxima()[index])
    result["mean"] = float(sample.means()[index])
    result["n"] = int(sample.counts[index])
    return result


def downsample_sorted(values: np.ndarray, points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """(x, F(x)) of an empirical CDF at evenly spaced ranks, always keeping the minimum and the maximum.

    For plots only: the statistics are computed on every value.
    """
    n = values.size
    if n == 0:
        return np.empty(0), np.empty(0)
    if n <= points:
        ranks = np.arange(n)
    else:
        ranks = np.unique(np.linspace(0, n - 1, points).round().astype(np.int64))
    return values[ranks], (ranks + 1) / n
