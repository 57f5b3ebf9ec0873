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
from harness.wire.messages import EngineStats

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


def test_a_tick_just_before_the_end_is_not_repeated(capsys: pytest.CaptureFixture[str]) -> None:
    printer = printer_of_a_stage_with_ended_rollouts()
    printer.start()
    printer._print()  # what the tick prints, moments before the run ends
    printer.stop()
    assert len(progress_lines(capsys)) == 1


def test_a_printer_never_started_prints_nothing_on_stop(capsys: pytest.CaptureFixture[str]) -> None:
    printer_of_a_stage_with_ended_rollouts().stop()
    assert progress_lines(capsys) == []
