"""The engine's health answer, made cheap, says what it said: the same quantiles, the same recent window.

`LoopHealth.snapshot` is asked twice a second for the whole run; it used to rebuild the recent window from its two
halves (a reset of 23k counts in Python) and walk each histogram once per quantile. Now the window is kept as the
probes come and every quantile comes from one pass: these tests hold both to the old way's values.
"""

from __future__ import annotations

import random

import pytest
from hdrh.histogram import HdrHistogram

from foundation.quantiles import hdr_quantile
from harness.engine.health import LoopHealth, hdr_quantiles
from harness.wire.messages import RECENT_WINDOW_S

QS = (0.01, 0.5, 0.9, 0.99, 0.999, 1.0)


@pytest.mark.parametrize("seed", range(40))
def test_one_pass_quantiles_are_hdrhs_own(seed: int) -> None:
    rng = random.Random(seed)
    histogram = HdrHistogram(1, 3_600_000_000, 3)
    for _ in range(rng.choice([1, 2, 7, 60, 100, 999, 5000])):
        histogram.record_value(
            rng.choice([1, rng.randint(1, 2048), rng.randint(2048, 10**6), rng.randint(1, 3_600_000_000)])
        )
    merged = HdrHistogram(1, 3_600_000_000, 3)
    merged.add(histogram)  # a merged one keeps its max as the highest equivalent value, not the value itself
    for h in (histogram, merged):
        assert hdr_quantiles(h, QS) == [hdr_quantile(h, q) for q in QS]


def test_an_empty_histogram_has_no_quantiles() -> None:
    assert hdr_quantiles(HdrHistogram(1, 3_600_000_000, 3), QS) == [None] * len(QS)


def test_the_recent_window_is_both_halves_across_rotations() -> None:
    """Probes over several rotations: the snapshot's recent figures are those of the two halves merged afresh."""
    rng = random.Random(7)
    health = LoopHealth(interval_s=0.1)
    now = health._rotated
    for step in range(700):  # 70 s of probes: seven rotations
        start = now
        now = start + 0.1 + rng.choice([0.0002, 0.003, 0.02, 0.4]) * rng.random()
        health.record(start, now)
        if step % 37 == 0 or step == 699:
            rebuilt = HdrHistogram(1, 3_600_000_000, 3)
            for half in health._recent:
                rebuilt.add(half)
            snap = health.snapshot()
            assert snap.recent_lag_p99_ms == (hdr_quantile(rebuilt, 0.99) or 0) / 1000
            assert snap.recent_lag_max_ms == rebuilt.get_max_value() / 1000
            assert snap.loop_lag_p50_ms == (hdr_quantile(health.histogram, 0.5) or 0) / 1000
            assert snap.loop_lag_p99_ms == (hdr_quantile(health.histogram, 0.99) or 0) / 1000
            assert snap.loop_lag_samples == step + 1
    assert now - health._rotated < RECENT_WINDOW_S  # it did rotate
    health.reset()
    assert health.snapshot().recent_lag_max_ms == 0.0
