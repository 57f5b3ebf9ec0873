"""A time-scaled vendor meets a burst as it was sent, and a ramp at the spawn rate the user asked for.

The embedded vendor plays a burst's sending 1:1 with real time (providers.sim.core.clock.LoopClock): at time scale
0.1 the harness's ~0.6 s to send 960 creates would otherwise reach it as 6 vendor s. A ramp's spawn is a pace the
user chose, so its vendor runs at the scale throughout (harness.locust.setting_values.PACED_BY_THE_USER). Read from
the vendor's own record: each create's real arrival beside its vendor time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.locust.setting_values import paces_bursts
from harness.locust.vendor_process import vendor_env
from harness.results.read.dataset import load_truth
from providers.sim.core.clock import LoopClock

REPO = Path(__file__).resolve().parents[2]


def opening_pace(tmp_path: Path, *args: str) -> tuple[float, dict]:
    """Vendor seconds per real second over the run's first 30 creates (10 at modal-like's 0.1 unpaced, 1 paced),
    and run.json's parameters."""
    argv = [sys.executable, "-m", "harness.cli", "run", "--profile", "modal-like", "--commands", "true"]
    argv += ["--out", str(tmp_path), "--progress-interval", "0", *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    first = load_truth(run_dir).sort_values("created_wall").head(30)
    real = float(first["created_wall"].iloc[-1] - first["created_wall"].iloc[0])
    vendor = float(first["created_s"].iloc[-1] - first["created_s"].iloc[0])
    assert real > 0
    return vendor / real, json.loads((run_dir / "run.json").read_text())["parameters"]


@pytest.mark.parametrize(
    ("scenario", "paced"),
    [("burst", True), ("burst-hold", True), ("ramp", False), ("/x/scenarios/staggered.py", False), ("mine.py", True)],
)
def test_only_scenarios_sent_as_fast_as_the_harness_can_are_paced(scenario: str, paced: bool) -> None:
    assert paces_bursts(scenario) is paced


def test_an_unpaced_vendor_environment_turns_the_clocks_pacing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in vendor_env(burst_pacing=False).items():
        monkeypatch.setenv(key, value)
    assert LoopClock(0.1).pace_window_s == 0.0  # no wave is ever played 1:1
    monkeypatch.undo()
    for key, value in vendor_env(burst_pacing=True).items():
        monkeypatch.setenv(key, value)
    assert LoopClock(0.1).pace_window_s > 0.0


@pytest.mark.slow
def test_a_burst_meets_the_vendor_as_it_was_sent(tmp_path: Path) -> None:
    pace, parameters = opening_pace(tmp_path, "--scenario", "burst", "--users", "40")
    assert parameters["burst_pacing"] is True
    assert pace < 2.0, pace  # 1:1 while it is sent


@pytest.mark.slow
def test_a_ramp_meets_the_vendor_at_its_spawn_rate(tmp_path: Path) -> None:
    pace, parameters = opening_pace(tmp_path, "--scenario", "ramp", "--stages", "30", "--hold", "1")
    assert parameters["burst_pacing"] is False
    assert pace > 9.0, pace  # the scale's 10 vendor s a real second, however the creates bunched
