"""The live progress line states its unit: vendor seconds when the simulated vendor runs faster than real time."""

from __future__ import annotations

import re

from harness.locust.live.live_view import LiveView
from harness.locust.live.progress import format_progress
from harness.wire.messages import EngineStats
from harness.wire.stage_counters import StageStats


def _live(tti_wall_s: float) -> LiveView:
    stats = StageStats()
    for _ in range(50):
        stats.add("ok", None, tti_wall_s)
    live = LiveView()
    live.update("local", EngineStats(stages={"01-ramp10": stats.to_wire()}))
    return live


def _tti(line: str) -> tuple[float, float]:
    found = re.search(r"TTI p50 ([\d.]+)s? p99 ([\d.]+)", line)
    assert found, line
    return float(found.group(1)), float(found.group(2))


def test_at_time_scale_one_the_line_is_plain_seconds() -> None:
    line = format_progress(5, "01-ramp10", 10, 10, _live(0.5), time_scale=1.0)
    assert "vendor" not in line and "(stage)" in line
    p50, p99 = _tti(line)
    assert abs(p50 - 0.5) < 0.01 and abs(p99 - 0.5) < 0.01


def test_under_a_time_scale_the_line_is_vendor_seconds_and_says_so() -> None:
    line = format_progress(5, "01-ramp10", 10, 10, _live(0.5), time_scale=0.1)
    assert "vendor s (estimate: wall / 0.1; stage)" in line  # no vendor record given: said to be an estimate
    p50, _ = _tti(line)
    assert abs(p50 - 5.0) < 0.05  # 0.5 wall seconds at 0.1 are 5 vendor seconds, as report and summary print
