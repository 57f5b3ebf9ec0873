"""compare's ratio charts tick their log axis in numbers a reader says (`0.95×`, `1×`), never `9.5×10⁻¹`
(issue #35 row 11)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.results.comparison import compare_plots
from harness.results.comparison.compare import compare_runs
from harness.results.render.report import load_runs
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run


def run(root: Path, run_id: str, ready_median_s: float) -> Path:
    stage = SyntheticStage(100, 1500, ready_median_s=ready_median_s, ready_sigma=0.3, init_failure_p=0.01)
    return write_synthetic_run(root, SyntheticRun(run_id=run_id, profile=run_id, stages=(stage,), seed=5))


def tick_labels(monkeypatch: pytest.MonkeyPatch, comparison: Any, prefix: str) -> list[str]:
    """The x tick labels of the delta chart as drawn (the figure caught before it becomes PNG bytes)."""
    caught: list[Any] = []
    real = compare_plots.canvas.png_bytes
    monkeypatch.setattr(compare_plots.canvas, "png_bytes", lambda fig: (caught.append(fig), real(fig))[1])
    compare_plots.delta_chart(comparison, prefix)
    (figure,) = caught
    axis = figure.axes[0].xaxis
    visible = [t.get_text() for t in axis.get_ticklabels(which="both") if t.get_text()]
    low, high = figure.axes[0].get_xlim()
    return [label for label, tick in zip(visible, axis.get_ticklocs(), strict=False) if low <= tick <= high] or visible


def test_ratio_axes_are_ticked_in_plain_ratios(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    baseline, candidate = load_runs([run(tmp_path, "base", 3.0), run(tmp_path, "cand", 3.15)], "vendor")
    comparison = compare_runs(baseline, [candidate])
    labels = tick_labels(monkeypatch, comparison, "tti")
    assert labels, "no tick labels"
    for label in labels:
        assert "10^" not in label and "times" not in label and "$" not in label, labels
        assert label.endswith("×"), labels
        float(label.removesuffix("×"))  # a plain number
    assert "1×" in labels
