"""Whole runs through the harness with the real `modal` SDK against the local Modal (real subprocesses).

`stampede run --provider modal --local` starts `providers.sim.modal.serve` as the embedded vendor, the engine
builds the `modal` provider on its URL, and every rollout goes through the SDK's gRPC calls.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.results.read.dataset import load_truth
from providers.base import INIT_FAILURE_KINDS
from providers.sim.core.profile import load_profile
from tests.support.commands import stampede
from tests.support.modal_burst import BURST_SPREAD_S, first_wave_arrivals, offline_first_attempt_failure

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def finished_run(out: Path) -> tuple[Path, pd.DataFrame, pd.DataFrame, dict]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.is_symlink()]
    rollouts = pd.read_parquet(run_dir / "rollouts")
    truth = load_truth(run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    return run_dir, rollouts, truth, manifest


def assert_no_leaks(rollouts: pd.DataFrame, truth: pd.DataFrame) -> None:
    # one vendor sandbox per rollout that got an id, every one of them ended
    assert set(truth["id"]) == set(rollouts["sandbox_id"].dropna())
    assert set(truth["status"]) <= {"TERMINATED", "ERROR", "TIMEOUT"}


@pytest.mark.parametrize("backend", ["v2", "v1"])
def test_burst_of_50_runs_clean_through_the_real_sdk(tmp_path: Path, backend: str) -> None:
    # v2: the command as a user types it (the default profile); v1: modal-like, whose time runs 10x faster
    extra = [] if backend == "v2" else ["--provider-option", "sandbox_v2=0", "--profile", "modal-like"]
    result = stampede(
        "run",
        "--provider",
        "modal",
        "--local",
        "--scenario",
        "burst",
        "--users",
        "50",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
        *extra,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    _, rollouts, truth, manifest = finished_run(tmp_path)
    assert len(rollouts) == 50
    failed = rollouts[rollouts["outcome"] != "ok"]
    assert len(failed) <= 3, failed[["failure_kind", "error"]].to_string()  # the profile's injected rate only
    assert not set(failed["failure_kind"]) & {"unknown", "harness"}
    assert set(rollouts["sdk_version"]) == {f"modal=1.6.4;modal_backend={backend}"}
    assert manifest["provider_versions"] == {"modal": "1.6.4", "modal_backend": backend}
    assert manifest["local_vendor"] is True and "token_secret" not in json.dumps(manifest)
    ok = rollouts[rollouts["outcome"] == "ok"]
    assert (ok["exec_count"] == 3).all() and ok["tti_s"].notna().all()
    assert_no_leaks(rollouts, truth)
    assert "unknown failures 0; harness failures 0" in result.stdout


def test_960_burst_reproduces_classified_init_failures_and_a_long_tti_tail(tmp_path: Path) -> None:
    result = stampede(
        "run",
        "--provider",
        "modal",
        "--local",
        "--profile",
        "modal-like",
        # modal-like leaves the 299 s deadline to the client (issue #34); set on the vendor here, it checks how the
        # Modal front words a start the vendor ends and how the adapter classifies it
        "--profile-set",
        "startup.deadline_s=299",
        "--scenario",
        "burst",
        "--users",
        "960",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    _, rollouts, truth, _ = finished_run(tmp_path)
    assert len(rollouts) == 960 and rollouts["inflight_at_submit"].max() >= 900
    kinds = rollouts["failure_kind"].value_counts()
    assert "unknown" not in kinds and "harness" not in kinds
    init_failures = int(rollouts["failure_kind"].isin([str(k) for k in INIT_FAILURE_KINDS]).sum())
    # the collapse needs the 960 creates together: spread past ~20 vendor s (2 wall s at modal-like's 0.1) the start
    # pipeline drains as fast as it fills. Sent together (a quiet machine: within 1-2 vendor s), the live run must
    # match the offline model given its own creates' vendor arrivals (the truth): within 1 point in 11 runs here. A
    # machine too busy to send them together (or a vendor process too starved to take them: its boots then end late
    # too, which the model cannot know) is not compared: one CI run spread them over 69.8 vendor s and collapsed
    # (31.6%) where the model said 0.6%, another did not collapse at all (0 ready_timeout, 5 deaths)
    arrivals = first_wave_arrivals(truth["created_s"], 960)
    if arrivals[-1] <= BURST_SPREAD_S:
        profile = load_profile("modal-like").with_overrides({"startup.deadline_s": 299})
        offline = offline_first_attempt_failure(profile, arrivals)
        assert abs(init_failures / 960 - offline) <= 0.03, (init_failures / 960, offline, arrivals[-1], kinds.to_dict())
    elif init_failures < 0.05 * 960:
        print(f"creates taken over {arrivals[-1]:.1f} vendor s: no collapse, and none to compare with the model")
        assert_no_leaks(rollouts, truth)
        return
    assert init_failures >= 0.05 * 960, kinds.to_dict()  # the collapse: "Runtime did not start within 299s"
    assert kinds.get("ready_timeout", 0) >= 0.03 * 960
    timed_out = rollouts[rollouts["failure_kind"] == "ready_timeout"]
    assert timed_out["error"].str.contains("Runtime did not start within 299s").all()
    ttis = rollouts.loc[rollouts["outcome"] == "ok", "tti_s"].to_numpy(dtype=float)
    p50, p99 = (float(np.quantile(ttis, q, method="inverted_cdf")) for q in (0.5, 0.99))
    # a long tail, as a spread rather than a ratio: the harness's own delay is added to every rollout, and at
    # modal-like's 0.1 wall s a vendor second it counts tenfold, so a busy machine shifts p50 and p99 alike. p50 / p99
    # in vendor s: 4.0 / 29.2 quiet, 4.4 / 29.5 beside three CPU burners, 31.0 / 49.2 and 35.3 / 44.7 in two CI runs
    # (the first failed the old 1.6x bound, the second a 10 s spread); without the collapse p99 is ~1.3x p50, a second
    # or two apart on a quiet machine, which 5 s still tells apart.
    assert p99 - p50 >= 5.0, (p50, p99)
    assert_no_leaks(rollouts, truth)


def test_throttling_and_the_account_cap_reach_the_results(tmp_path: Path) -> None:
    result = stampede(
        "run",
        "--provider",
        "modal",
        "--local",
        "--profile",
        "modal-like",
        "--scenario",
        "burst",
        "--users",
        "60",
        "--profile-set",
        "quota.max_active=30",
        "--profile-set",
        "create_rate.burst=40",
        "--profile-set",
        "create_rate.per_s=0.5",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    _, rollouts, truth, _ = finished_run(tmp_path)
    kinds = rollouts["failure_kind"].value_counts().to_dict()
    assert kinds.get("rate_limited", 0) >= 15 and kinds.get("quota_exhausted", 0) >= 5, kinds
    assert set(rollouts.loc[rollouts["failure_kind"].isin(["rate_limited", "quota_exhausted"]), "failure_phase"]) == {
        "create"
    }
    assert "unknown" not in kinds and "harness" not in kinds
    assert_no_leaks(rollouts, truth)


@pytest.mark.timeout(480)
def test_ctrl_c_against_a_standalone_local_modal_terminates_every_sandbox(tmp_path: Path) -> None:
    token = "modal-ctrl-c-token"
    serve = [
        sys.executable,
        "-m",
        "providers.sim.modal.serve",
        "--profile",
        "ideal",
        "--token",
        token,
        "--exit-on-stdin-eof",
    ]
    server = subprocess.Popen(
        serve, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO
    )
    try:
        assert server.stdout is not None
        info = json.loads(server.stdout.readline())
        argv = [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--provider",
            "modal",
            "--base-url",
            info["url"],
            "--token",
            token,
            "--run-id",
            "modal-cut-short",
            "--stages",
            "100",
            "--hold",
            "900",
            "--commands",
            "true; sleep 600",
            "--out",
            str(tmp_path),
            "--progress-interval",
            "0",
        ]
        run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)

        def mine() -> list[dict]:
            request = urllib.request.Request(
                info["truth_url"] + "/api/v1/_stampede/truth", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                sandboxes = json.loads(response.read())["sandboxes"]
            return [s for s in sandboxes if "stampede-run=modal-cut-short" in s["labels"]]

        # Ctrl-C once every rollout is in its tool call, read from the vendor's side. The call outlasts any
        # wait here, so no rollout ends (and its user starts another) before the last of the 100 is created,
        # however slowly a busy CI machine creates them through the SDK
        deadline = time.monotonic() + 240
        seen: list[dict[str, int]] = []
        while time.monotonic() < deadline and run.poll() is None:
            statuses = [s["status"] for s in mine()]
            seen.append({status: statuses.count(status) for status in set(statuses)})
            if statuses.count("RUNNING") >= 100:
                break
            time.sleep(0.5)
        in_flight = mine()
        assert run.poll() is None, run.communicate(timeout=60)[1][-2000:]
        run.send_signal(signal.SIGINT)
        _out, err = run.communicate(timeout=120)
        assert run.returncode == 130, err[-2000:]
        assert "Traceback" not in err
        assert sum(s["status"] == "RUNNING" for s in in_flight) >= 100, seen[::10]
        ended = mine()
        assert len(ended) >= 100 and {s["status"] for s in ended} == {"TERMINATED"}
        frame = pd.read_parquet(tmp_path / "modal-cut-short" / "rollouts")
        assert "cancelled" in set(frame["outcome"])
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)
