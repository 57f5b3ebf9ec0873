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

README = Path(__file__).resolve().parents[2] / "providers" / "sim" / "README.md"


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


def test_prime_like_held_burst_waits_in_pending_past_115s() -> None:
    """verifiers PR #2414: under load Prime's sandboxes sit in PENDING past 115 s. A burst past the warm pool,
    each sandbox held for a rollout's length, leaves the rest waiting for new hosts (vendor seconds, VirtualClock)."""
    from providers.sim.core.calibration import HELD_BURST_HOLD_S, HELD_BURST_N

    r = simulate_burst("prime-like", HELD_BURST_N, seed=0, hold_s=HELD_BURST_HOLD_S)
    assert r.pending_max > 115.0
    assert r.pending_p99 > 115.0
    assert r.pending_share_over(115.0) >= 0.25  # the 512 past the 1,024 warm slots, of 1,536
    assert r.never_left_pending() == 0 and r.failure_rate < 0.02  # they wait; they do not fail


@pytest.mark.parametrize(("n", "hold_s"), [(1536, 0.0), (960, 600.0)], ids=["no-holds", "within-warm-pool"])
def test_prime_like_pending_stays_short_without_holds_or_within_the_warm_pool(n: int, hold_s: float) -> None:
    """The control: the same burst released after its first command frees slots in seconds, and a held burst
    that fits the warm pool never queues, so the held burst's figure comes from the holds and the pool size."""
    r = simulate_burst("prime-like", n, seed=0, hold_s=hold_s)
    assert 0.0 <= r.pending_max < 30.0
    assert r.pending_share_over(115.0) == 0.0


def test_pending_time_is_acceptance_to_placement_and_holds_only_delay_the_terminate() -> None:
    held = simulate_burst("ideal", 50, seed=3, hold_s=100.0)
    free = simulate_burst("ideal", 50, seed=3)
    assert [s.tti_s for s in held.samples] == [s.tti_s for s in free.samples]  # the hold starts after the command
    assert all(s.pending_s is not None and s.pending_s >= 0.0 for s in held.samples if s.ok)
    assert held.stats["ended"] == free.stats["ended"] == {"TERMINATED": 50}  # every sandbox let go, by the client
    assert free.stats["now"] < 100.0 <= held.stats["now"]  # ... 100 vendor seconds after its command when held
    with pytest.raises(ValueError):
        simulate_burst("ideal", 1, hold_s=-1.0)
