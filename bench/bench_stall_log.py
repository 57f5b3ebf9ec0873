"""What a rollout's loop-lag charge costs the engine: `StallLog.worst_since` against the plain walk over every
stall it replaced, side by side in one run, for rollouts of 0.1, 2 and 20 s on a loop stalled at every probe.

Each rollout asks once, at its first command. Under load every probe (10 a second) is a stall, so the walk grows
with the rollout's TTI: 10,000 sandboxes of a 20 s boot came ready within 4 s and walked ~250 stalls each, 9% of
the engine's samples in that wave (py-spy, 2026-12-07).

    python bench/bench_stall_log.py           # ~5 s
"""

from __future__ import annotations

import functools
import random
import timeit
from collections import deque

from harness.engine.stall_log import STALLS_KEPT, StallLog, length_outside

CALLS = 2000


def walked(stalls: deque[tuple[float, float]], since: float, outside: tuple[float, float] | None) -> float:
    """The walk `LoopHealth.lag_since` made through 704716e: newest first, every stall after `since`."""
    worst = 0.0
    for late_from, late_to in reversed(stalls):
        if late_to <= since:
            break
        worst = max(worst, length_outside(max(late_from, since), late_to, outside))
    return worst


def main() -> None:
    rng = random.Random(1)
    stalls: deque[tuple[float, float]] = deque(maxlen=STALLS_KEPT)
    log, now = StallLog(), 1000.0
    for _ in range(STALLS_KEPT):
        now += 0.1 + rng.random() * 0.01
        late = 0.001 + rng.random() * 0.02
        stalls.append((now - late, now))
        log.append(now - late, now)
    print(f"{'rollout':>8}  {'stalls':>6}  {'walk (us)':>9}  {'StallLog (us)':>13}  {'walk / StallLog':>15}")
    for tti in (0.1, 2.0, 20.0):
        since, window = now - tti, (now - 0.8 * tti, now - 0.7 * tti)
        assert walked(stalls, since, window) == log.worst_since(since, window)
        walk = timeit.timeit(functools.partial(walked, stalls, since, window), number=CALLS) / CALLS * 1e6
        arrays = timeit.timeit(functools.partial(log.worst_since, since, window), number=CALLS) / CALLS * 1e6
        count = sum(1 for _, late_to in stalls if late_to > since)
        print(f"{tti:>7g}s  {count:>6}  {walk:>9.1f}  {arrays:>13.1f}  {walk / arrays:>15.1f}")


if __name__ == "__main__":
    main()
