"""Serial admission of creates (`account.admit_per_s`): the simulator's wait and the fit that recovers it.

A control plane that lets creates in one after another makes a burst of 960 start later than one of 100; the
simulator plays that on the VirtualClock, and the fit reads the rate off a burst's acceptance times, before the
load delay, so the load delay does not take the admission's share of the burst's extra time.
"""

from __future__ import annotations

import math
import random

import pytest

from foundation.quantiles import nearest_rank
from harness.fitting.admission import KEY, acceptance_slope, fit_admission
from harness.fitting.fit import fit_profile
from harness.fitting.observations import QUANTILES, CreateTimeline, ProtocolObservation
from providers.sim.core.clock import VirtualClock
from providers.sim.core.experiments import simulate_burst, simulate_sequential
from providers.sim.core.profile import ProfileError, load_profile, profile_names
from providers.sim.core.records import CreateRequest
from providers.sim.core.simulator import VendorSimulator

RATE = 400.0  # creates a second


def _observation(protocol: str, width: int, ttis: list[float], accepted: list[float] | None = None, **failures: int):
    samples = tuple(sorted(ttis))
    creates = None
    if accepted is not None:
        refused = {k: ((0.0, 0.0),) * n for k, n in failures.items()}
        creates = CreateTimeline("run", tuple(sorted(accepted)), (math.inf,) * len(accepted), refused)
    return ProtocolObservation(
        protocol=protocol,
        concurrency=width,
        attempts=len(samples) + sum(failures.values()),
        tti_s=samples,
        quantiles={k: nearest_rank(samples, q) for k, q in QUANTILES.items()},
        trimmed=0.0,
        success_rate=len(samples) / (len(samples) + sum(failures.values())),
        failures={f"{k}@create": n for k, n in failures.items()},
        source=f"test {protocol}@{width}",
        creates=creates,
    )


def test_the_simulator_admits_n_creates_over_n_over_the_rate() -> None:
    profile = load_profile("ideal").with_overrides({KEY: RATE})
    clock = VirtualClock()
    sim = VendorSimulator(profile, seed=1, clock=clock)
    n = 40
    sandboxes = [sim.create(CreateRequest(image="python:3.12-slim")) for _ in range(n)]
    clock.run_until(5.0)
    starts = sorted(sb.started_at for sb in sandboxes if sb.started_at is not None)
    assert len(starts) == n
    assert starts[-1] - starts[0] == pytest.approx((n - 1) / RATE)
    assert acceptance_slope(starts) == pytest.approx(1 / RATE)
    assert all(sb.created_at == 0.0 for sb in sandboxes)  # accepted at once: the wait is in PENDING, not a refusal


def test_admission_counts_in_tti_and_unlimited_is_as_before() -> None:
    ideal = load_profile("ideal")
    before = simulate_burst(ideal, 50, seed=3).ttis()
    after = simulate_burst(ideal.with_overrides({KEY: RATE}), 50, seed=3).ttis()
    assert max(before) - min(before) < 1e-9  # ideal: every sandbox alike
    assert after[-1] - after[0] == pytest.approx(49 / RATE)
    assert after[0] == pytest.approx(before[0])


def test_a_sandbox_ended_while_waiting_for_admission_never_boots() -> None:
    clock = VirtualClock()
    sim = VendorSimulator(load_profile("ideal").with_overrides({KEY: 10.0}), seed=1, clock=clock)
    first, second = (
        sim.create(CreateRequest(image="python:3.12-slim")),
        sim.create(CreateRequest(image="python:3.12-slim")),
    )
    sim.terminate(second.id)
    clock.run_until(5.0)
    assert first.running_at is not None
    assert second.started_at is None and second.running_at is None
    assert sim._pipeline.n_waiting == 0


def test_every_shipped_profile_leaves_admission_unlimited_and_a_rate_must_be_positive() -> None:
    for name in profile_names():
        account = load_profile(name).account
        assert account is None or math.isinf(account.admit_per_s), name
    with pytest.raises(ProfileError, match="admit_per_s"):
        load_profile("ideal").with_overrides({KEY: 0})


def test_the_fit_recovers_the_rate_from_jittered_acceptance_times() -> None:
    rng = random.Random(5)
    accepted = [i / RATE + rng.uniform(0, 0.5 / RATE) for i in range(100)]
    fit = fit_admission([_observation("burst", 100, [1.0] * 100, accepted)], 10)
    assert fit.rate is not None and fit.unidentified is None
    assert fit.rate == pytest.approx(RATE, rel=0.03)


def test_a_burst_the_bucket_refused_or_without_times_identifies_no_rate() -> None:
    accepted = [i / RATE for i in range(50)]
    paced = _observation("burst", 100, [1.0] * 50, accepted, rate_limited=50)
    fit = fit_admission([paced, _observation("burst", 100, [1.0] * 100)], 10)
    assert fit.rate is None and fit.unidentified


def test_the_load_delay_is_fitted_on_top_of_the_admission_not_for_it() -> None:
    # a vendor whose burst is slower than its sequential by the admission alone (no load delay of its own)
    truth = load_profile("e2b-like").with_overrides({KEY: 100.0, "boot.load_delay_s": 0, "boot.load_delay_max_s": 0})
    sequential = _observation("sequential", 1, simulate_sequential(truth, 40, seed=9).ttis())
    burst = simulate_burst(truth, 60, seed=9).ttis()
    with_times = _observation("burst", 60, burst, [i / 100.0 for i in range(60)])
    prior = load_profile("e2b-like")
    fitted = fit_profile([sequential, with_times], prior, "a")
    blind = fit_profile([sequential, _observation("burst", 60, burst)], prior, "b")
    assert fitted.fitted[KEY] == pytest.approx(100.0)
    assert KEY in blind.unidentified
    # without the times the burst's 0.3 s of admission is fitted as load delay; with them it is not
    assert blind.fitted["boot.load_delay_s"] > 0.004
    assert fitted.fitted["boot.load_delay_s"] < blind.fitted["boot.load_delay_s"] / 3
    p50 = next(r for r in fitted.rows if r.protocol == "burst@60" and r.stat == "p50")
    assert abs(p50.error) < 0.10
