"""Built-in profiles against their public calibration targets, on the VirtualClock (seconds, not hours).

Targets (brief; sources in the profiles): modal-like sequential ~ computesdk 2026-04-01 (median 2.66 s,
p95 11.78 s, p99 22.39 s, 98% success); a burst of 100 stays healthy; a burst of 960 collapses into
init failures (mostly "Runtime did not start within 299s") with a long survivor tail. prime-like keeps
960 in flight clean apart from its small injected error rates.
"""

from __future__ import annotations

import pytest

from providers.sim.core.experiments import BurstResult, simulate_burst, simulate_sequential


@pytest.fixture(scope="module")
def modal_sequential() -> BurstResult:
    return simulate_sequential("modal-like", 2000, seed=11)


def test_modal_like_sequential_matches_computesdk(modal_sequential: BurstResult) -> None:
    r = modal_sequential
    assert r.quantile(0.50) == pytest.approx(2.66, rel=0.30)
    assert r.quantile(0.95) == pytest.approx(11.78, rel=0.30)
    assert r.quantile(0.99) == pytest.approx(22.39, rel=0.40)
    assert 0.97 <= 1 - r.failure_rate <= 0.995


@pytest.mark.parametrize("seed", range(5))
def test_modal_like_burst_of_100_is_healthy(seed: int) -> None:
    r = simulate_burst("modal-like", 100, seed=seed)
    assert r.failure_rate <= 0.03 + 0.02  # per seed: binomial noise around the ~2% base rate
    assert 1.8 <= r.quantile(0.50) <= 3.5


def test_modal_like_burst_of_100_failure_rate_over_seeds() -> None:
    runs = [simulate_burst("modal-like", 100, seed=seed) for seed in range(20)]
    assert sum(r.failure_rate for r in runs) / len(runs) <= 0.03


@pytest.mark.parametrize("seed", range(3))
def test_modal_like_burst_of_960_collapses(seed: int) -> None:
    r = simulate_burst("modal-like", 960, seed=seed)
    init = r.init_failures()
    assert init >= 0.10 * 960
    failures = r.failures()
    assert failures["PROVISIONING_TIMEOUT"] > init / 2, failures
    assert r.quantile(0.99) >= 5 * r.quantile(0.50)


def test_modal_like_starter_quota_via_override() -> None:
    from providers.sim.core.profile import load_profile

    starter = load_profile("modal-like").with_overrides({"quota.max_active": 100})
    r = simulate_burst(starter, 300, seed=1)
    assert r.failures()["QUOTA_EXHAUSTED"] >= 195


def test_prime_like_960_in_flight_is_clean() -> None:
    r = simulate_burst("prime-like", 960, seed=4)
    assert r.failure_rate <= 0.01
    assert r.failures().keys() <= {"TRANSIENT", "BOOT_FAILED", "IMAGE_PULL_FAILED"}
