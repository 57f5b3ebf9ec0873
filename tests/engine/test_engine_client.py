"""`stampede run --client`: the engine plays the RL framework's sandbox client around the provider (issue #34).

A real run against the embedded stub (loopback) at a small time scale: a vendor whose boots take 400 vendor
seconds meets SWE-ReX's 300 s startup deadline, so every attempt fails as the client's (`client_startup_deadline`,
in SWE-ReX's words), is retried as uni-agent retries, and the vendor itself never ended a start (no
PROVISIONING_TIMEOUT): the client deleted each sandbox it gave up on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.read.dataset import load_rollouts, load_truth

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--out", str(tmp_path), "--progress-interval", "0", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr[-3000:]  # 1: the run had failures, which is the point
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    return run_dir


def _slow_boot_burst(tmp_path: Path, boot_s: int, client: str, *more: str) -> Path:
    """Six rollouts at once through `client`, on modal-like boots of exactly `boot_s` vendor seconds that never
    crash nor fail transiently, at time scale 0.01 (`more`: further options)."""
    return _run(
        tmp_path,
        "--scenario",
        "burst",
        "--users",
        "6",
        "--burst-steps",
        "1",
        "--profile",
        "modal-like",
        "--profile-set",
        f"boot.median_s={boot_s}",
        "--profile-set",
        "boot.sigma=0",
        "--profile-set",
        "errors.boot_crash_prob=0",
        "--profile-set",
        "errors.create_transient_prob=0",
        *more,
        "--time-scale",
        "0.01",
        "--client",
        client,
    )


@pytest.mark.slow
def test_the_clients_deadline_fails_starts_as_the_clients_and_retries_them(tmp_path: Path) -> None:
    run_dir = _slow_boot_burst(tmp_path, 400, "swe-rex-uni-agent")
    rows = load_rollouts(run_dir)
    assert set(rows["failure_kind"]) == {"client_startup_deadline"}
    assert set(rows["failure_phase"]) == {"ready"}
    assert rows["error"].str.contains(r"client swe-rex-uni-agent: Runtime did not start within \d+s").all()
    # uni-agent after PR #47 retries twice: three attempts per rollout, each its own row
    assert sorted(rows.groupby("rollout_id").size().unique()) == [3]
    manifest = json.loads((run_dir / "run.json").read_text())
    assert json.dumps(manifest).count("swe-rex-uni-agent") >= 1
    truth = load_truth(run_dir)
    assert "PROVISIONING_TIMEOUT" not in set(truth["error_type"].dropna())  # the vendor never gave up on a start
    assert set(truth["status"]) == {"TERMINATED"}  # the client deleted what it gave up on


@pytest.mark.slow
def test_a_leaky_client_leaves_failed_starts_holding_the_cap_until_the_sweep(tmp_path: Path) -> None:
    """SkyRL#1194: the client never deletes a start it gave up on, so its retries meet a full account."""
    run_dir = _slow_boot_burst(tmp_path, 1000, "skyrl", "--profile-set", "quota.max_active=8")
    rows = load_rollouts(run_dir).sort_values(["rollout_id", "attempt"])
    first = rows[rows["attempt"] == 1]
    assert set(first["failure_kind"]) == {"client_startup_deadline"}  # 600 s, then left running (leaked)
    # six leaked starts hold 6 of the 8 places: of the six retries only two get in, the rest meet the cap
    assert (rows["failure_kind"] == "quota_exhausted").sum() >= 4
    truth = load_truth(run_dir)
    assert len(truth) == 8  # never more than the cap: the leaked ones were still there
    assert set(truth["status"]) == {"TERMINATED"}  # and the engine's end-of-run sweep reaped them
