"""The fault suite for whole runs: a real `stampede run` meets a fault, and ends with every sandbox terminated (the
vendor's own list says so) and every attempt in the tables (each rollout the vendor made a sandbox for has a row).

The vendor is a standalone Prime-like stub shared by the cases, so its word is read after each run. Cases covered
elsewhere, with both checks, are not repeated here:
- the vendor killed and restarted mid-run: tests/engine/test_vendor_outage.py
  (test_the_run_recovers_terminates_everything_and_loses_no_attempt: none left alive, a row per submit);
- kill -9 of every process: tests/locust/test_run_endings.py and tests/results/test_crash_repair.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tests.engine.test_security_disk_full import needs_root, small_filesystem
from tests.support import stub_vendor
from tests.support.stub_vendor import rollout_label

REPO = Path(__file__).resolve().parents[2]
TOKEN = "fault-suite-token"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "stub", "serve", "--profile", "ideal", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env={**os.environ, "STAMPEDE_SERVE_TOKEN": TOKEN},
    )
    try:
        assert process.stdout is not None
        yield json.loads(process.stdout.readline())["url"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def vendor_sandboxes(url: str, run_id: str | None, *, active: bool) -> list[dict]:
    return stub_vendor.vendor_sandboxes(url, TOKEN, run_id, active=active)


def run_command(url: str, out: Path, run_id: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--base-url",
        url,
        "--token",
        TOKEN,
        "--run-id",
        run_id,
        "--commands",
        "true; sleep 0.5",
        "--out",
        str(out),
        "--progress-interval",
        "0",
        "--lifetime",
        "600",
        *extra,
    ]


def rollout_rows(*run_dirs: Path) -> pd.DataFrame:
    """Every row of these runs' rollouts tables (shards or compacted), as a reader with pandas sees them."""
    frames = [pd.read_parquet(run_dir / "rollouts") for run_dir in run_dirs if (run_dir / "rollouts").exists()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["rollout_id", "sandbox_id"])


def assert_nothing_left_and_every_attempt_in_the_tables(url: str, run_id: str, *tables: pd.DataFrame) -> None:
    """`tables`: each invocation's rows (two invocations of one run id number their rollouts alike)."""
    assert vendor_sandboxes(url, run_id, active=True) == []  # every sandbox terminated
    made = vendor_sandboxes(url, run_id, active=False)
    assert made, "the vendor made no sandbox for the run: the case tested nothing"
    recorded = set().union(*(set(rows["sandbox_id"].dropna()) for rows in tables))
    # A create the stop cut short is its attempt's row (cancelled in phase create) without the id the vendor gave
    # it after the cut; the engine terminated that sandbox on arrival. Every other sandbox is in a row by its id.
    cut_at_create = set().union(
        *(
            set(rows.loc[(rows["failure_phase"] == "create") & rows["sandbox_id"].isna(), "rollout_id"])
            for rows in tables
        )
    )
    missing = [sandbox for sandbox in made if sandbox["id"] not in recorded]
    assert all(rollout_label(sandbox) in cut_at_create for sandbox in missing), missing
    assert not any(rows.duplicated(["rollout_id", "attempt"]).any() for rows in tables)  # each attempt once


def test_a_frozen_engine_ends_with_nothing_left_and_every_attempt_in_the_tables(stub_url: str, tmp_path: Path) -> None:
    """SIGSTOP of the engine for 4 s mid-run, then SIGCONT (a stalled VM, a debugger): the run completes."""
    out = tmp_path / "out"
    run = subprocess.Popen(
        run_command(stub_url, out, "frozen-suite", "--stages", "20", "--hold", "10"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    engine = None
    try:
        deadline = time.monotonic() + 90
        while engine is None and time.monotonic() < deadline:
            engine = next(
                (
                    c
                    for c in psutil.Process(run.pid).children(recursive=True)
                    if "harness.engine" in " ".join(c.cmdline())
                ),
                None,
            )
            time.sleep(0.1)
        assert engine is not None, "no engine process"
        while len(vendor_sandboxes(stub_url, "frozen-suite", active=True)) < 10 and time.monotonic() < deadline:
            time.sleep(0.2)
        engine.send_signal(signal.SIGSTOP)
        time.sleep(4.0)
        engine.send_signal(signal.SIGCONT)
        _, stderr = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            if engine is not None:
                engine.send_signal(signal.SIGCONT)
            run.kill()
            run.wait()
    assert run.returncode == 0, stderr[-3000:]
    run_dir = out / "frozen-suite"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert_nothing_left_and_every_attempt_in_the_tables(stub_url, "frozen-suite", rollout_rows(run_dir))


def test_two_runs_with_one_id_each_end_with_nothing_left_and_every_attempt_in_the_tables(
    stub_url: str, tmp_path: Path
) -> None:
    """Two invocations, one --run-id, one vendor, two results folders: neither's sweep reaps the other's sandboxes
    (once recorded as 20 `died_during_exec`), and together their tables hold every sandbox the vendor made."""
    runs = [
        subprocess.Popen(
            run_command(stub_url, tmp_path / f"out{i}", "shared-id", "--stages", "10", "--hold", str(4 + 4 * i)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for i in range(2)
    ]
    results = [(run.communicate(timeout=240)[1], run.returncode) for run in runs]
    assert [code for _, code in results] == [0, 0], [err[-2000:] for err, _ in results]
    tables = [rollout_rows(tmp_path / f"out{i}" / "shared-id") for i in range(2)]
    assert all("died_during_exec" not in set(rows["failure_kind"].dropna()) for rows in tables)
    assert_nothing_left_and_every_attempt_in_the_tables(stub_url, "shared-id", *tables)


@needs_root
def test_a_full_disk_ends_with_nothing_left_and_every_attempt_in_the_tables(stub_url: str, tmp_path: Path) -> None:
    """The results folder's filesystem fills mid-run: the run stops (exit 74), and every row, written late or to
    the fallback folder, is there (tests/engine/test_security_disk_full.py checks the engine's own figures)."""
    with small_filesystem(tmp_path / "disk", "1m") as disk:
        out = disk / "results"
        run = subprocess.run(
            run_command(stub_url, out, "full-suite", "--stages", "40", "--hold", "60", "--commands", "true"),
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=240,
        )
        assert run.returncode == 74, run.stderr[-3000:]
        run_dir = out / "full-suite"
        (engine,) = json.loads((run_dir / "run.json").read_text())["engines"]
        rescued = Path(engine["rows_rescued_to"]) if engine.get("rows_rescued_to") else None
        rows = rollout_rows(run_dir, *([rescued] if rescued else []))
        assert_nothing_left_and_every_attempt_in_the_tables(stub_url, "full-suite", rows)


@needs_root
def test_a_read_only_results_folder_creates_no_sandbox(stub_url: str, tmp_path: Path) -> None:
    """Refused in one line before any sandbox exists: nothing to terminate, no attempt to record."""
    before = len(vendor_sandboxes(stub_url, None, active=False))
    with small_filesystem(tmp_path / "ro", "1m", read_only=True) as read_only:
        run = subprocess.run(
            run_command(stub_url, read_only / "results", "ro-suite", "--stages", "2", "--hold", "1"),
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
    assert run.returncode == 2 and "not writable" in run.stderr, run.stderr[-3000:]
    assert len(vendor_sandboxes(stub_url, None, active=False)) == before
