"""The one quantile rule: untrimmed nearest rank, the q-quantile of n values is the one at rank ceil(q·n).

Every value printed was observed (no interpolation between two rollouts), and the rule is numpy's
`inverted_cdf` to the bit: the summary, the report tables, compare, the live view, the engine's recent
window and the offline simulator all pick the same sample. Before this module the engine's live window used
`int(q·n)`, which made the "p99" of 100 samples their maximum while the summary said the 99th.

Pure Python, so the engine and the simulated vendors can use it without the results code.
"""

from __future__ import annotations

import math
from typing import Any, Protocol


class Sorted(Protocol):
    """Values sorted ascending: a list, or a numpy array (which is not a `Sequence` to a type checker)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Any: ...


class Histogram(Protocol):
    """What this rule needs of an `hdrh.histogram.HdrHistogram` (the live views' mergeable counters)."""

    def get_total_count(self) -> int: ...

    def get_value_at_percentile(self, percentile: float) -> int: ...


def nearest_rank_index(n: int, q: float) -> int:
    """0-based index of the q-quantile among n sorted values: rank ceil(q·n), clipped into 1..n.

    Written as numpy's `inverted_cdf` computes it (virtual index n·q − 1, rounded up), so float edge cases
    such as 0.99 · 100 fall the same way as in `np.quantile(..., method="inverted_cdf")`.
    """
    if n < 1:
        raise ValueError(f"a quantile of {n} values")
    return min(max(math.ceil(n * q - 1.0), 0), n - 1)


def nearest_rank(sorted_values: Sorted, q: float) -> float:
    """The q-quantile of values sorted ascending (a list or a numpy array); NaN when there are none."""
    if len(sorted_values) == 0:
        return math.nan
    return float(sorted_values[nearest_rank_index(len(sorted_values), q)])


def hdr_quantile(histogram: Histogram, q: float) -> int | None:
    """The value an HdrHistogram holds at the q-quantile's rank (its highest equivalent value); None when empty.

    `hdrh` rounds its own target count (int(p·n/100 + 0.5)) where this rule rounds up: for 60 samples its "p99"
    is the 59th, ours the 60th. Asking for exactly rank/n lands on our rank whatever its rounding.
    """
    n = histogram.get_total_count()
    if n == 0:
        return None
    return int(histogram.get_value_at_percentile(100.0 * (nearest_rank_index(n, q) + 1) / n))
