"""The command line as users meet it: real `stampede` processes, one-line errors, exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.wire.records import SCHEMA_V1_OP_COLUMNS, SCHEMA_V1_ROLLOUT_COLUMNS
from tests.support.commands import stampede

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--provider", "nope"], "unknown provider 'nope'"),
        (["run", "--scenario", "does/not/exist.py"], "scenario file does/not/exist.py not found"),
        (["run", "--scenario", "nope"], "unknown scenario 'nope'"),
        (["run", "--users", "many"], "not a whole number: 'many'"),
        (["run", "--users", "0"], "--users: must be a whole number from 1"),
        (["run", "--hold", "-3"], "--hold: must be more than 0"),
        (["run", "--stages", "60,lots"], "--stages must be whole numbers"),
        (["run", "--commands", " ; "], "at least one command"),
        (["run", "--seed", "x"], "not a whole number: 'x'"),
        (["run", "--workers", "lots"], "--workers: not a whole number: 'lots' (or auto)"),
        (["run", "--base-url", "http://127.0.0.1:9", "--token", "t"], "is unreachable"),
        (["run", "--run-time", "soon"], "is not a time span"),
        (["run", "--provider-option", "novalue"], "takes KEY=VALUE"),
        (["summary", "/nonexistent"], "is not a stampede run folder"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["run", "--provider", "docker", "--local"], "has no simulated vendor"),
        (["run", "--scenario", "rehearse"], "needs an emulated trainer"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    result = stampede(*args, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0] and "Traceback" not in result.stderr


def test_a_run_id_that_exists_is_refused_rather_than_mixed_into(tmp_path):
    """Two runs under one --run-id would mix their rows into one folder's records."""
    (tmp_path / "taken").mkdir()
    result = stampede("run", "--out", str(tmp_path), "--run-id", "taken", "--stages", "2", "--hold", "1", timeout=60)
    assert result.returncode == 2 and "already exists: give another --run-id" in result.stderr
    assert list((tmp_path / "taken").iterdir()) == []


def test_a_run_with_a_user_provider_writes_schema_v1_parquet(tmp_path):
    """A provider from the user's own module (`module:Class`), the ramp shape, results read back by pandas."""
    result = stampede(
        "run",
        "--provider",
        "tests.support.scripted_provider:ScriptedProvider",
        "--provider-option",
        "ready_delay_s=0.05",
        "--stages",
        "4,8",
        "--hold",
        "2",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "completed" and manifest["schema_version"] == 2
    assert manifest["shape"]["stages"] == [4, 8]
    rollouts = pd.read_parquet(run_dir / "rollouts")
    ops = pd.read_parquet(run_dir / "ops")
    assert set(SCHEMA_V1_ROLLOUT_COLUMNS) <= set(rollouts.columns)
    assert set(SCHEMA_V1_OP_COLUMNS) <= set(ops.columns)
    assert manifest["rows"]["rollouts"] == len(rollouts) > 0
    assert set(rollouts["stage"]) == {"01-ramp4", "02-ramp8"}
    assert rollouts["inflight_at_submit"].max() == 8
    assert (rollouts.loc[rollouts["outcome"] == "ok", "tti_s"] > 0.05).all()
    assert rollouts["rollout_id"].is_unique
    # Every op belongs to a rollout of this run.
    assert set(ops["rollout_id"]) <= set(rollouts["rollout_id"])
    assert "01-ramp4" in result.stdout and "results:" in result.stdout
    summary = stampede("summary", str(run_dir))
    assert summary.returncode == 0 and "02-ramp8" in summary.stdout


def test_workers_auto_spreads_a_peak_over_engines_only_past_what_one_engine_holds():
    from harness.cli.capacity import PER_ENGINE_IN_FLIGHT, engines_needed

    assert engines_needed(None) == 0 and engines_needed(960) == 0
    assert engines_needed(PER_ENGINE_IN_FLIGHT, open_files=1_048_576) == 0
    assert engines_needed(PER_ENGINE_IN_FLIGHT + 1, cores=16) == 2
    assert engines_needed(20_000, cores=16) == -(-20_000 // PER_ENGINE_IN_FLIGHT)
    unlimited = 1_048_576  # open files: the cores decide
    assert engines_needed(20_000, cores=4, open_files=unlimited) == 2  # one worker per two cores: Locust + engine
    assert engines_needed(20_000, cores=2, open_files=unlimited) == 0  # one engine; the run says it may be the limit
    # one connection per rollout in flight: a process held to 20,000 open files cannot hold 20,000, whatever the cores
    assert engines_needed(20_000, cores=2, open_files=20_000) == 2
    assert engines_needed(1_200, cores=2, open_files=1_500) == 2 and engines_needed(900, cores=2, open_files=1_500) == 0


def test_output_piped_into_a_reader_that_leaves_is_not_a_traceback():
    """`stampede summary RUN | head`: when the reader has gone, the command stops quietly with 141 (SIGPIPE's code)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "harness.cli", "profiles"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr
