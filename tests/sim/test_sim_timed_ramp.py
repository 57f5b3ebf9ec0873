"""`simulate_timed_ramp`: a live ramp on the VirtualClock, stages ended by time, refusals costing what they cost live.

The count-based `simulate_ramp` ended a stage after a number of creates and retried a refused one at once for free,
so against e2b-like (100 at once, 5 creates/s) every stage above the cap came out 100% refused with no TTI at all; a
live stage of `--hold` seconds has its users loop for that long, and the stub client's create gate holds them a
Retry-After (a whole wall second) after each 429, so a few creates a second still get through. These tests pin
that: successes above the cap at about the create rate, rollouts per stage set by its length, the gate's wait in the
TTI, seeded determinism, and the loop's bounds.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from providers.sim.core.clock import VirtualClock
from providers.sim.core.experiments import simulate_ramp
from providers.sim.core.profile import load_profile
from providers.sim.core.timed_ramp import CreateThrottle, RampTiming, _Gate, simulate_timed_ramp

TURN = 0.005  # the live harness's round trip (harness.fitting.live_run.TURN_WALL_S at time scale 1)


def _timing(*stage_s: float, work_s: float = 2.0, throttle: bool = True, retries: int = 0) -> RampTiming:
    return RampTiming(
        stage_s=stage_s,
        spawn_interval_s=0.01,
        work_s=work_s,
        turn_s=TURN,
        throttle=CreateThrottle.stub_client(1.0) if throttle else None,
        retries=retries,
    )


def test_a_stage_above_the_cap_still_starts_sandboxes_at_about_the_create_rate() -> None:
    """e2b-like refills 5 create tokens a vendor second: a 200-user stage after the bucket is spent gets ~5 successes
    a second, whatever its users try; the rest are refused, and the count-based ramp showed none at all."""
    profile = load_profile("e2b-like")
    first, above = simulate_timed_ramp(profile, [50, 200], _timing(60.0, 30.0), seed=0)
    assert first.n > 50 * 60 / 3 * 0.8  # ~3 s a rollout (TTI + 2 s of work): the stage's time sets the count
    ok = sum(1 for s in above.samples if s.ok)
    rate = profile.create_rate.per_s
    assert 0.7 * rate * 30 <= ok <= 1.3 * rate * 30 + 60, ok  # per vendor second of the stage, at most the tokens
    assert set(above.failures()) <= {"RATE_LIMITED", "QUOTA_EXHAUSTED"}
    assert 0.5 < above.failure_rate < 0.99
    assert above.ttis(), "successes above the cap have a TTI"
    counted = simulate_ramp(profile, [50, 200], [1000, 400], seed=0)
    assert counted[1].failure_rate == 1.0 and not counted[1].ttis()  # what the time-based ramp fixes


def test_rollouts_per_stage_are_set_by_the_stages_length_not_by_a_count() -> None:
    short = simulate_timed_ramp("ideal", [10], _timing(20.0), seed=0)[0]
    long = simulate_timed_ramp("ideal", [10], _timing(40.0), seed=0)[0]
    assert short.failure_rate == 0 and long.failure_rate == 0
    per_user = 20.0 / (2.0 + TURN + 0.02)  # ideal boots in ~5 ms and runs a command in ~1 ms
    assert short.n == pytest.approx(10 * per_user, rel=0.1)
    assert long.n == pytest.approx(2 * short.n, rel=0.1)


def test_the_gates_wait_is_part_of_the_tti_and_the_gate_can_be_left_out() -> None:
    """Above the cap, a success waited at the gate for a Retry-After or more: its TTI holds that wait. Without the
    gate (a client that does not hold its creates) refusals cost a round trip each and go on far more often."""
    gated = simulate_timed_ramp("e2b-like", [50, 120], _timing(60.0, 10.0), seed=1)[1]
    ungated = simulate_timed_ramp("e2b-like", [50, 120], _timing(60.0, 2.0, throttle=False), seed=1)[1]
    assert nearest(gated.ttis(), 0.5) > 1.0 > nearest(ungated.ttis(), 0.5)
    assert ungated.n / 2.0 > 20 * gated.n / 10.0  # rows per vendor second of the stage


def nearest(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def test_retry_after_is_whole_wall_seconds_at_least_one_and_bounded() -> None:
    at_one = CreateThrottle.stub_client(1.0)
    assert at_one.hold_for(0.2) == 1.0 and at_one.hold_for(1.01) == 2.0 and at_one.hold_for(None) == 1.0
    assert at_one.hold_for(100.0) == 30.0  # max_backoff_s
    tenth = CreateThrottle.stub_client(0.1)  # a wall second is 10 vendor seconds
    assert tenth.hold_for(0.2) == pytest.approx(10.0) and tenth.hold_for(25.0) == pytest.approx(30.0)
    assert tenth.max_wait_s == pytest.approx(300.0)
    with pytest.raises(ValueError, match="a zero wait never ends"):
        CreateThrottle(0.0, 1.0, 1.0)


def test_seeded_and_bounded() -> None:
    timing = _timing(30.0, 15.0)
    first = simulate_timed_ramp("e2b-like", [60, 150], timing, seed=3)
    again = simulate_timed_ramp("e2b-like", [60, 150], timing, seed=3)
    assert [r.samples for r in first] == [r.samples for r in again]
    capped = simulate_timed_ramp("e2b-like", [60, 150], timing, seed=3, max_rollouts=500)
    assert sum(r.n for r in capped) == 500 and capped[0].stats["truncated"] is True
    assert first[0].stats["truncated"] is False


def test_a_retried_attempt_is_its_own_row_in_its_rollouts_stage() -> None:
    """Plan retries: a refused attempt is retried after retry_backoff_s, a row of its own, in the stage the rollout
    started in (the engine keeps the rollout's stage for its later attempts)."""
    timing = RampTiming((3.0, 2.0), 0.0, 2.0, TURN, None, retries=1, retry_backoff_s=1.0)
    plain = RampTiming((3.0, 2.0), 0.0, 2.0, TURN, None)
    retried = simulate_timed_ramp("e2b-like", [100, 120], timing, seed=0)
    once = simulate_timed_ramp("e2b-like", [100, 120], plain, seed=0)
    assert retried[0].failure_rate == 0 < retried[1].failure_rate
    assert retried[1].n < once[1].n / 10  # a second's backoff after each refusal, not a round trip: fewer rows
    # a rollout refused just before its stage ended is retried in the next stage's time, and counts in its own
    five = load_profile("e2b-like").with_overrides({"quota.max_active": 5})
    stages = simulate_timed_ramp(five, [10, 10], RampTiming((3.0, 3.0), 0.0, 2.0, TURN, None, 1, 1.0), seed=0)
    assert any(s.created_at >= 3.0 and not s.ok for s in stages[0].samples)
    assert all(s.created_at >= 3.0 for s in stages[1].samples)


@pytest.mark.parametrize(
    "bad",
    [
        {"stage_s": ()},
        {"stage_s": (0.0,)},
        {"stage_s": (math.inf,)},
        {"stage_s": (5.0,), "turn_s": 0.0},
        {"stage_s": (5.0,), "retries": -1},
        {"stage_s": (5.0,), "stop_s": -1.0},
    ],
)
def test_a_timing_that_could_not_end_is_refused(bad: dict[str, object]) -> None:
    args: dict[str, object] = {"spawn_interval_s": 0.0, "work_s": 1.0, "turn_s": TURN, **bad}
    with pytest.raises(ValueError):
        RampTiming(**args)  # type: ignore[arg-type]


def test_a_creation_waiting_behind_a_slow_probe_gives_up_at_its_own_deadline() -> None:
    """Live, each create behind the probe waits on the gate's lock with its own timeout, so it fails `rate_limited`
    when its max_wait runs out even while the probe is still out. The simulated gate once gave such a waiter up only
    at the next answer, and one woken at a deadline already past woke itself for ever at the same instant (a fitted
    ramp of daytona-like hung the predictor)."""
    clock = VirtualClock()
    throttle = CreateThrottle(max_wait_s=30.0, default_s=1.0, step_s=1.0)
    sent: list[int] = []
    given_up: list[tuple[int, float]] = []
    gate = _Gate(clock, throttle, sent.append, seed=0)
    gate.give_up = lambda index: given_up.append((index, clock.now()))
    gate.answered(-1, 1.0, True)  # a 429 with Retry-After 1: the gate closes for a second
    gate.enter(0)  # the probe, once the second has passed
    clock.call_at(0.5, lambda: gate.enter(1))  # behind it
    clock.call_at(31.0, lambda: gate.enter(2))  # behind it too, after the first one's deadline
    clock.call_at(45.0, lambda: gate.answered(0, None, False))  # the probe's answer, read late
    clock.run(max_events=10_000)
    assert given_up == [(1, pytest.approx(30.5))]
    assert sent == [0, 2]  # the probe, then the waiter still within its deadline once the gate opened


def test_an_answer_that_opens_the_gate_early_leaves_its_waiters_to_sleep_out_the_backoff() -> None:
    """Live (providers/throttle_gate.py), the first create held by a 429 sleeps until the Retry-After ends, and the
    others queue behind it on the lock; a create's answer that opens the gate meanwhile lets new creates straight
    through but wakes none of them. The simulated gate once let its waiters go at that answer: in a burst of 960
    against agent-sandbox-like, an answer to a create sent before the 429 was read released the whole queue 0.3 s
    in, not at the Retry-After's second, and the burst's late successes were predicted 0.7 s early."""
    clock = VirtualClock()
    sent: list[tuple[int, float]] = []
    gate = _Gate(
        clock, CreateThrottle(max_wait_s=30.0, default_s=1.0, step_s=1.0), lambda i: sent.append((i, clock.now())), 0
    )
    gate.answered(-1, 1.0, True)  # a 429 with Retry-After 1: closed for a second
    gate.enter(0)
    gate.enter(1)
    clock.call_at(0.3, lambda: gate.answered(-2, None, False))  # a create sent before the 429, let in: it opens
    clock.call_at(0.5, lambda: gate.enter(2))  # a create started while it is open goes at once
    clock.run(max_events=10_000)
    assert sent == [(2, 0.5), (0, 1.0), (1, 1.0)]


def test_a_burst_through_the_gate_makes_one_rollout_a_user_and_lets_some_in_after_the_retry_after() -> None:
    """`once`: a burst's users each make one rollout. Against agent-sandbox-like (a bucket of 90, 90/s) the creates
    started after the first 429 is read wait out its Retry-After, and the opening lets in those the bucket refilled:
    successes with a TTI past a second, beyond the 90 the bucket held and its refill over the 0.3 s of sending."""
    timing = RampTiming(
        stage_s=(1.3,),
        spawn_interval_s=0.0003,
        work_s=2.0,
        turn_s=0.08,
        throttle=CreateThrottle.stub_client(1.0),
        once=True,
    )
    burst = simulate_timed_ramp("agent-sandbox-like", [960], timing, seed=3)[0]
    assert burst.n == 960  # one row a user: a refused user starts no second rollout
    late = [t for t in burst.ttis() if t > 1.0]
    assert late, "no success waited out the Retry-After"
    assert len(burst.ttis()) > 90 + 90 * 0.0003 * 960 + 0.5 * 90  # the bucket, its refill, and half an opening
    looping = simulate_timed_ramp("agent-sandbox-like", [960], dataclasses.replace(timing, once=False), seed=3)[0]
    assert looping.n > 960  # without `once` its users loop for the stage


def test_rollouts_still_going_after_the_stop_timeout_are_cancelled_not_rows() -> None:
    """A live ramp ends its last stage, gives rollouts in flight its stop timeout (60 wall s), and cancels the rest;
    cancelled rows are no outcome. Replayed without it, modal-like's ramp at 480 counted 10.5% failures (sandboxes
    waiting in its start pipeline until their one-hour lifetime) where the live run had 0.5%, and at 960 1,400 rows
    where the live run had one."""
    slow = load_profile("ideal").with_overrides({"boot.median_s": 50.0, "boot.sigma": 0.0})
    timing = dataclasses.replace(_timing(5.0, work_s=2.0, throttle=False), stop_s=20.0)
    (cut,) = simulate_timed_ramp(slow, [10], timing, seed=0)
    assert cut.n == 0  # a 50 s boot is not over 5 + 20 s after the stage began
    (waited,) = simulate_timed_ramp(slow, [10], dataclasses.replace(timing, stop_s=math.inf), seed=0)
    assert waited.n == 10 and all(s.ok for s in waited.samples)
    # a first command in time but its work not: the rollout was still going, so it is cancelled too
    (work_cut,) = simulate_timed_ramp(slow, [10], dataclasses.replace(timing, stop_s=46.0, work_s=10.0), seed=0)
    (work_fits,) = simulate_timed_ramp(slow, [10], dataclasses.replace(timing, stop_s=60.0, work_s=2.0), seed=0)
    assert work_cut.n == 0 and work_fits.n == 10
