"""scripts/plan-matrix as the issue's done-when runs it, reduced: the shipped plans on the embedded stub and on a
simulated SDK vendor that forks, each rollout ok, none `unknown`, no sandbox left behind; a plan a provider
cannot run is a one-line refusal the table reports as such (a correct outcome, not a failure)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.commands import REPO

NO_FORK = "tests.support.steps_provider:StepsProvider"


def matrix(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    cells = tmp_path / "cells.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "plan-matrix"), "--out", str(tmp_path / "out"), "--json", str(cells),
         "--users", "1", "--time-scale", "0.05", "--timeout", "240", *args],
        capture_output=True, text=True, timeout=900, cwd=REPO, check=False,
    )  # fmt: skip
    return result, json.loads(cells.read_text()) if cells.is_file() else []


@pytest.mark.slow
def test_the_shipped_plans_pass_on_the_stub_and_a_forking_sdk_vendor(tmp_path):
    result, cells = matrix(tmp_path, "--vendors", "stub,e2b", "--plans", "grpo-fork,tool-latency,grpo-fresh")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(cells) == 6
    for cell in cells:
        where = f"{cell['vendor']} x {cell['plan']}: {cell}"
        assert cell["status"] == "ran" and cell["ok"] > 0 and cell["failed"] == 0, where
        assert cell["unknown"] == 0 and cell["leaked_truth"] == 0 and cell["leaked_cleanup"] == 0, where
    fork = next(c for c in cells if c["vendor"] == "e2b" and c["plan"] == "grpo-fork")
    assert fork["ok"] == 9  # one group: the prepared sandbox and its 8 copies, each a rollout of its own
    rows = [line.split() for line in result.stdout.splitlines()[2:]]
    assert len(rows) == 6 and all(row[2] == "pass" for row in rows), result.stdout


@pytest.mark.slow
def test_a_plan_the_vendor_cannot_run_is_reported_as_refused_not_failed(tmp_path):
    result, cells = matrix(
        tmp_path, "--vendors", NO_FORK, "--provider-option", "no_fork=true", "--plans", "grpo-fork,tool-latency"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    refused, ran = cells
    assert refused["status"] == "refused" and refused["note"] == "no snapshot, no fork", refused
    assert ran["status"] == "ran" and ran["ok"] == 1 and ran["unknown"] == 0, ran
    assert "refused: no snapshot, no fork" in result.stdout
    assert not any(path.name.startswith("matrix-stepsprovider-grpo-fork") for path in (tmp_path / "out").iterdir())


@pytest.mark.slow
def test_fork_vs_fresh_prices_a_group_of_each_on_a_vendor_with_published_rates(tmp_path):
    result, _ = matrix(tmp_path, "--fork-vs-fresh", "--vendors", "e2b", "--groups", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("G = 8, 1 groups a run") and "$/group" in lines[1]
    fork, fresh = (line.split() for line in lines[2:4])
    assert fork[:3] == ["e2b", "grpo-fork", "9/0"] and fresh[:3] == ["e2b", "grpo-fresh", "8/0"]
    for row in (fork, fresh):  # every figure measured and priced (e2b publishes its rates): none unknown
        assert "unknown" not in row and all(float(value) > 0 for value in row[3:]), row
