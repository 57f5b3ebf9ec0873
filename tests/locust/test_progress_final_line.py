"""A run that ends between two progress ticks still ends its progress on the final counts.

A burst at a time scale can finish in less than one interval; before this, its last line (if any) showed the
stage before its rollouts ended. Real greenlets and a real run state; the interval is long enough that no tick
fires, so what is printed comes from stopping alone.
"""

from __future__ import annotations

import types

import gevent
import pytest

from harness.locust.live.progress import ProgressPrinter
from harness.locust.run_state import RunState, Stage
from harness.locust.settings import RunSettings
from harness.wire.messages import EngineStats, HealthSnapshot

NO_TICK_S = 3600.0


def printer_of_a_stage_with_ended_rollouts() -> ProgressPrinter:
    state = RunState(RunSettings(users=8))
    state.stage = Stage(1, "01-burst8", 8)
    state.live.update("engine-0", EngineStats(run_id="r", ok=7, failed=1, started=8))
    runner = types.SimpleNamespace(user_count=8, target_user_count=8, environment=None)
    return ProgressPrinter(runner, state, NO_TICK_S)


def progress_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "users " in line]


def test_stopping_prints_the_final_counts_when_no_tick_came(capsys: pytest.CaptureFixture[str]) -> None:
    printer = printer_of_a_stage_with_ended_rollouts()
    printer.start()
    gevent.sleep(0)
    printer.stop()
    (line,) = progress_lines(capsys)
    assert "01-burst8" in line and "ok 7 failed 1" in line, line


def test_a_tick_before_the_last_rollouts_ended_is_followed_by_the_final_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    printer = printer_of_a_stage_with_ended_rollouts()
    printer.state.live.update("engine-0", EngineStats(run_id="r", inflight=8, started=8))
    printer.start()
    printer._print()  # the tick, moments before the rollouts end (the CI run's "[2s] ... ok 0 failed 0")
    printer.state.live.update("engine-0", EngineStats(run_id="r", ok=7, failed=1, started=8))
    printer.stop()
    first, last = progress_lines(capsys)
    assert "ok 0 failed 0" in first and "ok 7 failed 1" in last, (first, last)


def test_a_tick_that_already_showed_the_final_counts_is_not_repeated(capsys: pytest.CaptureFixture[str]) -> None:
    printer = printer_of_a_stage_with_ended_rollouts()
    printer.start()
    printer._print()  # the tick, after every rollout ended
    printer.stop()
    assert len(progress_lines(capsys)) == 1


def test_a_tick_with_the_same_counts_is_not_repeated_for_the_engines_lag_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    printer = printer_of_a_stage_with_ended_rollouts()
    printer.start()
    printer._print()
    health = HealthSnapshot(recent_lag_p99_ms=40.0, cpu_percent=55.0)  # the engine's lag and CPU moved since
    printer.state.live.update("engine-0", EngineStats(run_id="r", ok=7, failed=1, started=8, health=health))
    assert "loop lag p99 40ms" in printer.line()
    printer.stop()
    assert len(progress_lines(capsys)) == 1


def test_a_printer_never_started_prints_nothing_on_stop(capsys: pytest.CaptureFixture[str]) -> None:
    printer_of_a_stage_with_ended_rollouts().stop()
    assert progress_lines(capsys) == []
