"""The create bucket and the concurrency cap fitted from create times (harness.fitting.limits, issue #31).

The fast tests feed a ramp played against an exact token bucket and cap (the simulator's rules: the rate is
checked first, a create turned away for quota has spent its token), so the truth is known to the token. The slow
ones fit real `stampede run --provider stub` ramps of a known bucket and cap.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from harness.fitting.fit import fit_profile
from harness.fitting.limits import BURST_NOTE, fit_limits
from harness.fitting.observations import (
    CreateTimeline,
    ProtocolObservation,
    join_timelines,
    observations_from_run,
)
from harness.fitting.trial import merged, rate_limit_behaviour
from providers.sim.core.profile import load_profile
from tests.support.commands import stampede

DATA = Path(__file__).parent / "data"


def _ramp(
    stages: list[tuple[float, float]], *, burst: float, per_s: float, cap: float = 1e9, life_s: float = 0.0
) -> list[ProtocolObservation]:
    """Each stage (creates a second, seconds) sends creates evenly spaced against a bucket full at t=0 and a cap on
    sandboxes alive (each lives `life_s`); one observation per stage, all of one run."""
    tokens, last, t0 = burst, 0.0, 0.0
    ends: list[float] = []
    out = []
    for n, (rate, seconds) in enumerate(stages):
        accepted: list[float] = []
        refused: dict[str, list[float]] = {}
        for k in range(int(rate * seconds)):
            t = t0 + k / rate
            tokens, last = min(burst, tokens + (t - last) * per_s), t
            if tokens < 1:
                refused.setdefault("rate_limited", []).append(t)
                continue
            tokens -= 1
            if sum(end > t for end in ends) >= cap:
                refused.setdefault("quota_exhausted", []).append(t)
                continue
            accepted.append(t)
            ends.append(t + life_s)
        t0 += seconds
        failures = {f"{kind}@create": len(times) for kind, times in refused.items()}
        attempts = len(accepted) + sum(failures.values())
        out.append(
            ProtocolObservation(
                protocol="ramp",
                concurrency=int(rate),
                attempts=attempts,
                tti_s=tuple(1.0 for _ in accepted),
                quantiles={"p50": 1.0} if accepted else {},
                trimmed=0.0,
                success_rate=len(accepted) / attempts if attempts else 0.0,
                failures=failures,
                source=f"synthetic ({n:02d}-ramp{rate:g})",
                creates=CreateTimeline(
                    run="synthetic",
                    accepted_s=tuple(accepted),
                    ended_s=tuple(t + life_s for t in accepted),
                    refused_s={kind: tuple((t, t) for t in times) for kind, times in refused.items()},
                ),
            )
        )
    return out


def _in_run(obs: ProtocolObservation, run: str) -> ProtocolObservation:
    """`obs` as if from another run (its own clock and bucket)."""
    assert obs.creates is not None
    return dataclasses.replace(obs, creates=dataclasses.replace(obs.creates, run=run))


def test_a_held_ramp_gives_the_buckets_depth_and_rate_where_the_count_did_not() -> None:
    """e2b-like's bucket (200, 5/s) under a ramp held 10 s a stage: the stage that drains it lets in what was left
    plus 5/s, so the old count (creates accepted in the stage, less its refusals) read a depth of 139, not 200."""
    observations = _ramp([(4, 10), (16, 10), (32, 10), (64, 10)], burst=200, per_s=5)
    counted = fit_limits([dataclasses.replace(o, creates=None) for o in observations])
    assert counted.fitted["create_rate.burst"] == 139  # the old block's answer: no times, the burst count
    assert counted.unidentified["create_rate.per_s"] == BURST_NOTE
    timed = fit_limits(observations)
    assert timed.fitted["create_rate.burst"] == 200
    assert timed.fitted["create_rate.per_s"] == pytest.approx(5, rel=0.02)  # a slope over ~85 evenly let in
    assert "create_rate.per_s" not in timed.unidentified
    assert timed.notes["create_rate.per_s"].endswith("while 429s kept coming (the bucket empty), 1 run(s)")
    result = fit_profile(observations, load_profile("ideal"), "timed")  # fit_profile takes the limits' fit
    assert result.profile.create_rate.burst == 200 and result.profile.create_rate.per_s == pytest.approx(5, rel=0.02)


def test_the_bucket_carries_from_stage_to_stage_and_a_burst_shows_no_rate() -> None:
    burst = fit_limits(_ramp([(1000, 0.05)], burst=30, per_s=2))  # 50 creates in 50 ms: no time to refill
    assert burst.fitted["create_rate.burst"] == 30
    assert burst.unidentified["create_rate.per_s"] == BURST_NOTE
    # two runs, each from a full bucket: the first's second stage meets what its first stage left (30 of 50), the
    # other's one stage drains all 50 at once. The depth takes the rate's error times the ~11 s before the first
    # run's first 429: +-1 create for a rate within 5%.
    first = _ramp([(4, 10), (40, 20)], burst=50, per_s=2)
    assert "rate_limited" not in first[0].failures and first[1].failures["rate_limited@create"] > 0
    both = fit_limits([*first, *(_in_run(o, "other") for o in _ramp([(100, 10)], burst=50, per_s=2))])
    assert both.fitted["create_rate.burst"] == pytest.approx(50, abs=1)
    assert both.fitted["create_rate.per_s"] == pytest.approx(2, rel=0.05)
    assert both.notes["create_rate.per_s"].endswith("2 run(s)")
    alone = fit_limits([_in_run(first[1], "stage")])
    assert alone.fitted["create_rate.burst"] < 40  # a stage read as if its bucket started full: what it had left


def test_the_cap_is_the_most_alive_at_a_quota_refusal_not_the_creates_of_a_held_stage() -> None:
    """A cap of 10 under a stage held 10 s whose sandboxes live 1 s: about 100 are let in over the stage, 10 at once."""
    observations = _ramp([(5, 4), (20, 10)], burst=1e6, per_s=1e6, cap=10, life_s=1.0)
    assert observations[1].failures["quota_exhausted@create"] > 0
    counted = fit_limits([dataclasses.replace(o, creates=None) for o in observations])
    assert counted.fitted["quota.max_active"] >= 90  # the old block's count over the held stage
    timed = fit_limits(observations)
    assert timed.fitted["quota.max_active"] == 10
    assert timed.notes["quota.max_active"].startswith("the most sandboxes alive at once when one of ")


def test_no_refusal_leaves_the_limits_unidentified() -> None:
    fit = fit_limits(_ramp([(2, 5), (4, 5)], burst=100, per_s=5, cap=50, life_s=1.0))
    assert fit.fitted == {}
    assert (
        fit.unidentified["create_rate.burst"] == fit.unidentified["create_rate.per_s"] == "no run reached a rate limit"
    )
    assert (
        fit.unidentified["quota.max_active"]
        == "no run reached a concurrency cap: the ramp's widest stage (4) saw no quota refusal"
    )


def _stub_run(out: Path, run_id: str, *args: str) -> Path:
    done = stampede(
        "run", "--provider", "stub", "--profile", "e2b-like", "--out", str(out), "--run-id", run_id,
        "--progress-interval", "0", "--commands", "true", "--scenario", "ramp", *args,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out / run_id


@pytest.mark.slow
def test_a_real_ramp_fits_the_stub_vendors_bucket(tmp_path: Path) -> None:
    """A stub vendor with a bucket of 20 refilled at 5/s, ramped to 10 then 20 users held 6 s each.

    Tolerances: per_s is the creates let in between the first and the last 429 over that time (~60 over ~12 s);
    the count is exact up to a token at each end of each stretch of 429s, and each 429 is placed within the
    harness's round trip (ms), so +-25% holds with room (measured 4.96). The depth is the creates before the first
    429 (~27 at ~1.4 s) less the refill over that span: a fractional token, plus the rate's error times ~1.4 s, a
    few creates of 20 (measured 20): +-20%."""
    run = _stub_run(
        tmp_path, "bucket", "--profile-set", "create_rate.burst=20", "--profile-set", "create_rate.per_s=5",
        "--stages", "10,20", "--hold", "6",
    )  # fmt: skip
    observations = observations_from_run(run)
    assert all(o.creates is not None and o.creates.run == str(run) for o in observations)
    fit = fit_limits(observations)
    assert fit.fitted["create_rate.burst"] == pytest.approx(20, rel=0.20), fit.notes
    assert fit.fitted["create_rate.per_s"] == pytest.approx(5, rel=0.25), fit.notes
    counted = fit_limits([dataclasses.replace(o, creates=None) for o in observations])
    assert counted.fitted["create_rate.burst"] > 1.2 * 20  # what the count read from the same run
    out = tmp_path / "bucket.toml"
    done = stampede("calibrate", "--fit", str(run), "--name", "bucket", "--prior", "e2b-like", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    rate = tomllib.loads(out.read_text())["create_rate"]
    assert rate["per_s"] == fit.fitted["create_rate.per_s"] and rate["burst"] == fit.fitted["create_rate.burst"]
    assert "- create_rate.per_s = " in done.stdout


@pytest.mark.slow
def test_a_real_ramp_past_a_cap_fits_the_cap_not_the_stages_creates(tmp_path: Path) -> None:
    """A cap of 10 under a ramp of 5 then 15 users held 5 s: the sandboxes alive at a quota refusal are the
    vendor's own accept and end instants (its truth), so at most the cap at any instant, and the cap itself when
    refusals came."""
    run = _stub_run(tmp_path, "cap", "--profile-set", "quota.max_active=10", "--stages", "5,15", "--hold", "5")
    observations = observations_from_run(run)
    assert sum(o.failures.get("quota_exhausted@create", 0) for o in observations) > 0
    assert fit_limits(observations).fitted["quota.max_active"] == 10
    counted = fit_limits([dataclasses.replace(o, creates=None) for o in observations])
    assert counted.fitted["quota.max_active"] > 10  # the held stage's creates, sandboxes replacing ended ones


def test_a_trials_protocol_merged_from_its_stages_keeps_the_create_times() -> None:
    """`stampede trial` fits one observation per protocol, its stages merged (harness.fitting.trial.merged)."""
    stages = _ramp([(4, 10), (16, 10), (32, 10), (64, 10)], burst=200, per_s=5)
    one = merged("ramp", stages)
    assert one is not None and one.creates is not None
    assert fit_limits([one]).fitted == fit_limits(stages).fitted
    with pytest.raises(ValueError, match="cannot be joined"):
        join_timelines([stages[0].creates, _in_run(stages[1], "other").creates])


def test_the_trials_rate_limit_behaviour_names_the_fitted_rate() -> None:
    fitted = {"create_rate.burst": 200.0, "create_rate.per_s": 4.97, "boot.median_s": 0.4}
    assert rate_limit_behaviour([], fitted)["limits"] == {"create_rate.burst": 200.0, "create_rate.per_s": 4.97}


def test_a_quota_refusal_counts_the_sandboxes_let_in_while_it_was_in_flight() -> None:
    """A burst: every create sent at once, the vendor lets 10 in one by one and refuses the rest after them; the
    refusals' submits come before the tenth acceptance, their answers after it."""
    accepted = tuple(0.001 * (k + 1) for k in range(10))
    timeline = CreateTimeline("burst", accepted, tuple(1.0 for _ in accepted), {"quota_exhausted": ((0.0, 0.02),) * 5})
    obs = ProtocolObservation(
        "burst", 15, 15, (0.5,) * 10, {"p50": 0.5}, 0.0, 10 / 15, {"quota_exhausted@create": 5}, "burst", (), timeline
    )
    assert fit_limits([obs]).fitted["quota.max_active"] == 10
    at_sending = dataclasses.replace(timeline, refused_s={"quota_exhausted": ((0.0, 0.0),) * 5})
    sending = fit_limits([dataclasses.replace(obs, creates=at_sending)])  # read at their submits: nothing alive yet
    assert (
        sending.unidentified["quota.max_active"]
        == "quota refusals came while none of the run's own sandboxes were alive"
    )


def _queued(clumps: int, every_s: float, size: int, *, burst: float, per_s: float) -> list[ProtocolObservation]:
    """Clumps of `size` creates, each clump sent at once (0.1 ms apart) every `every_s`, against a bucket full at
    t=0; the vendor takes them from its queue 10 ms after the first is sent, one every 0.1 ms, and a 429 is answered
    1 ms after its decision. So a 429 is sent before the creates let in ahead of it are decided, and answered after
    them: agent-sandbox-like's trial burst (sent at 25 ms, answered at 50 ms, its 92 let in between 34 and 49 ms)."""
    tokens, last = burst, 0.0
    accepted: list[float] = []
    refused: list[tuple[float, float]] = []
    sent: list[float] = []
    for c in range(clumps):
        for k in range(size):
            at, decided = c * every_s + k * 1e-4, c * every_s + 0.010 + k * 1e-4
            tokens, last = min(burst, tokens + (decided - last) * per_s), decided
            sent.append(at)
            if tokens >= 1:
                tokens -= 1
                accepted.append(decided)
            else:
                refused.append((at, decided + 0.001))
    attempts = len(accepted) + len(refused)
    timeline = CreateTimeline(
        "queued", tuple(accepted), tuple(t + 1.0 for t in accepted), {"rate_limited": tuple(refused)}, tuple(sent)
    )
    failures = {"rate_limited@create": len(refused)}
    protocol, ok = "burst" if clumps == 1 else "ramp", len(accepted)
    return [
        ProtocolObservation(
            protocol, size, attempts, (0.5,) * ok, {"p50": 0.5}, 0.0, ok / attempts, failures, "q", (), timeline
        )
    ]


def test_a_bursts_429s_answered_after_its_acceptances_give_its_depth_and_no_rate() -> None:
    """A burst of 100 against a bucket of 90 refilled at 90/s: 90 let in, 10 refused. Placed halfway between
    sending and answer, the first 429 came before half the acceptances: the old reading took a depth of 46. Its 429s
    are all sent before any is answered, so no window in which the bucket was surely empty at both ends: the depth
    is what was let in, and no rate."""
    observations = _queued(1, 1.0, 100, burst=90, per_s=90)
    assert observations[0].failures == {"rate_limited@create": 10}
    fit = fit_limits(observations)
    assert fit.fitted["create_rate.burst"] == 90
    assert fit.unidentified["create_rate.per_s"] == BURST_NOTE
    assert "90 creates let in from the run's first create to its first 429's answer" in fit.notes["create_rate.burst"]


def test_clumps_of_creates_a_client_lets_out_after_429s_claim_no_rate_beside_a_ramps_own() -> None:
    """A client that holds its creates after a 429 lets them out in clumps a second apart, the bucket full again each
    time: each clump shows the depth, none the refill (the old reading: 10,000/s and a depth of 1; agent-sandbox-like's
    trial read 967/s against 90). Beside a ramp whose 429s keep coming (the bucket empty), the rate is that ramp's
    (the old reading: 160/s, a depth of 45)."""
    clumps = _queued(5, 1.0, 150, burst=90, per_s=90)
    alone = fit_limits(clumps)
    assert alone.unidentified["create_rate.per_s"] == BURST_NOTE
    assert alone.fitted["create_rate.burst"] == pytest.approx(90, abs=1)
    ramp = [_in_run(o, "ramp") for o in _ramp([(4, 10), (200, 5)], burst=90, per_s=90)]
    both = fit_limits([*clumps, *ramp])
    assert both.fitted["create_rate.per_s"] == pytest.approx(90, rel=0.02)
    assert both.notes["create_rate.per_s"].endswith("1 run(s)")
    assert both.fitted["create_rate.burst"] == pytest.approx(90, abs=1)


def test_a_gated_clients_clumps_answered_late_still_give_the_rate() -> None:
    """agent-sandbox-like's trial ramp (90/s, a bucket of 90; its creates kept in tests/fitting/data): the stub
    client held its creates after each 429 and let them out in clumps ~0.6 s apart, and a clump's 429s came back
    after the next clump was sent, so the stretches of 429s held windows in which the bucket was surely empty at both
    ends over only 2.6 of 55 s: their slopes read 58.5/s (another day's trial: 1,333/s). Replaying the bucket over
    every create and 429 reads the rate the run was bound by (89.7/s)."""
    rows = pd.read_parquet(DATA / "agent-sandbox-like-trial-ramp-creates.parquet")
    accepted = rows[rows["kind"] == "accepted"].sort_values("at_s")
    limited = rows[rows["kind"] == "rate_limited"]
    timeline = CreateTimeline(
        "agent-sandbox-like-ramp",
        tuple(accepted["at_s"]),
        tuple(accepted["ended_s"]),
        {"rate_limited": tuple(zip(limited["at_s"], limited["answered_s"], strict=True))},
    )
    ok, attempts = len(accepted), len(rows)
    failures = {"rate_limited@create": len(limited)}
    obs = ProtocolObservation(
        "ramp", 400, attempts, (0.5,) * ok, {"p50": 0.5}, 0.0, ok / attempts, failures, "r", (), timeline
    )
    fit = fit_limits([obs])
    assert fit.fitted["create_rate.per_s"] == pytest.approx(90, rel=0.05), fit.notes
    assert fit.fitted["create_rate.burst"] == pytest.approx(90, abs=3)
    assert "replayed over 8355 creates and 429s" in fit.notes["create_rate.per_s"]
