"""The engine's own load per stage: recorded by the engine, summed over engines, shown beside each stage."""

from __future__ import annotations

import json
import math
import time

from harness.engine.stage_health import StageHealth
from harness.results.figures.engine_load import engine_load_of, stage_engine_load
from harness.results.figures.timing_error import TimingError
from harness.results.render.summary import format_stage_table
from tests.support.stage_stats import make_stage


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_and_lag_are_booked_to_the_stage_in_force():
    health = StageHealth()
    health.record_lag(5_000)  # before any stage: booked nowhere
    health.switch("01-ramp60")
    health.record_lag(2_000)
    health.switch("02-ramp240")
    _burn(0.2)  # CPU spent while 02 is in force
    health.record_lag(40_000)
    health.switch("")  # an unnamed stage changes nothing
    summary = health.summary()
    assert set(summary) == {"01-ramp60", "02-ramp240"}
    assert summary["02-ramp240"]["cpu_s"] >= 0.15 > summary["01-ramp60"]["cpu_s"]
    assert summary["01-ramp60"]["lag_max_ms"] == 2.0 and summary["02-ramp240"]["lag_p99_ms"] >= 39.9
    assert summary["02-ramp240"]["lag_samples"] == 1


def test_engines_add_up_their_cpu_and_the_worst_lag_is_shown(tmp_path):
    a = {"stage_health": {"s1": {"cpu_share": 0.6, "lag_p99_ms": 12.0}, "s2": {"cpu_share": 0.9, "lag_p99_ms": 80.0}}}
    b = {"stage_health": {"s1": {"cpu_share": 0.5, "lag_p99_ms": 30.0}}}
    for name, doc in (("engine-w1.json", a), ("engine-w2.json", b)):
        (tmp_path / name).write_text(json.dumps(doc))
    load = stage_engine_load(tmp_path)
    assert load == engine_load_of([a, b])
    assert math.isclose(load["s1"].cpu_share, 1.1) and load["s1"].lag_p99_ms == 30.0
    assert load["s2"].describe() == "90% cpu, lag 80 ms"
    assert stage_engine_load(tmp_path / "missing") == {}  # runs before engines recorded it


def test_the_summary_table_shows_the_engine_column_only_when_known():
    row = make_stage("s1", timing_error=TimingError(0.01, 0.05))
    plain = format_stage_table([row])
    assert "engine" not in plain
    with_engine = format_stage_table([row], engine_load_of([{"stage_health": {"s1": {"cpu_share": 0.25}}}]))
    assert "engine" in with_engine.splitlines()[0] and "25% cpu, -" in with_engine
