"""What `stampede model` prints and draws (issue #35 rows 6 and 11): every sweep row outside the latency model's
measured buckets is marked, the sweep's figure shows the measured range and names the vendor and range, and
numbers read in plain units (k, M, cents), never `7.826e+05` or `$3.942e-05`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.export.latency_export import build_latency_model
from harness.rlmodel import sweep as sweeps
from harness.rlmodel.config import load_config
from harness.rlmodel.latency_input import load_latency_model
from tests.support.synthetic_run import SyntheticRun, SyntheticStage, write_synthetic_run

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "rl-swe-agent.toml"
EXPONENT = re.compile(r"\d(\.\d+)?e[+-]\d")


@pytest.fixture(scope="module")
def one_bucket(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A latency model measured at one concurrency: a 960-wide burst with many init failures, priced as Modal."""
    root = tmp_path_factory.mktemp("latency")
    stage = SyntheticStage(960, 960, init_failure_p=0.3, burst_spread_s=0.5)
    run = write_synthetic_run(root, SyntheticRun(run_id="burst960", profile="modal-like", stages=(stage,)))
    path = root / "latency_model.json"
    path.write_text(json.dumps(build_latency_model([run], fit=False)))
    return path


def model(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "model", *args], capture_output=True, text=True, timeout=300, cwd=REPO
    )


def measured_bucket(path: Path) -> int:
    buckets = json.loads(path.read_text())["models"][0]["buckets"]
    assert len(buckets) == 1
    return int(buckets[0]["concurrency"])


def test_every_sweep_row_outside_the_measured_buckets_is_marked(one_bucket: Path, tmp_path: Path) -> None:
    bucket = measured_bucket(one_bucket)
    values = f"32,{bucket},2048"
    result = model(
        "--latency", str(one_bucket), "--config", str(CONFIG), "--sweep", "concurrency", "--values", values,
        "--engine", "closed", "-o", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("sweep over concurrency", 1)[1].split("recommend", 1)[0]
    rows = {int(line.split()[0]): line for line in table.splitlines() if line.strip()[:1].isdigit()}
    assert set(rows) == {32, bucket, 2048}
    assert "EXTRAPOLATED" in rows[32] and "EXTRAPOLATED" in rows[2048]
    assert "EXTRAPOLATED" not in rows[bucket] and "measured" in rows[bucket]


def test_the_sweep_figure_names_vendor_and_range_and_shows_the_measured_range(one_bucket: Path) -> None:
    bucket = measured_bucket(one_bucket)
    vendor = load_latency_model(one_bucket).choose(None)
    sweep = sweeps.run_sweep(
        "concurrency", load_config(str(CONFIG)), vendor, [32.0, float(bucket), 2048.0], engine="closed"
    )
    figure = sweeps.sweep_figure(sweep)
    title = figure.get_suptitle()
    assert vendor.name in title and "32-2048" in title and f"measured at concurrency {bucket}" in title
    top = figure.axes[0]
    labels = top.get_legend_handles_labels()[1]
    assert any(label.startswith(f"measured: {bucket}") for label in labels), labels
    # the measured line sits at the bucket on the x axis
    lines = [line for line in top.get_lines() if line.get_label().startswith("measured")]
    assert lines and list(lines[0].get_xdata()) == [bucket, bucket]


def test_model_numbers_are_in_plain_units(one_bucket: Path, tmp_path: Path) -> None:
    result = model(
        "--latency", str(one_bucket), "--config", str(CONFIG), "--engine", "closed",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not EXPONENT.search(result.stdout), EXPONENT.search(result.stdout)
    price = next(line for line in result.stdout.splitlines() if line.startswith("price "))
    assert re.search(r"\d¢ per physical core", price), price  # Modal's $0.00003942 per core-second, in cents
    per_step = next(line for line in result.stdout.splitlines() if line.startswith("sandbox-seconds per step"))
    assert re.search(r"\d(\.\d+)?k\b", per_step), per_step  # tens of thousands: k
