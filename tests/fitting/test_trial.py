"""`stampede trial`: the leaderboard's protocols priced before they start, scored as the leaderboard scores them,
fitted and predicted (issue #31, deliver 4).

The composite is held to a hand computation from computesdk/benchmarks' METHODOLOGY.md ("compositeScore =
timingScore x successRate"; each of the 5%-trimmed median, p95, p99 scored 100 x (1 - ms / 10,000), clamped at 0,
weighted 0.60 / 0.25 / 0.15). The slow test runs a whole trial against the embedded stub at 10 wide.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pytest

from harness.fitting.observations import QUANTILES, ProtocolObservation
from harness.fitting.trial import (
    budget_stop,
    composite,
    estimate,
    fit_inputs,
    metric_score,
    protocols,
    ramp_stages,
)
from tests.support.commands import stampede


def test_the_composite_is_the_leaderboards_formula_computed_by_hand() -> None:
    """20 successes 0.1..2.0 s of 25 attempts. Trim floor(20 x 5%) = 1 each side: 0.2..1.9 s (18 values).
    Median (1.0 + 1.1) / 2 = 1.05 s -> 89.5; nearest-rank p95 and p99: rank ceil(17.1) = ceil(17.82) = 18 -> 1.9 s
    -> 81. Timing 0.6 x 89.5 + 0.25 x 81 + 0.15 x 81 = 86.1; x success 20/25 = 68.88."""
    samples = [round(0.1 * i, 1) for i in range(1, 21)]
    score = composite("burst", samples, attempts=25)
    assert score.trimmed == pytest.approx({"p50": 1.05, "p95": 1.9, "p99": 1.9})
    assert score.timing_score == pytest.approx(86.1)
    assert score.score == pytest.approx(68.88)
    assert score.success_rate == pytest.approx(0.8)
    # beside it, stampede's untrimmed tails keep the slowest sandbox the leaderboard trimmed away
    assert score.untrimmed["max"] == pytest.approx(2.0) and score.untrimmed["p99"] == pytest.approx(2.0)


def test_a_metric_at_or_past_the_ten_second_ceiling_scores_zero_and_no_success_scores_zero() -> None:
    assert metric_score(200) == pytest.approx(98)  # METHODOLOGY.md's own examples
    assert metric_score(4000) == pytest.approx(60)
    assert metric_score(10_000) == 0 and metric_score(25_000) == 0
    nothing = composite("burst", [], attempts=10)
    assert nothing.score == 0 and nothing.success_rate == 0 and math.isnan(nothing.trimmed["p50"])


def test_the_estimate_is_each_protocols_sandbox_seconds_at_the_price() -> None:
    """100 wide, a cap of 400, 5 s a sandbox, a 10 s ramp hold: 3 x 100 x 5 s, and a ramp 25..400 of
    775 users x (10 + 5) s: 13,125 sandbox-seconds; at $0.00001 a second $0.13125."""
    assert ramp_stages(100, 400) == [25, 50, 100, 200, 400]
    plan = protocols(100, 400, sandbox_s=5.0, ramp_hold_s=10.0)
    assert [p.name for p in plan] == ["sequential", "staggered", "burst", "ramp"]
    est = estimate(plan, per_second=1e-5, per_create=None, basis="test")
    assert est.sandbox_seconds == pytest.approx(13_125)
    assert est.dollars == pytest.approx(0.13125)
    assert est.per_protocol["burst"] == pytest.approx(0.005)
    assert est.over(0.1) and not est.over(0.2) and not est.over(None)
    # a per-create charge counts every create; an unknown price is never taken for zero
    assert estimate(plan, 1e-5, 0.001, "t").dollars == pytest.approx(0.13125 + 0.001 * est.sandboxes)
    unknown = estimate(plan, None, None, "no price")
    assert unknown.dollars is None and not unknown.over(0.0)


def test_the_trial_stops_between_protocols_once_the_running_cost_passes_the_budget() -> None:
    assert budget_stop(0.02, 0.05, ["burst", "ramp"]) == ""
    assert budget_stop(0.06, None, ["burst", "ramp"]) == ""  # no budget: never stops
    assert budget_stop(0.06, 0.05, []) == ""  # the last protocol already ran: nothing to stop
    said = budget_stop(0.06, 0.05, ["burst", "ramp"])
    assert "passed --budget-usd 0.05" in said and said.endswith("not run: burst, ramp")


def test_the_protocols_are_the_leaderboards_shapes_and_the_ramp_hold_follows_the_time_scale() -> None:
    plan = {p.name: p.run_args for p in protocols(10, 40, 5.0, 10.0, time_scale=0.05)}
    assert plan["sequential"] == ("--scenario", "burst", "--users", "1", "--burst-steps", "10")
    assert plan["staggered"] == ("--scenario", "staggered", "--users", "10", "--stagger-ms", "200")
    assert plan["burst"] == ("--scenario", "burst", "--users", "10")
    assert plan["ramp"] == ("--scenario", "ramp", "--stages", "2,4,8,16,32,40", "--hold", "0.5")


def test_a_trial_estimated_over_its_budget_is_refused_before_anything_starts(tmp_path: Path) -> None:
    done = stampede("trial", "--provider", "stub", "--size", "100", "--budget-usd", "0.0001", "--out", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("estimate: $")  # the estimate is said first
    assert len(done.stderr.strip().splitlines()) == 1 and "exceeds --budget-usd 0.0001" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing ran, no trial folder


def test_a_budget_for_a_vendor_with_no_published_price_is_refused(tmp_path: Path) -> None:
    done = stampede("trial", "--provider", "vercel", "--local", "--budget-usd", "1", "--out", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--budget-usd: no published price" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_vendor_that_refuses_before_any_load_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A live vendor without its key: the first protocol's run refuses before any load; the trial says why, once."""
    env = {k: v for k, v in os.environ.items() if k != "E2B_API_KEY"}
    done = stampede("trial", "--provider", "e2b", "--size", "2", "--out", str(tmp_path), "--trial-id", "k", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "stampede: error: sequential: e2b provider: no API key; set E2B_API_KEY (or --provider-option api_key=...), "
        "or use --local for the local E2B"
    ]
    assert not (tmp_path / "k" / "sequential").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--size", "0"), "--size must be"),
        (("--budget-usd", "-1"), "--budget-usd must be"),
        (("--target", "0"), "--target must be"),
        (("--profile", "no-such-profile"), "--profile"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    done = stampede("trial", *args, "--out", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_trial_against_the_local_stub_gives_every_section_and_leaks_nothing(tmp_path: Path) -> None:
    done = stampede(
        "trial", "--provider", "stub", "--local", "--size", "10", "--time-scale", "0.05", "--cap", "20",
        "--ramp-hold", "4", "--predict-refits", "2", "--target", "200", "--out", str(tmp_path), "--trial-id", "t",
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trial = tmp_path / "t"
    card = json.loads((trial / "scorecard.json").read_text())
    assert [o["name"] for o in card["outcomes"]] == ["sequential", "staggered", "burst", "ramp"]
    assert all(o["exit_code"] == 0 and o["run_dir"] for o in card["outcomes"])
    assert all((trial / name / "run.json").exists() for name in ("sequential", "staggered", "burst", "ramp"))
    assert [c["protocol"] for c in card["composites"]] == ["sequential", "staggered", "burst"]
    for c in card["composites"]:
        assert c["attempts"] == 10 and 0 < c["score"] <= 100
        assert c["untrimmed"]["max"] >= c["trimmed"]["p99"]
    assert card["estimate"]["dollars"] > 0 and card["dollars"] > 0 and card["dollars_per_1000"] > 0
    assert "seen" in card["rate_limits"] and isinstance(card["failures_by_kind"], dict)
    assert Path(card["fitted_profile"]).exists() and "boot.median_s" in card["fitted"]
    assert "pool.max_nodes" in card["unidentified"]
    assert sorted({p["width"] for p in card["predictions"]}) == [200, 960]
    for p in card["predictions"]:
        low, high = p["intervals"]["p50"]
        assert low <= p["values"]["p50"] <= high
    assert card["leaked"] == 0
    for heading in ("## Leaderboard composite", "## Failures by kind", "## Rate-limit behaviour", "## Cost",
                    "## Fitted profile", "## Predicted"):  # fmt: skip
        assert heading in done.stdout
    assert done.stdout.index("estimate: $") < done.stdout.index("# Trial:")


def _stage(width: int, ttis: list[float]) -> ProtocolObservation:
    samples = tuple(sorted(ttis))
    return ProtocolObservation(
        "ramp",
        width,
        len(samples),
        samples,
        {k: sorted(samples)[int(q * (len(samples) - 1))] for k, q in QUANTILES.items()},
        0.0,
        1.0,
        {},
        f"run ({width})",
    )


def test_the_fit_reads_a_ramp_stage_by_stage_and_other_protocols_merged() -> None:
    """Merged, a ramp of 100 then 400 is one stage "of 400" whose median is neither's: the fit could not see where
    the load delay stops growing (runloop-like's 9 s cap, shown only by its 200 and 400 stages)."""
    stages = [_stage(100, [8.0, 8.1, 8.2]), _stage(400, [10.6, 10.7, 10.8])]
    assert [(o.protocol, o.concurrency) for o in fit_inputs("ramp", stages)] == [("ramp", 100), ("ramp", 400)]
    steps = [dataclasses.replace(s, protocol="sequential", concurrency=1) for s in stages]
    (one,) = fit_inputs("sequential", steps)
    assert one.attempts == 6 and one.concurrency == 1
