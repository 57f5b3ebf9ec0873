"""`stampede run --provider docker` end to end: real Locust, engine and dockerd; nothing leaks, ever."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker, pytest.mark.slow]
CLASSIFIED_DAEMON_LOSS = {"transport", "create_error", "died_before_ready", "died_during_exec", "exec_error"}


def containers(host: str, run_id: str) -> list[str]:
    result = subprocess.run(
        ["docker", "-H", host, "ps", "-aq", "--filter", f"label=stampede-run={run_id}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.split()


def stampede_run(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", "--provider", "docker", "--progress-interval", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def rollouts(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "rollouts")


@pytest.mark.parametrize(
    ("scenario", "args"),
    [("ramp", ["--stages", "2,4", "--hold", "3"]), ("burst", ["--users", "6", "--burst-steps", "2"])],
)
def test_every_scenario_runs_on_docker_and_leaves_nothing(docker_host, tmp_path, scenario, args):
    run_id = f"docker-{scenario}-{time.monotonic_ns()}"
    process = stampede_run("--scenario", scenario, "--run-id", run_id, "--out", str(tmp_path), *args)
    _out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    frame = rollouts(tmp_path / run_id)
    assert len(frame) > 0 and (frame["outcome"] == "ok").all(), frame[["outcome", "failure_kind", "error"]]
    assert frame["sdk_version"].str.contains("aiodocker").all()
    assert containers(docker_host, run_id) == []


def test_sigterm_mid_run_leaves_zero_containers(docker_host, tmp_path):
    run_id = f"docker-cut-{time.monotonic_ns()}"
    process = stampede_run(
        "--stages", "6", "--hold", "120", "--commands", "true; sleep 60", "--run-id", run_id, "--out", str(tmp_path)
    )
    deadline = time.monotonic() + 120
    while len(containers(docker_host, run_id)) < 6 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(containers(docker_host, run_id)) >= 6
    time.sleep(2)  # some rollouts are in their `sleep 60` tool call now
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=180)
    assert process.returncode == 130, err
    assert containers(docker_host, run_id) == []
    frame = rollouts(tmp_path / run_id)
    assert len(frame) >= 6 and set(frame["outcome"]) == {"cancelled"}
    assert json.loads((tmp_path / run_id / "run.json").read_text())["status"] == "interrupted"


def test_daemon_stopped_mid_run_gives_classified_failures_and_an_orderly_end(private_daemon, tmp_path):
    run_id = f"docker-daemon-stop-{time.monotonic_ns()}"
    process = stampede_run(
        "--provider-option",
        f"host={private_daemon.host}",
        "--stages",
        "4",
        "--hold",
        "25",
        "--commands",
        "true; sleep 0.5; sleep 0.5",
        "--ready-timeout",
        "20",
        "--run-id",
        run_id,
        "--out",
        str(tmp_path),
    )
    deadline = time.monotonic() + 120
    run_dir = tmp_path / run_id
    while time.monotonic() < deadline:  # wait until some rollouts completed against the live daemon
        shards = list((run_dir / "rollouts").glob("*.parquet"))
        if shards and (rollouts(run_dir)["outcome"] == "ok").sum() >= 4:
            break
        time.sleep(0.5)
    private_daemon.stop()
    try:
        out, err = process.communicate(timeout=240)
    finally:
        private_daemon.start()  # for whatever runs next
    assert process.returncode == 0, err
    assert "Traceback" not in err
    frame = rollouts(run_dir)
    assert (frame["outcome"] == "ok").sum() >= 4
    failed = frame[frame["outcome"] == "failed"]
    assert len(failed) > 0
    assert set(failed["failure_kind"]) <= CLASSIFIED_DAEMON_LOSS, failed["failure_kind"].value_counts()
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "completed" and manifest["rows"]["rollouts"] == len(frame)
    assert "results:" in out
