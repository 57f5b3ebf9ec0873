"""The engine loop's recent stalls, and the worst one a rollout must bear, found at C speed.

Every rollout asks once, at its first command's answer, for the loop's worst stall since it began. Under load every
probe (10 a second) is a stall, so a rollout of a 20 s boot looks back over ~250 of them; walked in Python that was
~0.4 ms a rollout, 4 s of the engine's CPU when 10,000 sandboxes came ready within 4 s (py-spy, 2026-12-07). Kept
in arrays, the rollout's stalls are one binary search and a few vector operations away (~20 µs); a short
rollout's few stalls are still walked, which is quicker than that.
"""

from __future__ import annotations

from collections import deque

import numpy as np

STALLS_KEPT = 4096  # at one per probe, at least 6.8 minutes of the loop's stalls: longer than a rollout's TTI
WALKED = 8  # a rollout that began within the newest this many stalls has them walked (~2 µs, not ~20 µs)


class StallLog:
    """The last `kept` stalls as (late from, late to) monotonic instants, oldest first; they never overlap, so
    both columns rise."""

    def __init__(self, kept: int = STALLS_KEPT) -> None:
        self.kept = kept
        self._from = np.empty(2 * kept)
        self._to = np.empty(2 * kept)
        self._n = 0
        self._newest: deque[tuple[float, float]] = deque(maxlen=WALKED)

    def __len__(self) -> int:
        return min(self._n, self.kept)

    def append(self, late_from: float, late_to: float) -> None:
        if self._n == len(self._to):  # full: the newest kept-1 move to the front (once every `kept` stalls)
            keep = self.kept - 1
            self._from[:keep] = self._from[self._n - keep : self._n]
            self._to[:keep] = self._to[self._n - keep : self._n]
            self._n = keep
        self._from[self._n] = late_from
        self._to[self._n] = late_to
        self._n += 1
        self._newest.append((late_from, late_to))

    def worst_since(self, since: float, outside: tuple[float, float] | None = None) -> float:
        """The most of any one stall that lies after `since` and outside the window `outside` (0 when none)."""
        newest = self._newest
        if len(newest) == len(self) or newest[0][1] <= since:  # every stall after `since` is among the newest
            worst = 0.0
            for late_from, late_to in newest:
                if late_to > since:
                    worst = max(worst, length_outside(max(late_from, since), late_to, outside))
            return worst
        first = max(0, self._n - self.kept)
        after = first + int(np.searchsorted(self._to[first : self._n], since, side="right"))  # ends after since
        starts = np.maximum(self._from[after : self._n], since)
        ends = self._to[after : self._n]
        lengths = ends - starts
        if outside is not None:
            lengths -= np.maximum(np.minimum(ends, outside[1]) - np.maximum(starts, outside[0]), 0.0)
        return max(0.0, float(lengths.max())) if len(lengths) else 0.0


def length_outside(start: float, end: float, window: tuple[float, float] | None) -> float:
    """How long [start, end] lasts outside `window`."""
    length = max(0.0, end - start)
    if window is not None:
        length -= max(0.0, min(end, window[1]) - max(start, window[0]))
    return length
