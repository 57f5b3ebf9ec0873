"""Issue 30's Done-when, small: a burst of swe-task-shaped rollouts on modal-like through the real harness (a Locust
process, its engine and the embedded stub vendor), once with the nodes' image caches cold and once warm.

Cold, every node pulls the multi-GB image before anything boots, so startups are pull-bound: TTI is tens of vendor
seconds and the pull is most of it. Warm, nothing is pulled and TTI is the boot's seconds. The pull is the vendor's
own record (the truth table's `pull_s`, placed -> pulled), the TTI the harness's (vendor seconds). The boot power
law is switched off, as `pull_table.py` does, so that only the cache differs; the time scale plays the minute of
vendor time in seconds of wall time.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.commands import stampede

pytestmark = pytest.mark.slow

N = 120  # two nodes' worth of slots on modal-like (64 a node)
PLAN = """
[plan]
name = "swe-task-small"

[[step]]
kind = "create"
image_size_mb = 4096

[[step]]
kind = "exec"
name = "probe"
command = ["true"]

[[step]]
kind = "upload"
name = "repo"
dest = "repo"
files = "const:20"
file_size = "const:1024"

[[step]]
kind = "exec"
name = "tool-call"
command = ["true"]
repeat = "const:2"

[[step]]
kind = "terminate"
"""


def _burst(tmp: Path, name: str, *cache: str) -> tuple[float, float]:
    """One burst of N; the rollouts' median TTI (vendor s) and the pull's share of their summed TTI."""
    plan = tmp / "plan.toml"
    tmp.mkdir(parents=True)
    plan.write_text(PLAN)
    out = tmp / "out"
    result = stampede(
        "run", "--provider", "stub", "--profile", "modal-like", "--plan", str(plan), "--scenario", "burst",
        "--users", str(N), "--time-scale", "0.2", "--profile-set", "boot.congestion_exponent=0", *cache,
        "--out", str(out), "--run-id", name, "-t", "60s", "--stop-timeout", "10", "--progress-interval", "0",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rollouts = pq.read_table(out / name / "rollouts").to_pylist()
    tti = {r["sandbox_id"]: r["tti_vendor_s"] for r in rollouts if r["tti_vendor_s"] is not None}
    assert len(tti) >= 0.9 * N, f"only {len(tti)} of {N} rollouts got a sandbox"
    pulls = {r["id"]: r["pull_s"] or 0.0 for r in pq.read_table(out / name / "truth").to_pylist()}
    ttis = sorted(tti.values())
    share = sum(pulls.get(sandbox, 0.0) for sandbox in tti) / sum(ttis)
    return ttis[len(ttis) // 2], share


def test_a_cold_cache_makes_startups_pull_bound_and_a_warm_one_does_not(tmp_path: Path) -> None:
    cold_tti, cold_share = _burst(tmp_path / "cold", "cold", "--profile-set", "pool.initial_nodes_warm=false")
    warm_tti, warm_share = _burst(tmp_path / "warm", "warm")
    # two nodes each pull 4,096 MB at 125 MB/s: ~33 s before the first boot
    assert cold_tti > 20.0 and cold_tti > 4 * warm_tti, (cold_tti, warm_tti)
    assert cold_share > 0.5, cold_share
    assert warm_share < 0.05, warm_share
