"""scripts/ensure-docker starts dockerd holding nothing of its caller's: no inherited descriptor past 0-2.

A caller's lock or pipe held by a daemon that runs for hours is a lock never released and a pipe never closed
(a CI step reading the script's output would wait for dockerd to exit). Runs a private daemon of its own.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.docker_support import private_daemon_possible, run_ensure_docker, unavailable

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
SOCKET = "/tmp/stampede-fds-test.sock"


def _pidfile(socket_path: str) -> Path:
    tag = subprocess.run(["cksum"], input=socket_path.encode(), capture_output=True, check=True).stdout.split()[0]
    return Path("/tmp/stampede-docker") / tag.decode() / "dockerd.pid"


def test_dockerd_inherits_no_descriptor_of_its_caller() -> None:
    reason = private_daemon_possible()
    if reason:
        unavailable(reason)
    with tempfile.NamedTemporaryFile(prefix="stampede-held-lock-") as held:
        fd = os.open(held.name, os.O_RDONLY)
        try:
            result = subprocess.run(
                [str(REPO / "scripts" / "ensure-docker"), "--socket", SOCKET],
                capture_output=True,
                text=True,
                timeout=180,
                pass_fds=(fd,),
                check=False,
            )
        finally:
            os.close(fd)
        try:
            assert result.returncode == 0, result.stderr
            pid = int(_pidfile(SOCKET).read_text().strip())
            targets = {os.readlink(entry) for entry in Path(f"/proc/{pid}/fd").iterdir()}
            assert held.name not in targets, f"dockerd {pid} holds the caller's {held.name}"
        finally:
            run_ensure_docker("--socket", SOCKET, "--stop", timeout=60)
