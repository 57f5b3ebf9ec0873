"""Whole runs as users start them: `stampede run` / `locust -f`, the embedded or a standalone stub, the engine
process, real HTTP on loopback and the parquet they leave behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from harness.results.read.dataset import load_truth
from harness.wire.records import SCHEMA_V1_ROLLOUT_COLUMNS
from tests.support.commands import stampede

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def only_run(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.is_symlink()]
    return run_dir


def rollouts(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "rollouts")


def test_ideal_profile_reaches_960_in_flight_with_zero_failures(tmp_path):
    result = stampede(
        "run",
        "--profile",
        "ideal",
        "--stages",
        "480,960",
        "--hold",
        "3",
        "--spawn-rate",
        "400",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
    )
    assert result.returncode == 0, result.stderr
    run_dir = only_run(tmp_path)
    frame = rollouts(run_dir)
    assert set(SCHEMA_V1_ROLLOUT_COLUMNS) <= set(frame.columns)
    assert frame["inflight_at_submit"].max() >= 960
    assert set(frame["outcome"]) <= {"ok", "cancelled"} and (frame["outcome"] == "ok").sum() > 960
    truth = load_truth(run_dir)
    # Every sandbox the vendor created for this run ended terminated: none leaked.
    assert len(truth) == len(frame) and set(truth["status"]) == {"TERMINATED"}
    assert "timing error" in result.stdout


def test_a_ramps_users_start_evenly_at_the_spawn_rate_not_in_one_second_batches(tmp_path):
    """Locust releases a spawn rate of 60 as 60 users at once; the creates must come one slot (1/60 s) apart, or
    every create of the batch queues in the harness and records that queue as vendor latency."""
    result = stampede(
        "run",
        "--profile",
        "ideal",
        "--stages",
        "60",
        "--hold",
        "1",
        "--spawn-rate",
        "60",
        "--commands",
        "sleep 4",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
        "--stop-timeout",
        "0",
    )
    assert result.returncode in (0, 1), result.stderr
    ops = pd.read_parquet(only_run(tmp_path) / "ops")
    creates = ops[ops["op"] == "create"].sort_values("t_start")
    first = creates.head(60)["t_start"]  # each user's first rollout holds its sandbox 4 s: these are all 60
    span = (first.max() - first.min()).total_seconds()
    assert span >= 0.9, f"60 first creates within {span:.3f} s: released as one batch"  # spaced: at least 59/60 s


def _serve_stub(token: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "stub",
            "serve",
            "--profile",
            "prime-like",
            "--port",
            "0",
            "--token",
            token,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    info = json.loads(process.stdout.readline())
    return process, info["url"]


def _active(url: str, token: str, run_id: str) -> int:
    request = urllib.request.Request(
        f"{url}/api/v1/sandbox?is_active=true&per_page=1000&labels=stampede-run%3D{run_id}",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(json.loads(response.read())["total"])


def test_ctrl_c_terminates_every_sandbox_and_keeps_the_results(tmp_path):
    token = "test-token-123"
    stub, url = _serve_stub(token)
    try:
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "run",
                "--base-url",
                url,
                "--token",
                token,
                "--run-id",
                "cut-short",
                "--stages",
                "200",
                "--hold",
                "120",
                "--commands",
                "true; sleep 30",
                "--out",
                str(tmp_path),
                "--progress-interval",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        deadline = time.monotonic() + 60
        while _active(url, token, "cut-short") < 150 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _active(url, token, "cut-short") >= 150
        run.send_signal(signal.SIGINT)
        _out, err = run.communicate(timeout=120)
        assert run.returncode == 130, err
        assert _active(url, token, "cut-short") == 0
        frame = rollouts(tmp_path / "cut-short")
        assert len(frame) >= 150 and "cancelled" in set(frame["outcome"])
        assert json.loads((tmp_path / "cut-short" / "run.json").read_text())["status"] == "interrupted"
        assert "Traceback" not in err
    finally:
        stub.send_signal(signal.SIGTERM)
        stub.wait(timeout=30)


def test_locust_command_line_runs_the_same_scenario(tmp_path):
    result = subprocess.run(
        [
            "locust",
            "-f",
            str(REPO / "scenarios" / "ramp.py"),
            "--headless",
            "-s",
            "30",
            "--sim-profile",
            "ideal",
            "--stages",
            "10,20",
            "--hold",
            "2",
            "--out",
            str(tmp_path),
            "--progress-interval",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    frame = rollouts(only_run(tmp_path))
    assert set(frame["stage"]) == {"01-ramp10", "02-ramp20"} and (frame["outcome"] == "ok").all()
    assert "ramp" in json.loads((only_run(tmp_path) / "run.json").read_text())["scenario"]
