"""A master that loses every worker mid-run says so and exits: `stopped: every worker went missing`, exit 69.

Two local workers are frozen (SIGSTOP) mid-run, past the heartbeats a master lets them miss; Locust's heartbeat
check then stops the test. Before, that master printed "completed (exit 0)" and never exited (CI 2026-12-07).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from harness.wire.run_endings import EXIT_WORKERS_LOST, WORKER_SILENCE_S, WORKERS_LOST
from tests.support.commands import stampede_started


def _workers(master: psutil.Process) -> list[psutil.Process]:
    return [p for p in master.children() if "--worker" in p.cmdline()]  # not their engines (grandchildren)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_master_that_loses_every_worker_says_so_and_exits(tmp_path: Path) -> None:
    run = stampede_started(
        "run", "--workers", "2", "--profile", "ideal", "--stages", "10", "--hold", "120", "--out", str(tmp_path),
        new_session=True,
    )  # fmt: skip
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(run.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    frozen: list[psutil.Process] = []
    try:
        master = psutil.Process(run.pid)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("users 10/10" in line for line in said):
            time.sleep(0.2)  # the stage is up: every user started on the workers
        assert any("users 10/10" in line for line in said), "".join(said)
        frozen = _workers(master)
        assert len(frozen) == 2
        for worker in frozen:
            worker.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + WORKER_SILENCE_S + 60
        while time.monotonic() < deadline and not any("every worker went missing" in line for line in said):
            time.sleep(0.2)
        assert any("every worker went missing" in line for line in said), "".join(said)
        for worker in frozen:  # heard again: they take the master's stop, drain and report
            worker.send_signal(signal.SIGCONT)
        out, _ = run.communicate(timeout=120)
    finally:
        for worker in frozen:
            if worker.is_running():
                worker.send_signal(signal.SIGCONT)
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == EXIT_WORKERS_LOST, out + "".join(said)
    assert f"ended: {WORKERS_LOST} (exit {EXIT_WORKERS_LOST})" in out, out
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((folder / "run.json").read_text())
    assert manifest["status"] == WORKERS_LOST and manifest["exit_code"] == EXIT_WORKERS_LOST
    assert manifest["rows"]["rollouts"] > 0  # what ran before the workers froze is kept
