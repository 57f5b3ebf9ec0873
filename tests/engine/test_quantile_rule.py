"""One quantile rule: what the live view says while a run goes is what the summary says after it.

The engine's live window, the progress line's merged histograms and the summary read the same 100 rollouts
(TTI 1..100 s, written by a real engine to real parquet); all must pick the 99th for p99. The engine's window
once used int(q·n), which made the live "p99" of 100 samples their maximum (100 s) while the summary said 99 s.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import numpy as np
import pytest

from foundation.quantiles import hdr_quantile, nearest_rank
from harness.engine.health import LoopHealth
from harness.engine.run import EngineRun, recent_quantiles
from harness.locust.live.live_view import LiveView
from harness.locust.live.progress import format_progress
from harness.results.figures.run_figures import load_aggregate
from harness.wire.messages import EngineConfig, EngineStats
from harness.wire.records import RolloutRecord
from harness.wire.stage_counters import StageStats, new_histogram
from tests.support.rollout_rows import finished_rollout
from tests.support.scripted_provider import ScriptedProvider

STAGE = "01-hold"


def _record(index: int, tti_s: float) -> RolloutRecord:
    return finished_rollout(
        index,
        run_id="quantiles",
        worker="t0",
        rollout_id=f"r{index:03d}",
        provider="scripted",
        profile="scripted",
        scenario="test",
        stage=STAGE,
        inflight_at_submit=1,
        t_submit=time.time() - 200 + index,
        create_s=0.001,
        ready_s=tti_s - 0.002,
        tti_s=tti_s,
        exec_s=0.001,
        terminate_s=0.001,
        total_s=tti_s + 0.001,
    )


async def _engine_run(tmp_path: Path, ttis: list[float]) -> EngineStats:
    """A real engine run records the rollouts (its live window and its parquet shards), as a run would."""
    config = EngineConfig(
        run_id="quantiles",
        worker="t0",
        out_dir=str(tmp_path),
        provider="scripted",
        profile="scripted",
        scenario="test",
        plan={"commands": [["true"]]},
    )
    run = EngineRun(config, ScriptedProvider({}), LoopHealth())
    for index, tti in enumerate(ttis):
        run.record_row(_record(index, tti))
    stats = run.stats()
    await run.writer.close()
    return stats


def test_the_live_view_and_the_summary_agree_on_the_p99_of_100_samples(tmp_path: Path) -> None:
    ttis = [float(v) for v in range(1, 101)]
    stats = asyncio.run(_engine_run(tmp_path, ttis))

    _, aggregate = load_aggregate(tmp_path / "quantiles", "wall")
    summary_p99 = aggregate.run.phases["tti"]["p99"]
    assert summary_p99 == 99.0  # the 99th of 100, as numpy's inverted_cdf picks it
    assert stats.recent_tti_p99_s == summary_p99  # the engine's live window: was 100.0, the maximum
    assert stats.recent_tti_p50_s == aggregate.run.phases["tti"]["p50"] == 50.0

    live = LiveView()
    live.update("t0", stats)
    line = format_progress(5, STAGE, 10, 10, live, time_scale=1.0)
    found = re.search(r"TTI p50 ([\d.]+)s p99 ([\d.]+)s", line)
    assert found, line
    # the merged histogram holds 3 significant digits: the same sample, not the maximum
    assert float(found.group(2)) == pytest.approx(summary_p99, rel=1e-3)


@pytest.mark.parametrize("n", [1, 7, 60, 100, 1001])
def test_the_merged_histograms_pick_the_summarys_rank(n: int) -> None:
    """hdrh rounds its own rank (for 60 samples its p99 is the 59th); the live view must not."""
    values = np.arange(1, n + 1, dtype=float)
    stage = StageStats()
    for value in values:
        stage.add("ok", None, float(value))
    for q in (0.5, 0.9, 0.99, 0.999):
        live = stage.tti_quantile(q)
        assert live is not None
        assert live == pytest.approx(float(np.quantile(values, q, method="inverted_cdf")), rel=1e-3)


def test_the_rule_is_numpys_inverted_cdf_on_awkward_counts() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 7, 10, 60, 99, 100, 101, 999, 1000, 1001):
        values = np.sort(rng.lognormal(size=n))
        for q in (0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0):
            assert nearest_rank(values, q) == float(np.quantile(values, q, method="inverted_cdf"))
    assert np.isnan(nearest_rank([], 0.5))
    assert hdr_quantile(new_histogram(), 0.99) is None


def test_the_engines_recent_window_picks_by_partition_what_sorting_picks() -> None:
    """The window's quantiles come from numpy's partition, not a sort: the same sample, every count and tie."""
    rng = np.random.default_rng(36)
    qs = (0.5, 0.99, 0.0, 1.0, 0.01)
    assert recent_quantiles([], qs) == [None] * len(qs)
    for n in [*range(1, 120), 997, 24_000]:
        values = (
            [float(v) for v in rng.choice([0.1, 0.2, 0.30000000000000004, 7.0], n)]
            if n % 3 == 0
            else list(rng.exponential(0.05, n))
        )
        expected = [nearest_rank(sorted(values), q) for q in qs]
        got = recent_quantiles(values, qs)
        assert got == expected and all(type(value) is float for value in got)
