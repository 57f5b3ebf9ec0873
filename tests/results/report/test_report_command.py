"""`stampede report` on runs in the real results schema: files, numbers, seconds basis, side by side, errors."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.figures.knee import KneeThresholds
from harness.results.render.report import build_report
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, ramp_stages, write_synthetic_run

REPO = Path(__file__).resolve().parents[3]


def command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.report", *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {
        "ramp": write_synthetic_run(root, SyntheticRun(run_id="ramp", stages=ramp_stages(20_000), seed=1)),
        "scaled": write_synthetic_run(
            root,
            SyntheticRun(
                run_id="scaled",
                profile="fast",
                time_scale=0.1,
                scenario="burst",
                stages=(SyntheticStage(960, 3000, init_failure_p=0.15),),
                seed=2,
            ),
        ),
    }


def test_report_writes_a_self_contained_html_the_figures_and_a_csv(runs, tmp_path):
    result = command(str(runs["ramp"]), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    names = {p.name for p in out.iterdir()}
    assert {
        "report.html",
        "tti_breakdown.png",
        "tti_cdf.png",
        "latency_vs_concurrency.png",
        "failures_vs_concurrency.png",
        "timeline.png",
        "stages.csv",
    } <= names
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5 and "http" not in html.replace("https://", "")
    assert "05-ramp960" in html and "time scale 1" in html
    assert "TTI p50" in result.stdout and "knee" in result.stdout and "cxl" in result.stdout
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in out.glob("*.png"))


def test_tti_numbers_equal_the_end_of_run_summary(runs, tmp_path):
    report = build_report([runs["ramp"]], tmp_path, figures=False)
    summary = subprocess.run(
        [sys.executable, "-m", "harness.cli", "summary", str(runs["ramp"])],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert summary.returncode == 0, summary.stderr
    expected = {row["stage"]: row for row in json.loads((runs["ramp"] / "summary.json").read_text())["stages"]}
    for stage in report.runs[0].stages:
        row = expected[stage.stage]
        counts = row["counts"]
        assert (stage.rollouts, stage.ok, stage.failed, stage.cancelled) == (
            counts["rollouts"],
            counts["ok"],
            counts["failed"],
            counts["cancelled"],
        )
        for name in ("p50", "p90", "p99", "p99.9"):
            assert stage.phases["tti"][name] == row["quantiles"]["tti"][name]["value"]
        assert stage.phases["tti"]["max"] == row["quantiles"]["tti"]["max"]
        assert stage.failures_by_kind == row["failures_by_kind"]
    last = report.runs[0].stages[-1]
    assert last.cancelled > 0 and 0 < last.cancelled_before_tti < last.cancelled
    assert last.failures_by_phase.keys() <= {"ready", "exec"}
    with (tmp_path / "stages.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 5 and float(rows[0]["tti_p50"]) == report.runs[0].stages[0].phases["tti"]["p50"]


def test_vendor_seconds_divide_by_the_time_scale(runs, tmp_path):
    vendor = build_report([runs["scaled"]], tmp_path / "v", figures=False).runs[0].stages[0]
    wall = build_report([runs["scaled"]], tmp_path / "w", basis="wall", figures=False).runs[0].stages[0]
    for phase in ("tti", "create", "ready", "first_command", "later_commands", "teardown"):
        assert vendor.phases[phase]["p99"] == pytest.approx(wall.phases[phase]["p99"] / 0.1)
    assert vendor.start_rate == pytest.approx(wall.start_rate * 0.1)


def test_runs_side_by_side_and_settable_knee(runs, tmp_path):
    result = command(
        str(runs["ramp"]),
        str(runs["scaled"]),
        "-o",
        str(tmp_path),
        "--knee-max-failure",
        "50",
        "--knee-p99-ratio",
        "100",
        "--no-figures",
    )
    assert result.returncode == 0, result.stderr
    assert (
        "side by side" in result.stdout and "stub/synthetic p50" in result.stdout and "stub/fast p50" in result.stdout
    )
    assert "seconds are vendor seconds (wall / 0.1)" in result.stdout
    # the knee names the measured level (random submits around a target of 960 read a little off it)
    held = re.search(r"holds up to (\d+) in flight \(05-ramp960\)", result.stdout)
    assert held and int(held.group(1)) == pytest.approx(960, rel=0.15)
    strict = build_report(
        [runs["scaled"]], tmp_path / "s", thresholds=KneeThresholds(max_failure_rate=0.05), figures=False
    )
    assert strict.knees[0].stage is None and "failure rate" in strict.knees[0].reason


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda tmp: tmp / "missing", "does not exist"),
        (lambda tmp: tmp, "is not a stampede run folder"),
        (lambda tmp: (tmp / "file.txt").write_text("x") and tmp / "file.txt", "is not a directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, make, needle):
    result = command(str(make(tmp_path)))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr


def test_bad_option_is_one_line_and_exit_2(runs):
    result = command(str(runs["ramp"]), "--knee-max-failure", "lots")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_stages_are_labelled_by_measured_concurrency_and_joined_on_it(tmp_path):
    # a staggered 100 (one start every 600 ms) keeps ~3 in flight; a burst of 100 keeps 100: same target, and
    # the side-by-side table must not put them on one row
    quick = {"ready_median_s": 1.2, "ready_sigma": 0.2, "init_failure_p": 0.0}
    staggered = write_synthetic_run(
        tmp_path,
        SyntheticRun(
            run_id="staggered",
            profile="stag",
            scenario="staggered",
            exec_s=0.2,
            exec_count=1,
            stages=(SyntheticStage(100, 100, stagger_s=0.6, **quick),),
        ),
    )
    burst = write_synthetic_run(
        tmp_path,
        SyntheticRun(
            run_id="burst",
            profile="burst",
            scenario="burst",
            exec_s=0.2,
            exec_count=1,
            stages=(SyntheticStage(100, 100, burst_spread_s=0.3, **quick),),
        ),
    )
    report = build_report([staggered, burst], tmp_path / "out", figures=False)
    stag, bur = (run.stages[0] for run in report.runs)
    assert 1 <= stag.concurrency <= 4 and stag.target == 100
    assert bur.concurrency == 100 and bur.target == 100
    lines = report.text.splitlines()
    side = lines[next(i for i, line in enumerate(lines) if line.startswith("side by side")) :]
    rows = [line.split() for line in side[3:5]]
    assert [row[0] for row in rows] == [str(stag.concurrency), "100"]
    assert rows[0][-3:] == ["-", "-", "-"] and rows[1][1:4] == ["-", "-", "-"]
    header = next(line for line in lines if line.startswith("stage "))
    assert header.split()[:3] == ["stage", "conc", "target"]
    with (tmp_path / "out" / "stages.csv").open() as handle:
        row = next(csv.DictReader(handle))
    assert row["concurrency"] == str(stag.concurrency) and row["target_concurrency"] == "100"
