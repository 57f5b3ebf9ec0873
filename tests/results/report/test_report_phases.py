"""`stampede report` answers "where did TTI go": phases that sum to TTI, small samples marked, one unit stated in
every header, one colour per failure kind in every figure, stage starts on the timeline, concurrency ticks at the
measured values."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex

from harness.results.figures.stage_aggregate import TTI_PARTS, compute_run_stats, phase_durations
from harness.results.read.dataset import load_rollout_frame, read_run_info
from harness.results.read.vendor_time import DURATIONS, to_vendor_seconds
from harness.results.render import plots
from harness.results.render.colours import FAILURE_KIND_COLOURS, IN_FLIGHT_COLOUR, READY_COLOUR, failure_colour
from harness.results.render.report import build_report
from harness.results.render.report_tables import phase_table, stage_table
from providers.base import FailureKind
from tests.support.commands import stampede
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    """Two stages: 50 rollouts (p90 and up too few samples) and 2,000 (p99 supported, p99.9 not); three kinds."""
    stages = (
        SyntheticStage(20, 50, init_failure_p=0.1),
        SyntheticStage(80, 2000, init_failure_p=0.05, exec_failure_p=0.02),
    )
    return write_synthetic_run(tmp_path_factory.mktemp("runs"), SyntheticRun(run_id="two", stages=stages, seed=3))


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real `stampede run`: a simulated Modal-like vendor (time scale 0.1, its truth recorded), a burst of 40."""
    out = tmp_path_factory.mktemp("results")
    result = stampede(
        "run",
        "--profile",
        "modal-like",
        "--scenario",
        "burst",
        "--users",
        "40",
        "--out",
        str(out),
        "--run-id",
        "phases",
        "--progress-interval",
        "0",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return out / "phases"


@pytest.mark.slow
@pytest.mark.parametrize("basis", ["vendor", "wall"])
def test_create_ready_and_first_command_sum_to_tti_on_a_real_run(real_run, basis):
    info = read_run_info(real_run)
    frame = load_rollout_frame(info.run_dir)
    columns = (
        to_vendor_seconds(info, frame).durations
        if basis == "vendor"
        else {c: frame[c].to_numpy(dtype=float) for c in DURATIONS}
    )
    rows = phase_durations(columns, frame["exec_count"].to_numpy(dtype=float))
    reached = ~np.isnan(rows["tti_s"])
    assert reached.sum() >= 30
    parts = rows["create_s"] + rows["ready_s"] + rows["first_command_s"]
    np.testing.assert_allclose(parts[reached], rows["tti_s"][reached], rtol=1e-9, atol=1e-9)
    # the commands after the first are every command's seconds less the first's
    later = rows["later_commands_s"][reached]
    np.testing.assert_allclose(later + rows["first_command_s"][reached], rows["exec_s"][reached], rtol=1e-6, atol=1e-6)

    stage = compute_run_stats(info, frame, basis).stages[0]
    assert sum(stage.tti_share.values()) == pytest.approx(1.0)
    # each share is that part's seconds over the TTI seconds of the rollouts that became interactive
    ready_share = np.nansum(rows["ready_s"][reached]) / np.nansum(rows["tti_s"][reached])
    assert stage.tti_share["ready"] == pytest.approx(ready_share)
    table = phase_table(compute_run_stats(info, frame, basis))
    shown = {row[1].strip(): row[-1] for row in table.rows}
    assert shown["ready"] == f"{100 * ready_share:.1f}%" and shown["TTI"] == "100%"
    assert shown["later commands"] == "after TTI" and shown["teardown"] == "after TTI"


def test_the_phase_table_says_where_tti_goes(synthetic, tmp_path):
    result = build_report([synthetic], tmp_path, figures=False)
    run = result.runs[0]
    for stage in run.stages:
        assert set(stage.tti_share) == set(TTI_PARTS) and sum(stage.tti_share.values()) == pytest.approx(1.0)
        # the synthetic vendor spends its TTI in ready (seconds) against create (~50 ms)
        assert stage.tti_share["ready"] > 0.9
    assert "where TTI goes" in result.text and "first command" in result.text
    with (tmp_path / "stages.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert float(rows[1]["tti_share_ready"]) == pytest.approx(run.stages[1].tti_share["ready"], rel=1e-5)
    assert {"ready_p50", "first_command_p99", "later_commands_mean", "teardown_n"} <= set(rows[0])


def test_small_samples_are_marked_in_every_table_and_the_csv(synthetic, tmp_path):
    result = build_report([synthetic], tmp_path, figures=False)
    run = result.runs[0]
    small, large = stage_table(run).rows
    header = stage_table(run).header
    cell = {name: header.index(name) for name in ("p90", "p99", "p99.9", "max")}
    p50 = header.index("TTI p50 (vendor s)")
    # 50 rollouts: p50 stands, p90 on (50 · 0.1 = 5) < 10 samples is marked; max is an observation, never marked
    assert not small[p50].endswith("~") and small[cell["p90"]].endswith("~") and small[cell["p99"]].endswith("~")
    assert not small[cell["max"]].endswith("~")
    # 2,000 rollouts: p99 has 20 beyond it, p99.9 only 2
    assert not large[cell["p99"]].endswith("~") and large[cell["p99.9"]].endswith("~")
    phases = phase_table(run).rows
    assert phases[0][4].endswith("~") and not phases[6][4].endswith("~")  # TTI p99 of each stage
    assert "fewer than 10 samples" in result.text

    html = (tmp_path / "report.html").read_text()
    assert '<td class="small">' in html and "fewer than 10 samples" in html
    with (tmp_path / "stages.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert (rows[0]["tti_p50_supported"], rows[0]["tti_p90_supported"]) == ("True", "False")
    assert (rows[1]["tti_p99_supported"], rows[1]["tti_p99.9_supported"]) == ("True", "False")


@pytest.mark.parametrize(("basis", "unit"), [("vendor", "vendor s"), ("wall", "wall s")])
def test_the_seconds_switch_changes_every_header(synthetic, tmp_path, basis, unit):
    other = "wall s" if unit == "vendor s" else "vendor s"
    cut = SyntheticRun(run_id="cut", time_scale=0.1, stages=(SyntheticStage(40, 300, cancelled=20),), seed=4)
    second = write_synthetic_run(tmp_path, cut)
    result = build_report([synthetic, second], tmp_path / "r", basis=basis, figures=False)
    timed = [t for t in result.tables if t.title != "knee"]
    # per run a stage table and a phase table, the side-by-side table, the censoring table
    assert len(timed) == 6
    for table in timed:
        assert any(f"({unit})" in cell for cell in table.header), table.title
        assert not any(other in cell for cell in [table.title, *table.header]), table.title
    stage_header = stage_table(result.runs[0]).header
    assert f"TTI p50 ({unit})" in stage_header and f"starts/{unit}" in stage_header


def test_every_failure_kind_has_its_own_colour():
    assert set(FAILURE_KIND_COLOURS) == {str(kind) for kind in FailureKind}
    colours = list(FAILURE_KIND_COLOURS.values())
    assert len(set(colours)) == len(colours)
    assert not {IN_FLIGHT_COLOUR, READY_COLOUR} & set(colours)
    assert failure_colour("a_kind_from_a_newer_contract") not in colours


def _figures(monkeypatch, make, runs):
    """The matplotlib figure a plot function drew, instead of its PNG."""
    drawn = []
    monkeypatch.setattr(plots.canvas, "png_bytes", lambda fig: drawn.append(fig) or b"")
    make(runs)
    return drawn[0]


def _kind_colours(fig) -> dict[str, set[str]]:
    """Per failure kind named in a legend entry, the colours its artists were drawn in (bars, areas, lines)."""
    seen: dict[str, set[str]] = {}
    for ax in fig.axes:
        drawn = [(c.get_label(), patch.get_facecolor()) for c in ax.containers for patch in c.patches]
        drawn += [(a.get_label(), a.get_facecolor()[0]) for a in ax.collections if len(a.get_facecolor())]
        drawn += [(line.get_label(), line.get_color()) for line in ax.lines]
        for label, colour in drawn:
            kind = str(label).removeprefix("failed so far: ")
            if kind in FAILURE_KIND_COLOURS:
                seen.setdefault(kind, set()).add(to_hex(colour))
    return seen


def test_a_failure_kind_has_one_colour_in_every_panel_and_figure(synthetic, tmp_path, monkeypatch):
    other = write_synthetic_run(
        tmp_path, SyntheticRun(run_id="other", stages=(SyntheticStage(40, 400, init_failure_p=0.2),), seed=9)
    )
    runs = build_report([synthetic, other], tmp_path / "r", figures=False).runs
    by_figure = [
        _kind_colours(_figures(monkeypatch, make, runs)) for make in (plots.failures_vs_concurrency, plots.timelines)
    ]
    for seen in by_figure:
        assert {"died_before_ready", "died_during_exec"} <= set(seen)
        for kind, colours in seen.items():
            assert colours == {FAILURE_KIND_COLOURS[kind]}, kind


def test_the_timeline_marks_where_each_stage_began(synthetic, tmp_path, monkeypatch):
    run = build_report([synthetic], tmp_path, figures=False).runs[0]
    fig = _figures(monkeypatch, plots.timelines, [run])
    ax = fig.axes[0]
    names = [text.get_text() for text in ax.texts]
    assert names == [stage.stage for stage in run.stages]
    starts = sorted(line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":")
    assert starts[0] == 0.0 and len(starts) == len(run.stages) and starts[1] > 0


def test_concurrency_axes_are_ticked_at_the_measured_levels(synthetic, tmp_path, monkeypatch):
    run = build_report([synthetic], tmp_path, figures=False).runs[0]
    fig = _figures(monkeypatch, plots.latency_vs_concurrency, [run])
    ticks = list(fig.axes[0].get_xticks())
    assert ticks == pytest.approx(sorted(stage.measured_concurrency for stage in run.stages))
    bars = _figures(monkeypatch, plots.failures_vs_concurrency, [run])
    labels = [tick.get_text().split("\n")[0] for tick in bars.axes[0].get_xticklabels()]
    assert labels == [f"{s.measured_concurrency:.0f}" for s in sorted(run.stages, key=lambda s: s.measured_concurrency)]
