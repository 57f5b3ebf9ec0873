"""A profile's failures for the new steps, through the whole harness: `stampede run --provider stub --plan … --profile-set
errors.<step>_error_prob=1` fails every rollout at that step, classified by step (never `unknown`), and leaves no
sandbox behind in the vendor's own record (its `truth/` table: every sandbox it ever accepted, ended TERMINATED). The
same through Daytona's own SDK (`--provider daytona --local`): its front words each failure as Daytona does, and the
adapter classifies it by step too.

Small plans (a create, a probe, the step, a terminate) on the `ideal` profile at a tenth of vendor time, two rollouts.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.support.commands import stampede

FILES_PLAN = """
[plan]
name = "files-fault"

[[step]]
kind = "create"

[[step]]
kind = "exec"
name = "probe"
command = ["true"]

[[step]]
kind = "upload"
name = "repo"
dest = "repo"
files = "const:3"
file_size = "const:2048"
mode = "tar"

[[step]]
kind = "download"
name = "diff"
path = "repo.tar"

[[step]]
kind = "terminate"
"""

FORK_PLAN = """
[plan]
name = "fork-fault"

[[step]]
kind = "create"

[[step]]
kind = "exec"
name = "probe"
command = ["true"]

[[step]]
kind = "fork"
copies = 3

[[step]]
kind = "exec"
name = "tool-call"
command = ["true"]

[[step]]
kind = "terminate"
"""

USERS = 2
CASES = {
    "upload": ("errors.upload_error_prob", FILES_PLAN, "transfer_error", "upload"),
    "download": ("errors.download_error_prob", FILES_PLAN, "transfer_error", "download"),
    "snapshot": ("errors.snapshot_error_prob", FORK_PLAN, "snapshot_error", "snapshot"),
    "fork": ("errors.fork_error_prob", FORK_PLAN, "snapshot_error", "fork"),
}


PROVIDERS = {"stub": ("--provider", "stub"), "daytona": ("--provider", "daytona", "--local")}


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_step_the_vendor_fails_is_classified_by_step_and_leaks_nothing(
    provider: str, case: str, tmp_path: Path
) -> None:
    key, plan, kind, phase = CASES[case]
    plan_path = tmp_path / "plan.toml"
    plan_path.write_text(plan)
    out = tmp_path / "out"
    result = stampede(
        "run", *PROVIDERS[provider], "--profile", "ideal", "--time-scale", "0.1", "--plan", str(plan_path),
        "--profile-set", f"{key}=1", "--scenario", "burst", "-u", str(USERS), "--out", str(out),
        "--progress-interval", "0", timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.is_symlink()]
    rollouts = pd.read_parquet(run_dir / "rollouts")
    assert len(rollouts) == USERS and (rollouts["outcome"] == "failed").all()
    assert list(rollouts["failure_kind"].astype(str)) == [kind] * USERS
    assert list(rollouts["failure_phase"].astype(str)) == [phase] * USERS
    steps = pd.read_parquet(run_dir / "steps")
    failed = steps[~steps["ok"]]
    assert len(failed) == USERS and set(failed["failure_kind"].astype(str)) == {kind}
    assert set(failed["failure_phase"].astype(str)) == {phase}
    # the vendor's own record: each sandbox it accepted (a fork's copies, had any started) ended TERMINATED
    truth = pd.read_parquet(run_dir / "truth")
    assert len(truth) == USERS and (truth["status"] == "TERMINATED").all() and truth["ended_wall"].notna().all()
    assert "0 reaped by run label" in result.stdout and "0 sandboxes terminated at drain" in result.stdout
    assert "unknown failures 0; harness failures 0" in result.stdout
