"""A peak past one process's open files is spread, not lost: engines and the embedded vendor each hold their share.

Every rollout in flight holds one connection in its engine and one in the simulated vendor, and a process may
open only so many files (this machine's root is held at 20,000, so 20,000 in flight cannot live in one process).
Here the same thing at a small scale: the run is held to 1,500 open files per process, and 1,200 rollouts in
flight need two engines and two vendor processes. Real Locust master and workers, real engines, real vendors.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
OPEN_FILES = 1_500
USERS = 1_200


def _held_to_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


def _command(*args: str) -> list[str]:
    argv = [sys.executable, "-m", "harness.cli", *args]
    if os.geteuid() == 0 and shutil.which("setpriv"):
        # root with CAP_SYS_RESOURCE would lift the limit again (as stampede does where it may): take that away
        argv = ["setpriv", "--bounding-set", "-sys_resource", "--inh-caps", "-sys_resource", *argv]
    return argv


def test_rollouts_past_one_processs_open_files_run_over_engines_and_vendor_shards(tmp_path: Path) -> None:
    result = subprocess.run(
        _command(
            "run",
            "--scenario",
            "steady",
            "--users",
            str(USERS),
            "--spawn-rate",
            "600",
            "--hold",
            "12",
            "--profile",
            "ideal",
            "--commands",
            "sleep 4",
            "--progress-interval",
            "0",
            "--out",
            str(tmp_path),
        ),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        preexec_fn=_held_to_open_files,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{USERS} in flight needs a connection each" in result.stderr
    assert "2 vendor processes" in result.stderr
    assert "account-wide" not in result.stderr  # the ideal profile has no limit a shard would apply alone
    run_dir = next(path for path in tmp_path.iterdir() if path.is_dir())
    manifest = json.loads((run_dir / "run.json").read_text())
    shards = manifest["processes"]["vendor_shards"]
    assert len(shards) == 2 and len({shard["pid"] for shard in shards}) == 2
    assert len(manifest["base_url"].split(",")) == 2
    assert f"over 2 engines; peak in flight {USERS};" in result.stdout, result.stdout[-2000:]
    rollouts = pd.read_parquet(run_dir / "rollouts")
    assert rollouts["worker"].nunique() == 2
    finished = rollouts[rollouts["outcome"] != "cancelled"]
    assert len(finished) >= USERS and (finished["outcome"] == "ok").all(), finished["outcome"].value_counts()
    # Every later call went to the shard that created the sandbox: a status look, an exec or a terminate sent to
    # the other shard is a 404 there, a failed rollout here and a sandbox left running in its own shard.
    truth = pd.read_parquet(run_dir / "truth")
    assert truth["id"].is_unique and len(truth) == len(rollouts)
    assert truth["ended_wall"].notna().all() and (truth["status"] == "TERMINATED").all()
