"""A whole `stampede run --provider P --local` through a vendor's real SDK against its local plane, and what every
such run must show whatever the vendor: it ended 0, every sandbox the plane made is one the harness recorded, and
no failure went unclassified. Each vendor's test adds what is its own (its limits' failure kinds, its SDK version)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.results.read.dataset import load_truth
from tests.support.serve_process import ROOT

STAMPEDE_RUN = (sys.executable, "-m", "harness.cli", "run")


@dataclass(frozen=True)
class LocalRun:
    stdout: str
    run_dir: Path
    rollouts: pd.DataFrame
    truth: pd.DataFrame  # the plane's own record of every sandbox it made
    manifest: dict[str, Any]


def run_local(provider: str, out: Path, *args: str, env: Mapping[str, str] | None = None) -> LocalRun:
    result = subprocess.run(
        [*STAMPEDE_RUN, "--provider", provider, "--local", *args, "--out", str(out), "--progress-interval", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.is_symlink()]
    run = LocalRun(
        result.stdout,
        run_dir,
        pd.read_parquet(run_dir / "rollouts"),
        load_truth(run_dir),
        json.loads((run_dir / "run.json").read_text()),
    )
    assert set(run.truth["id"]) == set(run.rollouts["sandbox_id"].dropna())  # no sandbox the harness does not know
    assert set(run.truth["status"]) <= {"TERMINATED", "ERROR", "TIMEOUT"}  # and none left running
    assert not set(run.rollouts["failure_kind"].dropna()) & {"unknown", "harness"}
    assert "unknown failures 0; harness failures 0" in run.stdout
    return run
