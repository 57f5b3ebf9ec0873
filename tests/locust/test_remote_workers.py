"""A master and `stampede run --worker` processes started on their own, as on several machines: real processes, a
standalone stub vendor on loopback.

What a user relies on: a worker runs the master's scenario or says in one line that it does not (a worker loads its
scenario's users from its own `--scenario` before any setting arrives: a `ramp` worker of a `burst` master used to
keep starting rollouts after the burst, outside any stage, and the master's summary then failed to write).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.support.ports import reserved_port
from tests.support.serve_process import standalone_stub

REPO = Path(__file__).resolve().parents[2]
TOKEN = "remote-workers-token"
pytestmark = pytest.mark.slow


@pytest.fixture
def stub_url() -> Iterator[str]:
    with standalone_stub(TOKEN) as url:
        yield url


def _master(stub_url: str, out: Path, port: int, workers: int, run_id: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "harness.cli", "run", "--master", "--expect-workers", str(workers)]
    argv += ["--master-port", str(port), "--base-url", stub_url, "--token", TOKEN, "--scenario", "burst"]
    argv += ["--users", "20", "--out", str(out), "--run-id", run_id, "--progress-interval", "0"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _worker(port: int, *scenario: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "harness.cli", "run", "--worker", "--master-host", "127.0.0.1"]
    argv += ["--master-port", str(port), *scenario]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _ended(*processes: subprocess.Popen[str]) -> list[tuple[int, str]]:
    ended = []
    for process in processes:
        try:
            _, err = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        ended.append((process.returncode, err))
    return ended


def test_a_worker_of_another_scenario_is_refused_in_one_line(stub_url: str, tmp_path: Path) -> None:
    port = reserved_port()
    master = _master(stub_url, tmp_path, port, 1, "other-scenario")
    (worker_code, worker_err), _ = _ended(_worker(port), master)  # no --scenario: the default, ramp
    assert worker_code == 2, worker_err[-2000:]
    assert "Traceback" not in worker_err
    assert "this worker loaded scenario 'ramp' but its master runs 'burst'" in worker_err
    assert "--scenario burst" in worker_err


def test_workers_of_the_masters_scenario_run_its_burst_once(stub_url: str, tmp_path: Path) -> None:
    port = reserved_port()
    master = _master(stub_url, tmp_path, port, 2, "same-scenario")
    workers = [_worker(port, "--scenario", "burst") for _ in range(2)]
    (code, err), *_ = _ended(master, *workers)
    assert code == 0, err[-2000:]
    rollouts = pd.read_parquet(tmp_path / "same-scenario" / "rollouts")
    assert len(rollouts) == 20 and set(rollouts["stage"]) == {"01-burst20"}
    assert set(rollouts["outcome"]) == {"ok"} and rollouts["worker"].nunique() == 2
    assert json.loads((tmp_path / "same-scenario" / "summary.json").read_text())["stages"][0]["stage"] == "01-burst20"
