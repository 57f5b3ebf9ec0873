"""`fit_profile` and `stampede calibrate --fit RUN`: a profile fitted to what runs showed, and nothing more.

The fast tests feed observations drawn from the simulator itself (a known profile, another seed than the fit's);
the slow ones fit real `stampede run --provider stub` runs of a known profile. A recovered value is held to a bound
that comes from the sample (the spread of the fit over bootstrap resamples of the observations), never a fixed
tolerance that a lucky or unlucky draw could break.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import tomllib
from pathlib import Path

import pytest

from foundation.quantiles import nearest_rank
from harness.cli.calibrate import render_fit
from harness.fitting.fit import fit_profile, profile_toml, with_intervals, write_profile_toml
from harness.fitting.observations import QUANTILES, ProtocolObservation, observations_from_run
from providers.sim.core.experiments import simulate_burst, simulate_closed_loop, simulate_sequential
from providers.sim.core.profile import load_profile
from tests.support.commands import stampede

TRUE_MEDIAN = 0.8  # e2b-like's boot.median_s is 0.43: the fit must move it here


def _observation(protocol: str, width: int, ttis: list[float], attempts: int | None = None, **failures: int):
    samples = tuple(sorted(ttis))
    n = attempts if attempts is not None else len(samples)
    return ProtocolObservation(
        protocol=protocol,
        concurrency=width,
        attempts=n,
        tti_s=samples,
        quantiles={k: nearest_rank(samples, q) for k, q in QUANTILES.items()},
        trimmed=0.0,
        success_rate=len(samples) / n,
        failures={k.replace("_at_", "@"): v for k, v in failures.items()},
        source=f"test {protocol}@{width}",
    )


def _resampled(obs: ProtocolObservation, rng: random.Random) -> ProtocolObservation:
    return _observation(obs.protocol, obs.concurrency, rng.choices(obs.tti_s, k=len(obs.tti_s)))


def _bootstrap_bound(observations: list[ProtocolObservation], prior_name: str, rounds: int = 12) -> float:
    """Three standard deviations of the fitted boot median over bootstrap resamples of the samples."""
    rng = random.Random(7)
    prior = load_profile(prior_name)
    fits = [
        fit_profile([_resampled(o, rng) for o in observations], prior, "boot").fitted["boot.median_s"]
        for _ in range(rounds)
    ]
    return 3 * statistics.stdev(fits)


def test_the_fit_recovers_a_known_boot_median_within_its_sampling_error() -> None:
    truth = load_profile("e2b-like").with_overrides({"boot.median_s": TRUE_MEDIAN})
    run = simulate_sequential(truth, 60, seed=1234)  # a seed the fit's forward model never uses
    observations = [_observation("sequential", 1, run.ttis())]
    result = fit_profile(observations, load_profile("e2b-like"), "e2b-measured")
    bound = _bootstrap_bound(observations, "e2b-like")
    assert 0 < bound < 0.25 * TRUE_MEDIAN  # tight enough that the prior (0.43) is ruled out
    assert abs(result.fitted["boot.median_s"] - TRUE_MEDIAN) <= bound
    assert result.profile.name == "e2b-measured"
    p50 = next(r for r in result.rows if r.stat == "p50")
    assert abs(p50.error) < 0.05  # the fitted profile replays the observation's median


def test_bootstrap_intervals_cover_the_true_boot_median_and_reach_the_profile(tmp_path: Path) -> None:
    truth = load_profile("e2b-like").with_overrides({"boot.median_s": TRUE_MEDIAN})
    observations = [_observation("sequential", 1, simulate_sequential(truth, 60, seed=1234).ttis())]
    result = with_intervals(fit_profile(observations, load_profile("e2b-like"), "iv"), observations, truth, 30)
    low, high = result.intervals["boot.median_s"]
    assert low < TRUE_MEDIAN < high and low <= result.fitted["boot.median_s"] <= high
    assert "errors.create_transient_prob" not in result.intervals  # 0 failures in every replicate: no interval
    source = tomllib.loads(write_profile_toml(result, tmp_path / "iv.toml").read_text())["boot"]["median_s_source"]
    assert source.endswith(f"90% bootstrap interval [{low:.4g}, {high:.4g}] over 30")
    assert f"- boot.median_s = {result.fitted['boot.median_s']:.4g} [{low:.4g}, {high:.4g}]" in render_fit(result)


def test_a_burst_beside_a_sequential_fits_the_load_delay_and_keeps_the_boot() -> None:
    truth = load_profile("e2b-like").with_overrides({"boot.load_delay_s": 0.02, "boot.load_delay_max_s": 10})
    sequential = _observation("sequential", 1, simulate_sequential(truth, 60, seed=99).ttis())
    burst = _observation("burst", 60, simulate_burst(truth, 60, seed=99).ttis())
    result = fit_profile([sequential, burst], load_profile("e2b-like"), "b")
    assert result.fitted["boot.load_delay_s"] > 0.005  # e2b-like's own 0.009 would not give the burst's median
    assert "boot.load_delay_s" not in result.unidentified
    burst_p50 = next(r for r in result.rows if r.protocol == "burst@60" and r.stat == "p50")
    assert abs(burst_p50.error) < 0.10


def test_a_ramp_beside_the_burst_does_not_move_the_load_delay() -> None:
    """A ramp's TTI carries its 429 retries and re-creating users (a 5 s median on a 0.4 s vendor): fitted into the
    load delay it made a 960 burst of daytona-like predict 1.09 s against 0.66 s measured."""
    truth = load_profile("e2b-like")
    sequential = _observation("sequential", 1, simulate_sequential(truth, 60, seed=99).ttis())
    burst = _observation("burst", 60, simulate_burst(truth, 60, seed=99).ttis())
    ramp = _observation("ramp", 400, [5.0 + 0.01 * i for i in range(300)], attempts=300)
    alone = fit_profile([sequential, burst], truth, "b").fitted["boot.load_delay_s"]
    with_ramp = fit_profile([sequential, burst, ramp], truth, "b").fitted["boot.load_delay_s"]
    assert with_ramp == pytest.approx(alone)


def test_a_burst_whose_delay_stops_growing_fits_the_cap_and_predicts_a_wider_burst() -> None:
    """e2b-like's load delay stops growing at ~38 booting (0.009 s each, at most 0.33 s): a burst of 100 shows it in
    its shape (most of the burst moved by the same 0.33 s). A delay fitted as still growing at the 100th sandbox
    (cap 0.7 s) put a burst of 400 at ~1.1 s against 0.8 s."""
    truth = load_profile("e2b-like").with_overrides({"quota.max_active": "inf", "create_rate.burst": 10000})
    sequential = _observation("sequential", 1, simulate_sequential(truth, 100, seed=1234).ttis())
    burst = _observation("burst", 100, simulate_burst(truth, 100, seed=1234).ttis())
    result = fit_profile([sequential, burst], truth, "cap")
    assert result.fitted["boot.load_delay_max_s"] < 0.55
    assert "stops growing" in result.notes["boot.load_delay_max_s"]
    predicted = statistics.median(simulate_burst(result.profile, 400, seed=s).quantile(0.5) for s in range(3))
    measured = statistics.median(simulate_burst(truth, 400, seed=50 + s).quantile(0.5) for s in range(3))
    assert abs(predicted / measured - 1) < 0.15  # issue #31's bar for a TTI p50


def test_a_ramp_wider_than_the_burst_fits_the_cap_the_burst_never_reached() -> None:
    """runloop-like's delay (0.065 s each) stops growing at 9 s, at ~139 booting: a burst of 100 never reaches it,
    and held at the burst's 6.4 s it put a 960 burst's p50 at 8.5 s against 11.1 s measured. The trial's ramp
    stages of 200 and 400 (every user booting together, nothing refused) show where it stops."""
    truth = load_profile("runloop-like")
    sequential = _observation("sequential", 1, simulate_sequential(truth, 60, seed=1234).ttis())
    burst = _observation("burst", 100, simulate_burst(truth, 100, seed=1234).ttis())
    ramps = [
        _observation("ramp", width, simulate_closed_loop(truth, width, 2, seed=1234, hold_s=0.0).ttis())
        for width in (200, 400)
    ]
    without = fit_profile([sequential, burst], truth, "r").fitted["boot.load_delay_max_s"]
    result = fit_profile([sequential, burst, *ramps], truth, "r")
    assert without < 7.5  # held at the burst's delay: the case this guards
    assert abs(result.fitted["boot.load_delay_max_s"] - 9.0) < 0.1 * 9.0
    assert "ramp@200, ramp@400" in result.notes["boot.load_delay_max_s"]
    refused = dataclasses.replace(ramps[1], failures={"rate_limited@create": 5})  # a ramp that met a limit: not used
    assert fit_profile([sequential, burst, refused], truth, "r").fitted["boot.load_delay_max_s"] == without


def test_a_run_with_no_ramp_says_the_cap_is_unidentified_in_the_fit_and_the_profile(tmp_path: Path) -> None:
    run = simulate_burst("e2b-like", 20, seed=5)
    result = fit_profile([_observation("burst", 20, run.ttis())], load_profile("ideal"), "no-ramp")
    assert result.unidentified["quota.max_active"] == "no run reached a concurrency cap: no ramp"
    assert "- quota.max_active: no run reached a concurrency cap: no ramp" in render_fit(result)
    path = write_profile_toml(result, tmp_path / "no-ramp.toml")
    label = tomllib.loads(path.read_text())["quota"]["max_active_label"]
    assert label == (
        "assumed: the prior's (ideal); not identifiable from these runs: no run reached a concurrency cap: no ramp"
    )
    loaded = load_profile(str(path))  # what `stampede run --profile PATH` loads
    assert loaded.quota.max_active == load_profile("ideal").quota.max_active
    assert loaded.labels["boot.median_s"].startswith(
        "calibrated: fitted by stampede calibrate --fit from test burst@20"
    )
    assert all(key in loaded.labels and key in loaded.sources for key in loaded.numeric_fields())


def test_refusals_fit_the_cap_the_bucket_and_errors_by_kind() -> None:
    ttis = simulate_burst("e2b-like", 30, seed=3).ttis()
    quota = _observation("ramp", 50, ttis, attempts=50, quota_exhausted_at_create=20)
    limited = _observation("burst", 40, ttis, attempts=40, rate_limited_at_create=10)
    errors = _observation("burst", 31, ttis, attempts=31, create_error_at_create=1)
    result = fit_profile([quota, limited, errors], load_profile("ideal"), "refused")
    assert result.fitted["quota.max_active"] == 30
    assert result.fitted["create_rate.burst"] == 30
    assert result.unidentified["create_rate.per_s"] == "a burst shows the bucket's depth, not its refill rate"
    assert result.fitted["errors.create_transient_prob"] == pytest.approx(1 / 121)
    assert result.profile.quota.max_active == 30 and result.profile.create_rate.burst == 30


def test_the_profile_is_dated_and_names_its_inputs() -> None:
    run = simulate_sequential("e2b-like", 20, seed=2)
    obs = dataclasses.replace(_observation("sequential", 1, run.ttis()), source="results/run-a (01-steady1)")
    text = profile_toml(fit_profile([obs], load_profile("ideal"), "dated"))
    assert text.startswith("# fitted by `stampede calibrate --fit` on 20")
    assert "results/run-a (01-steady1)" in text.splitlines()[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--fit", "/nonexistent/run", "--name", "x"), "/nonexistent/run does not exist"),
        (("--fit", "{tmp}", "--name", "x"), "is not a stampede run folder"),
        (("--fit", "{tmp}"), "--fit needs --name NAME"),
        (("--name", "x"), "go with --fit RUN"),
        (("--fit", "{tmp}", "--name", "x", "--bootstrap", "-1"), "--bootstrap takes a number of resamples"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = stampede("calibrate", *(a.replace("{tmp}", str(tmp_path)) for a in args), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr
    assert not list(tmp_path.glob("*.toml"))


def _stub_run(out: Path, run_id: str, *args: str) -> Path:
    done = stampede(
        "run", "--provider", "stub", "--profile", "e2b-like", "--out", str(out), "--run-id", run_id,
        "--progress-interval", "0", *(() if "--plan" in args else ("--commands", "true")), *args,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out / run_id


@pytest.mark.slow
@pytest.mark.parametrize("poll_s", ["0.05", "0.3"])
def test_a_real_run_fits_its_profile_boot_median_whatever_the_sdk_polling(tmp_path: Path, poll_s: str) -> None:
    """A stub vendor whose boot median was moved to 0.8 s, four at a time for 8 s: `calibrate --fit` recovers it
    within the sample's bootstrap bound, with the readiness poll 50 ms or 300 ms apart (the poll window is the
    SDK's, not the vendor's), and the profile it writes runs."""
    run = _stub_run(
        tmp_path, "steady4", "--profile-set", f"boot.median_s={TRUE_MEDIAN}", "--provider-option",
        f"poll_interval_s={poll_s}", "--scenario", "steady", "--users", "4", "--run-time", "8s",
    )  # fmt: skip
    out = tmp_path / "fitted.toml"
    done = stampede("calibrate", "--fit", str(run), "--name", "fitted", "--prior", "e2b-like", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "- quota.max_active: no run reached a concurrency cap: no ramp" in done.stdout
    fitted = tomllib.loads(out.read_text())
    assert str(run) in fitted["boot"]["median_s_label"]
    assert fitted["quota"]["max_active_label"].endswith(
        "not identifiable from these runs: no run reached a concurrency cap: no ramp"
    )
    observations = observations_from_run(run)
    assert [(o.protocol, o.concurrency) for o in observations] == [("steady", 4)]
    bound = _bootstrap_bound(observations, "e2b-like")
    assert abs(fitted["boot"]["median_s"] - TRUE_MEDIAN) <= bound, (fitted["boot"]["median_s"], bound)
    again = _stub_run(tmp_path, "again", "--profile", str(out), "--scenario", "burst", "--users", "3")
    assert again.is_dir()


@pytest.mark.slow
def test_a_run_where_every_create_failed_is_one_line(tmp_path: Path) -> None:
    run = _stub_run(
        tmp_path, "failed", "--profile-set", "errors.create_transient_prob=1", "--scenario", "burst", "--users", "3"
    )
    done = stampede("calibrate", "--fit", str(run), "--name", "x", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().endswith("no successful rollout to fit (every attempt failed, or none ran)")
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_real_burst_past_a_cap_fits_the_cap_and_names_the_rate_limit_unseen(tmp_path: Path) -> None:
    run = _stub_run(tmp_path, "capped", "--profile-set", "quota.max_active=10", "--scenario", "burst", "--users", "15")
    out = tmp_path / "capped.toml"
    done = stampede("calibrate", "--fit", str(run), "--name", "capped", "--prior", "e2b-like", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "- quota.max_active = 10 (the most sandboxes alive at once when one of 5 quota refusals came; " in done.stdout
    )
    assert "| burst@15 | success | 66.7% | 66.7% | +0.0 pt | yes |" in done.stdout
    quota = tomllib.loads(out.read_text())["quota"]
    assert quota["max_active"] == 10 and quota["max_active_label"].startswith("calibrated: fitted by")
    assert "- create_rate.per_s: no run reached a rate limit" in done.stdout


PLAN = """
[plan]
name = "calls"
description = "a probe, then 20 short calls whose own time is known"

[[step]]
kind = "create"

[[step]]
kind = "exec"
name = "probe"
command = ["true"]

[[step]]
kind = "exec"
name = "call"
command = ["sleep", "0.01"]
command_s = 0.01
repeat = "const:20"
"""


@pytest.mark.slow
def test_a_plan_run_fits_the_per_command_overhead(tmp_path: Path) -> None:
    """exec.overhead_median_s moved to 30 ms: the fit reads it from the steps' overhead (each call's time beyond the
    command's own), no lower than the sample allows (the harness's round trip can only add to it)."""
    plan = tmp_path / "calls.toml"
    plan.write_text(PLAN)
    run = _stub_run(
        tmp_path, "plan", "--profile-set", "exec.overhead_median_s=0.03", "--plan", str(plan), "--scenario", "steady",
        "--users", "2", "--run-time", "5s",
    )  # fmt: skip
    (obs,) = observations_from_run(run)
    calls = obs.exec_overhead_s
    assert len(calls) >= 21 * 2  # at least one rollout per user, each 21 calls
    result = fit_profile([obs], load_profile("e2b-like"), "calls")
    fitted = result.fitted["exec.overhead_median_s"]
    assert fitted == nearest_rank(calls, 0.5)
    rng = random.Random(3)
    medians = [nearest_rank(sorted(rng.choices(calls, k=len(calls))), 0.5) for _ in range(200)]
    assert fitted >= 0.03 - 3 * statistics.stdev(medians)
    assert "exec.overhead_median_s" not in result.unidentified
    assert result.notes["exec.overhead_median_s"] == f"{len(calls)} command calls"
