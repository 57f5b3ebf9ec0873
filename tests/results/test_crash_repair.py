"""A run killed with -9 mid-flight leaves attempts with no row (their rows were still in the engine's buffer, or the
rollout never finished); the first stampede command that reads the folder writes them into the tables, so a plain
reader (`pd.read_parquet(run / "rollouts")`) sees every attempt `stampede summary` sees. A real run (real Locust,
engine and embedded vendor), killed for real."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from harness.results.read.dataset import load_rollouts
from harness.results.read.submit_ledger import OUTCOME_UNFINISHED, read_submits
from tests.support.commands import stampede, stampede_started

pytestmark = pytest.mark.slow


def killed_mid_flight(out: Path) -> Path:
    """A run with 30 rollouts in flight (each holds its sandbox 5 s), some rows on disk, then kill -9 of every one
    of its processes."""
    run = stampede_started(
        "run",
        "--profile",
        "ideal",
        "--run-id",
        "killed",
        "--stages",
        "30",
        "--hold",
        "120",
        "--commands",
        "true; sleep 5",
        "--out",
        str(out),
        "--progress-interval",
        "0",
        quiet=True,
        new_session=True,
    )
    run_dir = out / "killed"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if list((run_dir / "rollouts").glob("*.parquet")) and len(read_submits(run_dir)) >= 45:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run never had rows on disk and rollouts in flight")
    finally:
        children = psutil.Process(run.pid).children(recursive=True)
        os.killpg(run.pid, signal.SIGKILL)
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        run.wait(timeout=30)
    return run_dir


def test_the_first_command_after_a_crash_writes_every_attempt_into_the_tables(tmp_path: Path) -> None:
    run_dir = killed_mid_flight(tmp_path)
    submitted = len(read_submits(run_dir))
    before = len(pd.read_parquet(run_dir / "rollouts"))
    assert before < submitted  # the crash left attempts without a row: what this test is about

    summary = stampede("summary", str(run_dir))
    assert summary.returncode == 0, summary.stderr
    counted = json.loads((run_dir / "summary.json").read_text())["run"]["counts"]["rollouts"]

    plain = pd.read_parquet(run_dir / "rollouts")  # a reader that knows nothing of the write-ahead
    assert len(plain) == submitted == counted == len(load_rollouts(run_dir))
    assert (plain["outcome"] == OUTCOME_UNFINISHED).sum() == submitted - before
    assert not plain.duplicated(["rollout_id", "attempt"]).any()
    assert pd.api.types.is_datetime64_any_dtype(plain["t_submit"])  # the engine's file schema, not the read one

    again = stampede("report", str(run_dir), "-o", str(tmp_path / "report"))  # a second reader repairs nothing
    assert again.returncode in (0, 1), again.stderr
    assert len(pd.read_parquet(run_dir / "rollouts")) == submitted
    assert not [p for p in run_dir.rglob("*") if p.name.startswith(".") and p.suffix == ".tmp"]
