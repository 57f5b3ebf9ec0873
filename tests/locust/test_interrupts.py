"""Ctrl-C and SIGTERM as `locust -f` and a distributed `stampede run` meet them: real processes, a scripted vendor
whose ledger says which sandboxes were created and terminated.

- `locust -f` (Locust's own main handles the signal): the run is recorded `interrupted` with exit status 130, not
  `completed` with 0, and every sandbox is terminated.
- A second signal to a master aborts every worker's engine (each engine's summary says `aborted`), not only the
  master's own process: the drain does not wait out a vendor that takes a minute to terminate.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.ports import reserved_port

REPO = Path(__file__).resolve().parents[2]
SCRIPTED = "tests.support.scripted_provider:ScriptedProvider"
pytestmark = pytest.mark.slow


def ledger_counts(ledger: Path) -> Counter[str]:
    if not ledger.exists():
        return Counter()
    return Counter(json.loads(line)["event"] for line in ledger.read_text().splitlines() if line.strip())


def wait_for_creates(process: subprocess.Popen, ledger: Path, count: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if ledger_counts(ledger)["create"] >= count:
            return
        if process.poll() is not None:
            pytest.fail(f"the run exited early ({process.returncode}): {process.communicate()[1][-2000:]}")
        time.sleep(0.2)
    process.kill()
    pytest.fail("the run never created its sandboxes")


def finish(process: subprocess.Popen, timeout: float = 120) -> str:
    try:
        return process.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stderr = process.communicate()[1]
        pytest.fail(f"the run did not exit within {timeout} s of the signal: {stderr[-2000:]}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_locust_f_records_an_interrupted_run_and_exits_130(tmp_path: Path, signum: int) -> None:
    ledger, out = tmp_path / "ledger.jsonl", tmp_path / "out"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            "scenarios/steady.py",
            "--headless",
            "-u",
            "4",
            "--provider",
            SCRIPTED,
            "--provider-option",
            "exec_delay_s=0.3",
            "--provider-option",
            f"ledger={ledger}",
            "--commands",
            "true; sleep 1",
            "--hold",
            "120",
            "--out",
            str(out),
            "--run-id",
            "lf-int",
            "--progress-interval",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    wait_for_creates(process, ledger, 8)
    process.send_signal(signum)
    stderr = finish(process)
    manifest = json.loads((out / "lf-int" / "run.json").read_text())
    assert (manifest["status"], manifest["exit_code"], process.returncode) == ("interrupted", 130, 130), stderr[-2000:]
    counts = ledger_counts(ledger)
    assert counts["create"] == counts["terminate"] > 0  # every sandbox terminated


def test_a_second_signal_aborts_every_workers_engine(tmp_path: Path) -> None:
    ledger, out = tmp_path / "ledger.jsonl", tmp_path / "out"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--scenario",
            "steady",
            "-u",
            "4",
            "--workers",
            "2",
            "--provider",
            SCRIPTED,
            "--provider-option",
            "exec_delay_s=60",
            "--provider-option",
            "terminate_delay_s=15",
            "--provider-option",
            f"ledger={ledger}",
            "--hold",
            "120",
            "--out",
            str(out),
            "--run-id",
            "two-sigs",
            "--progress-interval",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    wait_for_creates(process, ledger, 4)
    process.send_signal(signal.SIGINT)
    time.sleep(2.0)  # the workers are draining: their vendor takes 15 s to terminate each sandbox
    process.send_signal(signal.SIGINT)
    aborted_at = time.monotonic()
    stderr = finish(process, timeout=150)
    print(f"\nexited {time.monotonic() - aborted_at:.1f} s after the second signal")
    manifest = json.loads((out / "two-sigs" / "run.json").read_text())
    assert (manifest["status"], process.returncode) == ("aborted", 131), stderr[-2000:]
    engines = manifest["engines"]
    assert len(engines) == 2 and all(engine.get("aborted") is True for engine in engines), engines


def test_a_second_signal_to_a_locust_f_master_aborts_every_workers_engine(tmp_path: Path) -> None:
    """`locust -f --master` with two `locust -f --worker`s: the master tells its workers of each signal."""
    ledger, out = tmp_path / "ledger.jsonl", tmp_path / "out"
    port = reserved_port()
    common = ["-f", "scenarios/steady.py", "--provider", SCRIPTED, "--provider-option", "exec_delay_s=60"]
    common += ["--provider-option", "terminate_delay_s=15", "--provider-option", f"ledger={ledger}"]
    as_master = ["--master", "--headless", "--expect-workers", "2", "-u", "4", "--master-bind-host", "127.0.0.1"]
    as_master += ["--master-bind-port", str(port), "--hold", "120", "--out", str(out), "--run-id", "lf-two-sigs"]
    master = subprocess.Popen(
        [sys.executable, "-m", "locust", *common, *as_master, "--progress-interval", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "locust",
                *common,
                "--worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    try:
        wait_for_creates(master, ledger, 4)
        master.send_signal(signal.SIGINT)
        time.sleep(2.0)
        master.send_signal(signal.SIGINT)
        stderr = finish(master, timeout=150)
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    manifest = json.loads((out / "lf-two-sigs" / "run.json").read_text())
    assert (manifest["status"], master.returncode) == ("aborted", 131), stderr[-2000:]
    engines = manifest["engines"]
    assert len(engines) == 2 and all(engine.get("aborted") is True for engine in engines), engines
