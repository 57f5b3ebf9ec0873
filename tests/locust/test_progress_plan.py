"""The live progress line says where the run is against its plan (issue #35 row 11): elapsed of the planned total,
stage i of N, and an ETA."""

from __future__ import annotations

import re

from harness.locust.live import progress
from harness.locust.live.live_view import LiveView
from harness.wire.messages import EngineStats
from harness.wire.stage_counters import StageStats


def _live(stage: str, ended: int) -> LiveView:
    stats = StageStats()
    for _ in range(ended):
        stats.add("ok", None, 0.5)
    stats.ended = ended
    live = LiveView()
    live.update("local", EngineStats(stages={stage: stats.to_wire()}))
    return live


def test_a_ramp_shows_elapsed_of_total_stage_i_of_n_and_the_time_left() -> None:
    # three stages of 5, 10 and 20 users at 5 users/s, each held 10 s: 1 + 1 + 2 s of ramp + 30 s of hold
    plan = progress.holding_plan((5, 10, 20), hold_s=10.0, spawn_rate=5.0)
    assert plan.stages == 3 and plan.total_s == 34.0
    line = progress.format_progress(
        12, "02-ramp10", 10, 10, _live("02-ramp10", 3), time_scale=1.0, plan=plan, stage_index=2
    )
    head = line.split("|")[0]
    assert "12s/34s" in head, line
    assert "stage 2/3" in head, line
    assert re.search(r"ETA 22s\b", head), line
    # the shape took longer than planned to reach stage 2 (it holds once the users are there): 4 s into
    # stage 2 at 20 s, 7 s of it and 12 s of stage 3 are left
    late = progress.format_progress(
        20, "02-ramp10", 10, 10, _live("02-ramp10", 3), time_scale=1.0, plan=plan, stage_index=2, stage_age_s=4.0
    )
    assert re.search(r"\[20s/39s ETA 19s\] stage 2/3", late), late


def test_locusts_run_time_caps_the_plan() -> None:
    assert progress.holding_plan((10,), hold_s=600.0, spawn_rate=10.0, run_time_s=60.0).total_s == 60.0


def test_a_burst_estimates_its_time_left_from_the_rollouts_that_ended() -> None:
    plan = progress.RunPlan(stages=2, total_s=None, step_size=100)
    # step 1 of 2, 50 of its 100 rollouts ended after 30 s: half a step in 30 s, 1.5 steps to go
    line = progress.format_progress(
        30, "01-burst100", 100, 100, _live("01-burst100", 50), time_scale=1.0, plan=plan, stage_index=1
    )
    head = line.split("|")[0]
    assert "stage 1/2" in head and re.search(r"ETA ~90s\b", head), line


def test_long_times_read_as_minutes_and_hours() -> None:
    assert [progress.clock(s) for s in (45, 125, 3720)] == ["45s", "2m05s", "1h02m"]
