"""Every built-in profile against its public figures (providers/sim/core/targets/), on the VirtualClock.

`stampede calibrate` prints the same rows; providers/sim/README.md holds its output, checked here to be current.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from providers.sim.core.calibration import calibrate, computesdk_stats, render
from providers.sim.core.experiments import simulate_burst
from providers.sim.core.profile import profile_names

README = Path(__file__).resolve().parents[1] / "providers" / "sim" / "README.md"


@pytest.mark.parametrize("name", profile_names())
def test_profile_within_tolerance_of_every_public_figure(name: str) -> None:
    rows = calibrate(name)
    bad = [(r.figure.protocol, r.figure.stat, r.simulated) for r in rows if not r.ok]
    assert not bad, bad


def test_readme_calibration_tables_are_the_generators_output() -> None:
    text = README.read_text()
    for name in profile_names():
        assert render(name, calibrate(name), 10) in text, f"regenerate the {name} table (see the README's command)"


def test_computesdk_stats_trim_five_percent_then_nearest_rank() -> None:
    values = list(range(1, 101))  # trims 1-5 and 96-100
    assert computesdk_stats(values) == {"p50": 50.5, "p95": 91, "p99": 95}


def test_modal_like_960_shows_both_symptoms_with_retries() -> None:
    r = simulate_burst("modal-like", 960, seed=0, retries=5, ready_timeout_s=900.0)
    assert r.attempt_failures["PROVISIONING_TIMEOUT"] >= 0.3 * 960
    assert r.startups()[-1] >= 600.0  # tens of minutes, in the same run
    assert r.failure_rate < 0.05


def test_modal_like_starter_quota_via_override() -> None:
    from providers.sim.core.profile import load_profile

    starter = load_profile("modal-like").with_overrides({"quota.max_active": 100})
    r = simulate_burst(starter, 300, seed=1)
    assert r.failures()["QUOTA_EXHAUSTED"] >= 195


def test_readme_names_the_generating_command() -> None:
    assert re.search(r"stampede calibrate", README.read_text())
