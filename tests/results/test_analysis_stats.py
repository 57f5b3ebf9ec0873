"""The vectorised statistics behind report and export: the same numbers as the plain per-group computation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.results.figures.quantiles import REPORT_QUANTILES, downsample_sorted, group_sorted, quantiles
from harness.results.figures.stage_aggregate import _censored_upper
from harness.results.read.concurrency import concurrency_at_submit, concurrency_during, group_levels, timeline


@pytest.mark.parametrize("seed", range(5))
def test_grouped_nearest_rank_quantiles_equal_numpy_per_group(seed):
    rng = np.random.default_rng(seed)
    n, groups = int(rng.integers(1, 5000)), int(rng.integers(1, 8))
    codes = rng.integers(0, groups, n)
    values = rng.lognormal(0, 1, n)
    values[rng.random(n) < 0.1] = np.nan
    sample = group_sorted(codes, values, groups)
    table = sample.quantiles([q for _, q in REPORT_QUANTILES])
    maxima, means = sample.maxima(), sample.means()
    for g in range(groups):
        expected = quantiles(values[codes == g])
        names = [name for name, _ in REPORT_QUANTILES]
        for name, got in zip(names, table[g], strict=True):
            assert got == expected[name] or (np.isnan(got) and np.isnan(expected[name]))
        assert maxima[g] == expected["max"] or np.isnan(expected["max"])
        kept = values[(codes == g) & ~np.isnan(values)]
        if kept.size:
            assert means[g] == pytest.approx(kept.mean())


def test_empty_groups_are_nan_not_errors():
    sample = group_sorted(np.array([0, 0, 2]), np.array([1.0, 2.0, 3.0]), 4)
    table = sample.quantiles([0.5, 1.0])
    assert table[0].tolist() == [1.0, 2.0] and np.isnan(table[1]).all() and table[2].tolist() == [3.0, 3.0]
    assert np.isnan(sample.maxima()[3])


def test_downsampled_cdf_keeps_min_and_max():
    values = np.sort(np.random.default_rng(0).random(100_000))
    x, y = downsample_sorted(values, points=500)
    assert x[0] == values[0] and x[-1] == values[-1] and y[-1] == 1.0 and len(x) <= 500


def test_concurrency_from_intervals_counts_every_engine():
    # two engines each believe one rollout is in flight; the fleet had two, then three
    frame = pd.DataFrame({"t_submit": [0.0, 0.5, 1.0, 5.0], "total_s": [2.0, 2.0, 2.0, 1.0]})
    assert concurrency_at_submit(frame).tolist() == [1, 2, 3, 1]


def test_timeline_counts_inflight_ready_and_failures():
    frame = pd.DataFrame(
        {
            "t_submit": [0.0, 0.0, 0.0],
            "total_s": [10.0, 10.0, 4.0],
            "create_s": [1.0, 1.0, 1.0],
            "ready_s": [1.0, 1.0, np.nan],
            "outcome": ["ok", "ok", "failed"],
        }
    )
    line = timeline(frame, points=11)  # t = 0, 1, ..., 10
    assert line.inflight[1] == 3 and line.ready[3] == 2 and line.ready[1] == 0
    assert line.failed_cumulative[3] == 0 and line.failed_cumulative[5] == 1 and line.inflight[5] == 2


def test_censored_upper_bound_treats_cut_off_rollouts_as_slowest():
    ok = np.arange(1.0, 99.0)  # 98 observed
    assert _censored_upper(ok, 0, np.array([0.99]))[0] == 98.0
    assert _censored_upper(ok, 2, np.array([0.99]))[0] == float("inf")  # rank 99 of 100 is censored
    assert _censored_upper(ok, 1, np.array([0.5]))[0] == 50.0


def test_concurrency_during_a_start_reads_a_burst_as_its_width():
    # a burst of 4 submitted over 30 ms: at submit they see 1..4, while starting every one met 4
    burst = pd.DataFrame(
        {"t_submit": [0.0, 0.01, 0.02, 0.03], "total_s": [3.0] * 4, "create_s": [0.1] * 4, "ready_s": [1.0] * 4}
    )
    assert concurrency_at_submit(burst).tolist() == [1, 2, 3, 4]
    assert concurrency_during(burst).tolist() == [4, 4, 4, 4]
    # one start every 600 ms, each usable after 1.1 s and done after 1.5 s: two or three overlap, never 100
    staggered = pd.DataFrame(
        {"t_submit": np.arange(100) * 0.6, "total_s": [1.5] * 100, "create_s": [0.1] * 100, "ready_s": [1.0] * 100}
    )
    assert set(concurrency_during(staggered).tolist()) <= {2, 3}
    # a row that never became usable is counted over its whole interval
    failed = pd.DataFrame(
        {"t_submit": [0.0, 5.0], "total_s": [10.0, 1.0], "create_s": [0.1, 0.1], "ready_s": [np.nan, 0.5]}
    )
    assert concurrency_during(failed).tolist() == [2, 2]


def test_group_levels_pools_close_levels_and_keeps_steps_apart():
    assert group_levels([104.0, 3.0, 96.0, 200.0, 110.0]) == [1, 0, 1, 2, 1]
