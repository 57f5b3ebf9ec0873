"""An engine's socket folder goes with it, even when the Locust process that made it is killed.

Before, a Locust process killed mid-run (a test's SIGKILL, an OOM kill) left its engine's empty `stampede-engine-*`
folder in the temp dir: the engine unlinked its socket on the way out, and the process that made the folder was
gone. One machine gathered 241 of them in a day of tests. Real processes: a Python process that spawns a real engine
as `stampede run` does, killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPAWN_AND_WAIT = """
import sys, time
from harness.locust.engine_client import EngineClient
client = EngineClient.spawn("local")
print(client.process.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_killed_locust_process_leaves_no_engine_socket_folder(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", SPAWN_AND_WAIT],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        engine_pid = int(parent.stdout.readline())  # type: ignore[union-attr]
        (folder,) = temp.iterdir()
        assert folder.name.startswith("stampede-engine-") and (folder / "engine.sock").exists()
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 120  # the engine drains (nothing in flight) and exits on its own
        while not _gone(engine_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(engine_pid), "the engine outlived its Locust process"
        assert list(temp.iterdir()) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
