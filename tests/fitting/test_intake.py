"""The serial create intake (issue #31): read from the creates a vendor took after the harness had sent its burst,
played as a queue before the vendor's decision, and said to describe the trial's machine when the vendor was local.

Fixed data: create times written out here (a burst sent at one pace and taken at another), so each test fails if
the fit reads the wrong stretch of the timeline or the prediction drops or double counts the queue's wait.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from foundation.quantiles import nearest_rank
from harness.fitting.admission import (
    KEY,
    MACHINE,
    fit_admission,
    queued_acceptances,
    simulate_intake_burst,
)
from harness.fitting.fit import FitResult, fit_profile, profile_toml
from harness.fitting.observations import QUANTILES, CreateTimeline, ProtocolObservation
from harness.fitting.predict import Shape, _resampled_intake, intake_caveat
from providers.sim.core.experiments import simulate_burst
from providers.sim.core.profile import load_profile

SENT_GAP = 0.0004  # the harness sends a create every 0.4 ms
TAKEN_GAP = 0.0002  # the vendor takes one every 0.2 ms once the burst is queued
N = 100
QUEUED_FROM = N * SENT_GAP  # the burst is sent by 40 ms


def _timeline(n: int = N, early: int = 10) -> CreateTimeline:
    """`early` creates accepted as they were sent (while the harness still sends), the rest taken from the queue
    after the last send at TAKEN_GAP apart: the shape of the kept runs' bursts."""
    sent = tuple(k * SENT_GAP for k in range(n))
    accepted = tuple([k * SENT_GAP + 0.0001 for k in range(early)])
    accepted += tuple(QUEUED_FROM + (k + 1) * TAKEN_GAP for k in range(n - early))
    return CreateTimeline("run", tuple(sorted(accepted)), (math.inf,) * n, {}, sent)


def _burst(creates: CreateTimeline | None, ttis: list[float], **failures: int) -> ProtocolObservation:
    samples = tuple(sorted(ttis))
    return ProtocolObservation(
        protocol="burst",
        concurrency=N,
        attempts=len(samples) + sum(failures.values()),
        tti_s=samples,
        quantiles={k: nearest_rank(samples, q) for k, q in QUANTILES.items()},
        trimmed=0.0,
        success_rate=len(samples) / (len(samples) + sum(failures.values())),
        failures={f"{k}@create": n for k, n in failures.items()},
        source="test burst",
        creates=creates,
    )


def test_the_queued_acceptances_are_those_after_the_last_send() -> None:
    timeline = _timeline()
    queued = queued_acceptances(timeline)
    assert len(queued) == N - 10
    assert min(queued) > max(timeline.sent_s)
    without_sends = dataclasses.replace(timeline, sent_s=())
    assert len(queued_acceptances(without_sends)) == N


def test_the_intake_is_the_pace_of_the_queue_not_of_the_harness_sends() -> None:
    fit = fit_admission([_burst(_timeline(), [1.0] * N)], 10)
    assert fit.rate == pytest.approx(1 / TAKEN_GAP, rel=1e-6)  # the whole timeline's slope would be far slower
    assert len(fit.gaps) == N - 10 - 1 and all(g == pytest.approx(TAKEN_GAP) for g in fit.gaps)
    assert "90 of its 100 creates accepted after the harness had sent its last" in fit.note
    assert fit.note.startswith("fitted:") and MACHINE in fit.note


def test_a_burst_taken_as_it_was_sent_falls_back_to_every_acceptance_and_says_so() -> None:
    fit = fit_admission([_burst(_timeline(early=95), [1.0] * N)], 10)  # 5 queued: too few for a slope
    assert fit.rate is not None and "all of them" in fit.note


def test_a_bucket_paced_burst_still_identifies_no_intake() -> None:
    fit = fit_admission([_burst(_timeline(), [1.0] * 80, rate_limited=20)], 10)
    assert fit.rate is None and fit.unidentified and fit.gaps == ()


def test_the_intake_burst_counts_each_creates_turn_in_its_tti() -> None:
    ideal = load_profile("ideal")
    plain = simulate_burst(ideal, 50, seed=3)
    queued = simulate_intake_burst(ideal.with_overrides({KEY: 1 / TAKEN_GAP}), 50, 3)
    by_index = {s.index: s for s in plain.samples}
    for s in queued.samples:
        base = by_index[s.index]
        assert s.tti_s is not None and base.tti_s is not None
        assert s.tti_s == pytest.approx(base.tti_s + s.index * TAKEN_GAP)  # its wait, once, not twice
    assert simulate_intake_burst(ideal, 50, 3).ttis() == plain.ttis()  # no intake: the burst as it was


def test_the_intake_takes_the_refusals_in_turn_so_a_bucket_refills_meanwhile() -> None:
    # a bucket of 10 refilling at 1,000/s: all at once, 10 of 200 get in; taken one per ms, most do
    bucket = load_profile("ideal").with_overrides({"create_rate.burst": 10, "create_rate.per_s": 1000.0})
    at_once = simulate_burst(bucket, 200, seed=1)
    taken = simulate_intake_burst(bucket.with_overrides({KEY: 900.0}), 200, 1)
    assert at_once.failure_rate > 0.9
    assert taken.failure_rate < 0.1


def test_the_caveat_names_the_intake_and_a_contention_it_does_not_carry() -> None:
    slow = load_profile("prime-like").with_overrides({KEY: 1 / TAKEN_GAP})
    fast = load_profile("ideal").with_overrides({KEY: 1 / TAKEN_GAP})
    burst = [Shape("burst", 960, 960)]
    assert "serial create intake of 0.200 ms" in intake_caveat(slow, burst, SENT_GAP)
    assert "NOT carried" not in intake_caveat(slow, burst, SENT_GAP)  # 0.58 s of creates, a 4 s boot
    assert "NOT carried" in intake_caveat(fast, burst, SENT_GAP)  # the same creates, a 10 ms boot
    assert intake_caveat(fast, [Shape("sequential", 1, 10)], SENT_GAP) == ""


def test_each_refit_takes_the_creates_at_its_own_resampled_pace() -> None:
    profile = load_profile("ideal").with_overrides({KEY: 1000.0})
    gaps = [0.0005, 0.0010, 0.0015, 0.0020] * 5
    rng = random.Random(0)
    rates = {_resampled_intake(profile, gaps, rng).account.admit_per_s for _ in range(10)}  # type: ignore[union-attr]
    assert len(rates) > 1 and all(400 < r < 1000 for r in rates)
    unlimited = load_profile("ideal")
    assert _resampled_intake(unlimited, gaps, rng) is unlimited


def test_the_fitted_profile_labels_the_intake_as_fitted_and_the_machines() -> None:
    ideal = load_profile("ideal")
    sequential = simulate_burst(ideal, 30, seed=2, spacing_s=1.0).ttis()
    narrow = dataclasses.replace(_burst(None, sequential), protocol="sequential", concurrency=1)
    result: FitResult = fit_profile([narrow, _burst(_timeline(), [0.05] * N)], ideal, "fitted")
    assert result.fitted[KEY] == pytest.approx(1 / TAKEN_GAP, rel=1e-6)
    line = next(x for x in profile_toml(result).splitlines() if x.startswith("admit_per_s_label"))
    assert line.startswith('admit_per_s_label = "calibrated:') and "machine the trial ran on" in line
    source = next(x for x in profile_toml(result).splitlines() if x.startswith("admit_per_s_source"))
    assert "accepted after the harness had sent its last" in source


def test_the_trial_scorecard_says_what_the_intake_is_and_prints_the_prediction_note() -> None:
    from harness.fitting.trial import Estimate, Prediction, Scorecard, render

    card = Scorecard(
        provider="stub",
        profile="ideal",
        size=100,
        trial_dir="/tmp/trial",
        estimate=Estimate(0.0, 0, None, {}, "no price"),
        budget_usd=None,
        stopped="",
        outcomes=[],
        composites=[],
        failures_by_kind={},
        rate_limits={"seen": False},
        dollars=None,
        dollars_per_1000=None,
        fitted_profile="/tmp/trial/stub-trial.toml",
        fitted={KEY: 5000.0, "boot.median_s": 0.01},
        unidentified={},
        predictions=[Prediction(960, "burst", {"p50": 0.1}, {"p50": (0.09, 0.11)})],
        prediction_note="90% interval ...; NOT carried: the contention",
        leaked=0,
    )
    text = render(card)
    intake = next(line for line in text.splitlines() if line.startswith(f"- {KEY} = 5000"))
    assert "serial create intake, fitted" in intake and MACHINE in intake
    assert next(line for line in text.splitlines() if line.startswith("- boot.median_s")) == "- boot.median_s = 0.01"
    assert "- 90% interval ...; NOT carried: the contention" in text.splitlines()
