"""`stampede compare`: stages matched on measured load, deltas with intervals, verdicts, exit 98 on a regression."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.results.comparison.compare import (
    BETTER,
    FEW,
    NOISE,
    WORSE,
    Sample,
    Settings,
    bootstrap_quantile,
    compare_samples,
    figure_rng,
    quantile_delta_interval,
    rate_delta_interval,
)
from harness.results.comparison.compare_report import build_compare
from harness.results.comparison.stage_matching import match_runs, match_stages
from harness.results.render.report import load_runs
from harness.results.render.report_tables import comparison_table
from harness.wire.run_endings import EXIT_REGRESSION, EXIT_THRESHOLDS_CROSSED
from tests.support.commands import stampede
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

REPO = Path(__file__).resolve().parents[2]
LEVELS = (60, 120, 240)


def synthetic(
    root: Path,
    run_id: str,
    ready_median_s: float,
    seed: int,
    levels=LEVELS,
    n: int = 2000,
    init_failure_p: float = 0.01,
) -> Path:
    stages = tuple(
        SyntheticStage(level, n, ready_median_s=ready_median_s, ready_sigma=0.4, init_failure_p=init_failure_p)
        for level in levels
    )
    return write_synthetic_run(
        root, SyntheticRun(run_id=run_id, profile=run_id, stages=stages, seed=seed, exec_count=1)
    )


def figures_of(result, row: int = 0) -> dict:
    return {f.name: f for f in result.comparison.candidates[0].rows[row].figures}


def sample(label: str, tti: np.ndarray, ok: int | None = None, failed: int = 0) -> Sample:
    return Sample(label, 100.0, {"tti": tti}, len(tti) if ok is None else ok, failed)


# ---- matching -------------------------------------------------------------------------------------------------


def test_stages_match_on_measured_concurrency_nearest_first():
    pairs = match_stages([60, 120, 240], [58, 125, 236])
    assert [(p.reference, p.other) for p in pairs] == [(0, 0), (1, 1), (2, 2)]
    # 200 is 17% from 240: beyond the 15% tolerance, so both sides are listed as unmatched
    pairs = match_stages([60, 120, 240], [200])
    assert [(p.reference, p.other) for p in pairs] == [(0, None), (1, None), (2, None), (None, 0)]
    assert next((p.reference, p.other) for p in match_stages([60, 120, 240], [200], tolerance=0.2)) == (2, 0)
    # one to one: two candidate stages near one baseline stage, the nearer wins and the other is unmatched
    assert [(p.reference, p.other) for p in match_stages([100], [110, 101])] == [(0, 1), (None, 0)]


def test_report_side_by_side_joins_runs_on_measured_load(tmp_path):
    """`stampede report A B`: stages at 60/120/240 and 58/125/236 share three rows, not six half-empty ones."""
    a = synthetic(tmp_path, "a", 3.0, seed=1, n=300)
    b = synthetic(tmp_path, "b", 3.0, seed=2, levels=(58, 125, 236), n=300)
    runs = load_runs([a, b], "vendor")
    assert match_runs([[s.measured_concurrency for s in r.stages] for r in runs]) == [[0, 0], [1, 1], [2, 2]]
    table = comparison_table(runs)
    assert len(table.rows) == 3
    assert all("-" not in row[1:] for row in table.rows)
    assert table.header[1] == "stub/a p50 (vendor s)"


def test_report_side_by_side_hides_no_stage(tmp_path):
    """Two stages of one run near one level (100 and 112) keep a row each: the nearer pairs, the other stands alone."""
    a = synthetic(tmp_path, "a", 3.0, seed=1, levels=(100, 112), n=300)
    b = synthetic(tmp_path, "b", 3.0, seed=2, levels=(103,), n=300)
    table = comparison_table(load_runs([a, b], "vendor"))
    assert len(table.rows) == 2
    assert [row[1:4].count("-") for row in table.rows] == [0, 0]  # run a: both stages shown
    assert sorted(row[4:7].count("-") for row in table.rows) == [0, 3]  # run b's one stage: in one row


# ---- statistics -----------------------------------------------------------------------------------------------


def test_bootstrap_quantile_draws_what_resampling_draws():
    """The order-statistic shortcut has the distribution of the quantile of a real with-replacement resample."""
    values = np.sort(np.random.default_rng(5).lognormal(0, 0.8, 300))
    rng = np.random.default_rng(6)
    for q in (0.5, 0.9):
        fast = bootstrap_quantile(values, q, 20_000, rng)
        index = rng.integers(0, values.size, size=(4000, values.size))
        slow = np.quantile(values[index], q, axis=1, method="inverted_cdf")
        for level in (5, 50, 95):
            assert abs(np.percentile(fast, level) - np.percentile(slow, level)) <= 0.03 * np.percentile(slow, level)


def test_bootstrap_interval_is_reproducible_with_a_seed():
    rng = np.random.default_rng(1)
    base, cand = np.sort(rng.lognormal(0, 0.5, 5000)), np.sort(rng.lognormal(0.1, 0.5, 5000))
    settings = Settings(resamples=1000)
    first = quantile_delta_interval(base, cand, 0.99, settings, figure_rng(7, "row", "tti.p99"))
    again = quantile_delta_interval(base, cand, 0.99, settings, figure_rng(7, "row", "tti.p99"))
    other = quantile_delta_interval(base, cand, 0.99, settings, figure_rng(8, "row", "tti.p99"))
    assert first == again
    assert first != other


def test_a_clearly_slower_candidate_is_worse_and_a_faster_one_better():
    rng = np.random.default_rng(2)
    base = rng.lognormal(0, 0.5, 3000)
    slower = compare_samples(
        sample("b", base), sample("c", rng.lognormal(0, 0.5, 3000) * 1.4), Settings(), "vendor s", True
    )
    faster = compare_samples(
        sample("b", base), sample("c", rng.lognormal(0, 0.5, 3000) / 1.4), Settings(), "vendor s", True
    )
    by_name = {f.name: f for f in slower.figures}
    assert by_name["tti.p50"].verdict == WORSE and by_name["tti.p50"].regression
    assert by_name["tti.p50"].ci_low > 0 and 1.2 < by_name["tti.p50"].ratio < 1.6
    assert {f.name: f for f in faster.figures}["tti.p50"].verdict == BETTER


def test_two_samples_of_one_distribution_are_within_noise():
    rng = np.random.default_rng(3)
    row = compare_samples(
        sample("b", rng.lognormal(0, 0.5, 3000)), sample("c", rng.lognormal(0, 0.5, 3000)), Settings(), "vendor s", True
    )
    verdicts = {f.name: f.verdict for f in row.figures}
    assert verdicts["tti.p50"] == verdicts["tti.p90"] == verdicts["tti.p99"] == NOISE
    assert verdicts["tti.p99.9"] == FEW  # 3000 samples leave 3 beyond p99.9


def test_a_change_below_the_minimum_effect_is_noise_however_sure():
    base = np.linspace(1.0, 2.0, 20_000)
    row = compare_samples(sample("b", base), sample("c", base * 1.03), Settings(), "vendor s", True)
    p50 = {f.name: f for f in row.figures}["tti.p50"]
    assert p50.ci_low > 0 and p50.verdict == NOISE  # 3% < the 5% minimum effect
    row = compare_samples(sample("b", base), sample("c", base * 1.03), Settings(min_relative=0.01), "vendor s", True)
    assert {f.name: f for f in row.figures}["tti.p50"].verdict == WORSE


def test_small_sample_tails_get_no_verdict_even_when_far_worse():
    rng = np.random.default_rng(4)
    row = compare_samples(
        sample("b", rng.lognormal(0, 0.5, 200)),
        sample("c", rng.lognormal(0, 0.5, 200) * 3),
        Settings(gate=("tti.p99",)),
        "vendor s",
        True,
    )
    by_name = {f.name: f for f in row.figures}
    assert by_name["tti.p50"].verdict == WORSE  # 100 samples beyond p50
    assert by_name["tti.p99"].verdict == FEW and not by_name["tti.p99"].regression  # 2 beyond p99


def test_failure_rates_compare_with_newcombe_intervals():
    worse = compare_samples(
        sample("b", np.ones(980), ok=980, failed=20),
        sample("c", np.ones(900), ok=900, failed=100),
        Settings(),
        "vendor s",
        True,
    )
    assert {f.name: f for f in worse.figures}["failure_rate"].verdict == WORSE
    # 0 of 100 against 1 of 100: an interval around the change, not a point at 0
    low, high = rate_delta_interval(0, 100, 1, 100, 0.95)
    assert low < 0 < high
    noise = compare_samples(sample("b", np.ones(100)), sample("c", np.ones(99), ok=99, failed=1), Settings(), "s", True)
    assert {f.name: f for f in noise.figures}["failure_rate"].verdict == NOISE


# ---- the command on run folders -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare-runs")
    return {
        "base": synthetic(root, "base", 3.0, seed=1),
        "same": synthetic(root, "same", 3.0, seed=2, levels=(58, 125, 236)),
        "slow": synthetic(root, "slow", 4.5, seed=3),
        "far": synthetic(root, "far", 3.0, seed=4, levels=(30, 480), n=300),
    }


def test_a_slower_candidate_exits_98_and_names_the_regression(folders, tmp_path):
    result = stampede(
        "compare", str(folders["base"]), str(folders["slow"]), "-o", str(tmp_path / "out"), "--no-figures"
    )
    assert result.returncode == EXIT_REGRESSION, result.stderr
    assert "REGRESSION tti.p50" in result.stdout
    assert "baseline (vendor s)" in result.stdout and "delta (points)" in result.stdout
    saved = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert saved["exit_code"] == EXIT_REGRESSION and saved["regressed"]
    rows = saved["candidates"][0]["rows"]
    assert len(rows) == 4 and rows[-1]["baseline"]["stage"] == "whole run"
    p50 = next(f for f in rows[0]["figures"] if f["name"] == "tti.p50")
    assert p50["verdict"] == "worse" and p50["gated"] and p50["ci"][0] > 0
    assert {f["name"].split(".")[0] for f in rows[0]["figures"]} >= {"tti", "create", "ready", "failure_rate"}


def test_the_same_vendor_at_nearby_levels_is_no_regression(folders, tmp_path):
    result = stampede(
        "compare", str(folders["base"]), str(folders["same"]), "-o", str(tmp_path / "out"), "--no-figures"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no regression" in result.stdout
    saved = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert not saved["candidates"][0]["unmatched_baseline"] and not saved["candidates"][0]["unmatched_candidate"]


@pytest.mark.parametrize(("gate", "code"), [("none", 0), ("failure_rate", 0), ("ready.p90", EXIT_REGRESSION)])
def test_gate_chooses_what_fails_the_comparison(folders, tmp_path, gate, code):
    compared = stampede(
        "compare", str(folders["base"]), str(folders["slow"]), "-o", str(tmp_path), "--no-figures", "--gate", gate
    )
    assert compared.returncode == code, compared.stderr[-2000:]


def test_thresholds_are_checked_on_the_candidates_and_come_before_a_regression(folders, tmp_path):
    out = str(tmp_path / "out")
    held = stampede(
        "compare", str(folders["base"]), str(folders["same"]), "-o", out, "--no-figures", "--threshold", "tti.p50<1000"
    )
    assert held.returncode == 0 and "all 1 hold" in held.stdout
    crossed = stampede(
        "compare", str(folders["base"]), str(folders["same"]), "-o", out, "--no-figures", "--threshold", "tti.p50<0.001"
    )
    assert crossed.returncode == EXIT_THRESHOLDS_CROSSED and "CROSSED" in crossed.stdout
    saved = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert saved["exit_code"] == EXIT_THRESHOLDS_CROSSED and saved["thresholds"][0]["run_id"] == "same"
    both = stampede(
        "compare", str(folders["base"]), str(folders["slow"]), "-o", out, "--no-figures", "--threshold", "tti.p50<0.001"
    )
    assert both.returncode == EXIT_THRESHOLDS_CROSSED and "REGRESSION" in both.stdout


def test_the_same_seed_writes_the_same_intervals(folders, tmp_path):
    first = build_compare([folders["base"], folders["slow"]], tmp_path / "a", figures=False)
    again = build_compare([folders["base"], folders["slow"]], tmp_path / "b", figures=False)
    strip = lambda path: json.loads(path.read_text())["candidates"]  # noqa: E731
    assert strip(first.json_path) == strip(again.json_path)


@pytest.mark.parametrize(
    "args, needle",
    [
        (("{base}",), "CANDIDATE"),
        (("{base}", "{base}"), "two different run folders"),
        (("{base}", "{nowhere}"), "does not exist"),
        (("{base}", "{tmp}"), "not a stampede run folder"),
        (("{base}", "{slow}", "--gate", "tti.p42"), "unknown figure"),
        (("{base}", "{slow}", "--min-effect", "lots"), "not a number"),
        (("{base}", "{far}"), "no stage ran within 15%"),
        (("{base}", "{slow}", "--threshold", "tti.p50<<3"), "--threshold"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(folders, tmp_path, args, needle):
    values = {**folders, "nowhere": tmp_path / "nowhere", "tmp": tmp_path}
    result = stampede("compare", *(a.format(**values) for a in args), "-o", str(tmp_path / "out"), "--no-figures")
    assert result.returncode == 2
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


# ---- real runs ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_real_runs_of_different_vendors(tmp_path):
    """ideal vs modal-like, bursts of 40: modal-like's cold starts are a regression; the overlay is drawn."""
    out = tmp_path / "runs"
    for profile in ("ideal", "modal-like"):
        run = stampede(
            "run",
            "--profile",
            profile,
            "--scenario",
            "burst",
            "--users",
            "40",
            "--seed",
            "0",
            "--out",
            str(out),
            "--run-id",
            profile,
            timeout=180,
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = stampede("compare", str(out / "ideal"), str(out / "modal-like"), "-o", str(tmp_path / "cmp"))
    assert result.returncode == EXIT_REGRESSION, result.stdout + result.stderr
    assert "REGRESSION tti.p50" in result.stdout and "01-burst40" in result.stdout
    for name in ("compare.html", "compare.json", "tti_survival.png", "delta_tti.png", "delta_rates.png"):
        assert (tmp_path / "cmp" / name).stat().st_size > 1000, name
    saved = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    p50 = next(f for f in saved["candidates"][0]["rows"][0]["figures"] if f["name"] == "tti.p50")
    assert p50["ratio"] > 3 and p50["verdict"] == "worse"
    # the other way round the candidate is better: no regression
    reverse = stampede(
        "compare", str(out / "modal-like"), str(out / "ideal"), "-o", str(tmp_path / "rev"), "--no-figures"
    )
    assert reverse.returncode == 0 and "better" in reverse.stdout


def test_compare_json_matches_its_schema_and_a_broken_one_does_not(folders, tmp_path):
    """compare.json is for other programs (a CI gate's own script): it is checked against its schema."""
    from harness.errors import UsageError
    from harness.results.comparison.compare_report import validate_comparison

    out = tmp_path / "out"
    stampede(
        "compare",
        str(folders["base"]),
        str(folders["slow"]),
        "-o",
        str(out),
        "--no-figures",
        "--threshold",
        "tti.p50<1000",
    )
    saved = json.loads((out / "compare.json").read_text())
    validate_comparison(saved)
    figure = saved["candidates"][0]["rows"][0]["figures"][0]
    for path, value in ((("exit_code",), 1), (("unit",), "seconds"), (("compare_version",), 2)):
        broken = json.loads(json.dumps(saved))
        broken[path[0]] = value
        with pytest.raises(UsageError, match=path[0]):
            validate_comparison(broken)
    broken = json.loads(json.dumps(saved))
    broken["candidates"][0]["rows"][0]["figures"][0] = {**figure, "verdict": "slower"}
    with pytest.raises(UsageError, match="candidates/0/rows/0/figures/0/verdict"):
        validate_comparison(broken)


def test_a_zero_baseline_gives_null_ratios_with_a_reason_and_the_tables_print(tmp_path):
    """A baseline with no failures against a failing candidate: the ratio has a zero denominator. compare.json
    holds null and says why; the tables print and the run is judged (exit 98), not refused by the schema."""
    root = tmp_path / "runs"
    base = synthetic(root, "clean", 3.0, seed=11, levels=(60,), n=400, init_failure_p=0.0)
    failing = synthetic(root, "failing", 3.0, seed=12, levels=(60,), n=400, init_failure_p=0.3)
    out = tmp_path / "out"
    result = stampede("compare", str(base), str(failing), "-o", str(out), "--no-figures")
    assert result.returncode == EXIT_REGRESSION, result.stdout + result.stderr
    assert "baseline (%)" in result.stdout and "- (base 0)" in result.stdout
    saved = json.loads((out / "compare.json").read_text())
    rate = next(f for f in saved["candidates"][0]["rows"][0]["figures"] if f["name"] == "init_failure_rate")
    assert rate["baseline"] == 0 and rate["candidate"] > 0.2
    assert rate["ratio"] is None and rate["ratio_note"] == "baseline is 0: no ratio"
    assert rate["verdict"] == "worse"


def test_a_document_that_breaks_its_own_schema_is_its_own_exit_status(folders, tmp_path, monkeypatch):
    """compare.json failing its schema is stampede's bug: the tables still come, the exit status says so."""
    from harness.results.comparison import compare_report
    from harness.wire.run_endings import EXIT_SCHEMA_MISMATCH

    real = compare_report.comparison_json
    monkeypatch.setattr(compare_report, "comparison_json", lambda *a, **k: {**real(*a, **k), "exit_code": "x"})
    result = build_compare([folders["base"], folders["same"]], tmp_path / "out", figures=False)
    assert result.exit_code == EXIT_SCHEMA_MISMATCH
    assert "baseline (vendor s)" in result.text and "compare.json not written" in result.text
    assert not (tmp_path / "out" / "compare.json").exists()
