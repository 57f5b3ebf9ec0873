"""The harness's own throttle gate, read from a trial's 429s and carried into a predicted ramp (gate_cascade.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from harness.fitting.gate_cascade import MIN_OPENINGS, fit_gate_cascade, opening_sizes
from harness.fitting.live_run import LiveRun, Shape
from harness.fitting.observations import CreateTimeline, ProtocolObservation
from providers.sim.core.profile import load_profile
from providers.sim.core.timed_ramp import GATE_PASS_WALL_S, CreateThrottle, RampTiming, simulate_timed_ramp

SIZES = [12, 40, 25, 60, 33, 18, 47, 29, 52, 21, 38, 44]  # 429s per opening, one opening a wall second


def _ramp(sizes: list[int], retry_after: float | None = 1.0, protocol: str = "ramp") -> ProtocolObservation:
    """A stage whose rate-limited creates came back in clumps, 1 ms apart within one, an opening a second."""
    refused = []
    for k, size in enumerate(sizes):
        start = 2.0 + k * 1.0
        refused += [(start - 0.5, start + 0.001 * i) for i in range(size)]
    hints = (retry_after,) * len(refused)
    creates = CreateTimeline("run", (0.0,), (math.inf,), {"rate_limited": tuple(refused)}, retry_after_s=hints)
    return ProtocolObservation(
        protocol=protocol,
        concurrency=100,
        attempts=len(refused) + 1,
        tti_s=(0.5,),
        quantiles={"p50": 0.5, "p99": 0.5},
        trimmed=0.0,
        success_rate=1 / (len(refused) + 1),
        failures={"rate_limited@create": len(refused)},
        source="trial/ramp",
        creates=creates,
    )


def test_each_clump_of_429s_is_one_opening_of_the_gate() -> None:
    assert opening_sizes(_ramp(SIZES)) == SIZES


def test_the_fit_carries_the_openings_mean_and_spread() -> None:
    cascade = fit_gate_cascade([_ramp(SIZES[:6]), _ramp(SIZES[6:])])
    assert cascade is not None
    mean = sum(SIZES) / len(SIZES)
    variance = sum((s - mean) ** 2 for s in SIZES) / len(SIZES)
    assert cascade.openings == len(SIZES)
    assert cascade.mean == pytest.approx(mean)
    assert cascade.shape == pytest.approx(mean * mean / variance)
    assert "12 openings" in cascade.describe()


def test_too_few_openings_or_a_burst_or_no_retry_hint_leave_the_default() -> None:
    assert fit_gate_cascade([_ramp(SIZES[: MIN_OPENINGS - 1])]) is None
    assert fit_gate_cascade([_ramp(SIZES, protocol="burst")]) is None  # a burst's 429s are one clump whatever
    assert fit_gate_cascade([_ramp(SIZES, retry_after=None)]) is None  # give-ups and hintless 429s: not the gate's


def test_a_stage_where_most_creates_got_in_tells_nothing_of_the_openings() -> None:
    """agent-sandbox-like's trial ramp (90/s): at 25-100 users 1-6 of its creates an opening were refused, at 400
    185: few creates waited at the gate in the narrow stages, so they, not the engine, bounded its openings."""
    busy = _ramp(SIZES)
    assert fit_gate_cascade([busy]) is not None
    mostly_in = dataclasses.replace(busy, attempts=3 * busy.attempts)  # 2 of 3 creates let in
    assert fit_gate_cascade([mostly_in]) is None


def test_a_live_run_with_a_fitted_cascade_opens_its_simulated_gate_that_long() -> None:
    """An opening is its refusals and the creates the bucket refilled over the gate's hold let in first, which the
    fit does not count (e2b-like: 5/s over a hold of one wall second, 2 vendor s at this scale: 10)."""
    profile_scale = 0.5
    live = LiveRun(time_scale=profile_scale, gate_cascade=fit_gate_cascade([_ramp(SIZES)]))
    timing = live.timing(load_profile("e2b-like"), [Shape("ramp", 100, 100, 5.0)])
    assert timing.throttle is not None
    assert live.gate_cascade is not None
    opening = live.gate_cascade.mean + 10
    assert timing.throttle.open_s == pytest.approx(opening * GATE_PASS_WALL_S / profile_scale)
    assert timing.throttle.open_shape == pytest.approx(live.gate_cascade.shape)


def test_a_shorter_opening_makes_fewer_refused_rows_past_a_rate_limit() -> None:
    """What the fit relies on: the opening decides how many creates a ramp past the limit sends into 429s."""

    def rows(passes: float) -> int:
        throttle = CreateThrottle.stub_client(1.0, opening=(passes, 50.0))
        timing = RampTiming(stage_s=(12.0,), spawn_interval_s=0.01, work_s=0.0, turn_s=0.005, throttle=throttle)
        (stage,) = simulate_timed_ramp("e2b-like", [400], timing, seed=1)
        return len(stage.samples)

    short, long = rows(20.0), rows(113.0)
    assert short < 0.7 * long, (short, long)


def test_without_a_fitted_cascade_an_opening_lasts_the_assumed_late_read() -> None:
    """A trial that met no rate limit reads no cascade: an opening lets in the bucket's refill over the hold, then
    the refusals sent while the first is read late (coreweave-like: 50/s over one wall second, then 80 ms of 429s at
    one lock hand-over each); a later read lets more out."""
    profile = load_profile("coreweave-like")
    shape = [Shape("ramp", 1920, 1920, 10.0)]
    prompt, late = LiveRun(burst_read_wall_s=0.05), LiveRun(burst_read_wall_s=0.08)
    for live in (prompt, late):
        assert live.gate_cascade is None
        throttle = live.timing(profile, shape).throttle
        assert throttle is not None
        passes = throttle.open_s / GATE_PASS_WALL_S
        assert passes == pytest.approx(50 + live.burst_read_wall_s / GATE_PASS_WALL_S)
    assert late.opening_refusals() > 1.5 * prompt.opening_refusals()
