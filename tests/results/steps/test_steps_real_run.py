"""One real run of a plan (a Locust process, its engine and the embedded stub vendor on `--profile ideal`) read
back by every reader: the summary's steps and infrastructure tax, summary.json as plain pandas reproduces it, a
`step:` threshold, the report's step figures, latency model v2 and `stampede model` on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.commands import stampede

PLAN = """
[plan]
name = "small-swe"

[[step]]
kind = "create"

[[step]]
kind = "exec"
name = "probe"
command = ["true"]

[[step]]
kind = "upload"
name = "repo"
dest = "repo"
files = "const:20"
file_size = "const:1024"

[[step]]
kind = "exec"
name = "tool-call"
command = ["sleep", "0.05"]
command_s = 0.05
repeat = "const:5"

[[step]]
kind = "upload"
name = "edits"
path = "patch.diff"
file_size = "const:500"

[[step]]
kind = "download"
name = "diff"
path = "patch.diff"
"""

MODEL = """
[step]
prompts = 2
group_size = 2
[rollout]
turns = 150
generation_s = 1.0
tool_s = 0.05
[trainer]
samples_per_second = 100.0
[simulation]
steps = 3
warmup_steps = 0
"""


@pytest.fixture(scope="module")
def plan_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("real")
    (tmp / "plan.toml").write_text(PLAN)
    out = tmp / "out"
    result = stampede(
        "run", "--plan", str(tmp / "plan.toml"), "--profile", "ideal", "--scenario", "burst", "-u", "4",
        "--threshold", "step:upload.p99<60s", "--out", str(out), "--progress-interval", "0", timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "step:upload.p99<60s" in result.stdout and "infrastructure tax" in result.stdout
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.is_symlink()]
    return run_dir


def test_a_real_plan_run_reads_back_through_summary_report_export_and_model(plan_run, tmp_path):
    summary = stampede("summary", str(plan_run), "--threshold", "step:exec.overhead p50 < 5s")
    assert summary.returncode == 0, summary.stderr
    assert "exec[tool-call]" in summary.stdout and "exec overhead" in summary.stdout
    document = json.loads((plan_run / "summary.json").read_text())
    steps = {entry["step"]: entry for entry in document["steps"]["run"]}
    assert steps["upload"]["count"] == 8 and steps["exec.overhead"]["count"] == 20
    frame = pd.read_parquet(plan_run / "steps")  # the docs' one pandas call reproduces summary.json
    uploads = frame[(frame.kind == "upload") & frame.ok].duration_vendor_s
    assert steps["upload"]["quantiles"]["p50"]["value"] == pytest.approx(
        float(np.quantile(uploads, 0.5, method="inverted_cdf"))
    )
    tax = document["steps"]["infrastructure_tax"]
    assert tax["trajectories"] == 4 and {p["part"] for p in tax["parts"]} >= {"create/ready", "exec overhead"}

    report = stampede("report", str(plan_run), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "report" / "step_survival.png").exists()

    export = stampede("export", str(plan_run), "--out", str(tmp_path / "lm.json"))
    assert export.returncode == 0, export.stderr
    model = json.loads((tmp_path / "lm.json").read_text())
    assert model["version"] == 2 and "exec.overhead" in model["models"][0]["buckets"][0]["steps"]

    (tmp_path / "rl.toml").write_text(MODEL)
    priced = stampede("model", "--config", str(tmp_path / "rl.toml"), "--latency", str(tmp_path / "lm.json"))
    assert priced.returncode == 0, priced.stderr
    assert "infrastructure tax of this shape (150 tool calls per trajectory)" in priced.stdout
