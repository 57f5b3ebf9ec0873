"""The rollouts table holds each duration in vendor seconds too (`tti_vendor_s`, ...), so a plain reader's quantile
is the one summary.json prints, even at a time scale, where wall seconds map onto vendor seconds by no one factor."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness.engine.shards import ShardWriter
from harness.results.read.compaction import compact_run
from harness.wire.records import VENDOR_SECONDS_COLUMNS
from tests.support.rollout_rows import finished_rollout

REPO = Path(__file__).resolve().parents[2]
LEVELS = (0.5, 0.99)


@pytest.fixture(scope="module")
def modal_like_run(tmp_path_factory) -> Path:
    """A real `stampede run`: the embedded stub as a Modal-like vendor at time scale 0.1, a burst of 100."""
    out = tmp_path_factory.mktemp("vendor-seconds")
    command = [sys.executable, "-m", "harness.cli", "run", "--provider", "stub", "--profile", "modal-like"]
    command += ["--time-scale", "0.1", "--scenario", "burst", "--users", "100", "--seed", "0"]
    command += ["--out", str(out), "--run-id", "vs", "--progress-interval", "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return out / "vs"


def summary_quantiles(scope: dict, phase: str) -> list[float]:
    block = scope["quantiles"][phase]
    return [block["p50"]["value"], block["p99"]["value"]]


def nearest_rank(values: pd.Series) -> list[float]:
    """The summary's rule (harness.results.figures.quantiles: numpy's inverted_cdf), on the non-null values."""
    return np.quantile(values.dropna(), LEVELS, method="inverted_cdf").tolist()


@pytest.mark.slow
def test_a_plain_pandas_quantile_of_the_vendor_columns_is_summary_jsons(modal_like_run):
    summary = json.loads((modal_like_run / "summary.json").read_text())
    frame = pd.read_parquet(modal_like_run / "rollouts")
    assert frame["tti_vendor_s"].notna().sum() >= 90
    assert nearest_rank(frame["tti_vendor_s"]) == summary_quantiles(summary["run"], "tti")
    for phase, column in (
        ("create", "create_vendor_s"),
        ("ready", "ready_vendor_s"),
        ("teardown", "terminate_vendor_s"),
    ):
        assert nearest_rank(frame[column]) == summary_quantiles(summary["run"], phase), phase
    for stage in summary["stages"]:
        rows = frame[frame["stage"] == stage["stage"]]
        assert nearest_rank(rows["tti_vendor_s"]) == summary_quantiles(stage, "tti"), stage["stage"]
    # what the columns are for: the wall seconds are not the summary's, and not a tenth of them either
    wall = nearest_rank(frame["tti_s"])
    assert wall[0] != summary_quantiles(summary["run"], "tti")[0]
    assert wall[0] * 10 != pytest.approx(summary_quantiles(summary["run"], "tti")[0], rel=0.05)


@pytest.mark.slow
def test_duckdb_reads_the_same_figures_and_the_file_says_the_clock(modal_like_run):
    summary = json.loads((modal_like_run / "summary.json").read_text())
    pattern = modal_like_run / "rollouts" / "*.parquet"
    ((p50, p99),) = duckdb.sql(
        f"select quantile_disc(tti_vendor_s, 0.5), quantile_disc(tti_vendor_s, 0.99) from '{pattern}'"
    ).fetchall()
    assert [p50, p99] == summary_quantiles(summary["run"], "tti")
    schema = pq.read_schema(modal_like_run / "rollouts" / "rollouts.parquet")
    for name in VENDOR_SECONDS_COLUMNS.values():
        assert schema.field(name).metadata == {b"unit": b"s", b"clock": b"vendor"}, name
    assert schema.metadata[b"stampede.schema_version"] == b"2"
    assert schema.metadata[b"stampede.vendor_seconds"] == b"truth"  # joined with the simulated vendor's record


def write_shards(run_dir: Path, time_scale: float | None) -> None:
    """Two shards as the engine leaves them, and a run.json naming the time scale (or none)."""

    async def main() -> None:
        writer = ShardWriter(run_dir, "w0", flush_interval_s=60)
        for i in range(8):
            failed = i == 3
            writer.add_rollout(
                finished_rollout(
                    i,
                    run_id="r",
                    rollout_id=f"w0-{i}",
                    provider="prime",
                    profile="",
                    scenario="burst",
                    stage="01-burst",
                    target_users=8,
                    ready_s=None if failed else 0.2,
                    tti_s=None if failed else 0.3 + i / 100,
                    exec_count=0,
                    exec_s=None,
                    terminate_s=None,
                    total_s=None,
                    outcome="failed" if failed else "ok",
                )
            )
            if i == 4:
                await writer.flush()
        await writer.close()

    asyncio.run(main())
    if time_scale is not None:
        (run_dir / "run.json").write_text(json.dumps({"run_id": "r", "time_scale": time_scale}))


@pytest.mark.parametrize(
    ("time_scale", "factor", "source"), [(None, 1.0, "wall"), (1.0, 1.0, "wall"), (0.5, 2.0, "scaled")]
)
def test_without_the_vendors_record_vendor_seconds_are_wall_seconds_over_the_time_scale(
    tmp_path, time_scale, factor, source
):
    """A real vendor (time scale 1): vendor seconds are the wall seconds; no truth at a time scale: wall / scale."""
    write_shards(tmp_path, time_scale)
    compact_run(tmp_path)
    table = pq.read_table(tmp_path / "rollouts")
    assert table.schema.metadata[b"stampede.vendor_seconds"] == source.encode()
    for wall, vendor in VENDOR_SECONDS_COLUMNS.items():
        walls = table.column(wall).to_pylist()
        expected = [None if value is None else value * factor for value in walls]
        assert table.column(vendor).to_pylist() == pytest.approx(expected), vendor
    assert table.column("tti_vendor_s").null_count == 1  # a phase that never happened stays null
