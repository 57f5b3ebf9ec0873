"""Startup across retries (issue #35 row 4): with `--retries`, every attempt is its own row, so per-attempt TTI
says nothing about how long a generator waited for a sandbox. Per logical rollout (every attempt of one rollout
id), first attempt's submit to interactive must show in `run`'s table (`stampede summary` prints the same),
summary.json, `report` (table and a per-rollout survival curve) and `compare`, beside per-attempt TTI.

The run is written by hand with known answers: 100 rollouts, 40 interactive on their first attempt after 2 s, 60
that timed out twice (30 s each, the next attempt submitted as the last one ended) and became interactive 2 s
into their third attempt: 62 s after they were first submitted. Per-attempt TTI p50 is 2 s (every interactive
attempt took 2 s); startup p50 is 62 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.results.comparison.compare_report import build_compare
from harness.results.render.report import build_report
from harness.wire.records import ROLLOUT_READ_SCHEMA
from tests.support.commands import stampede

REPO = Path(__file__).resolve().parents[2]
FIRST_TRY, RETRIED, TIMEOUT_S, TTI_S = 40, 60, 30.0, 2.0
KINDS = (("ready_timeout", "ready"), ("died_before_ready", "ready"), ("create_error", "create"), ("capacity", "create"))
"""What the failed attempts failed with, in turn (a 960 burst's mix: the report lists every kind)."""


def write_retried_run(root: Path, run_id: str = "retried", timeout_s: float = TIMEOUT_S) -> Path:
    """A v1 run folder: one stage, FIRST_TRY rollouts interactive at once, RETRIED after two ready timeouts."""
    rows: list[dict[str, object]] = []
    t0 = 1.8e9
    for index in range(FIRST_TRY + RETRIED):
        retried = index >= FIRST_TRY
        for attempt in (1, 2, 3) if retried else (1,):
            failed = retried and attempt < 3
            rows.append(
                {
                    "run_id": run_id,
                    "worker": "local",
                    "rollout_id": f"local-{index:07d}",
                    "provider": "stub",
                    "profile": "modal-like",
                    "scenario": "burst",
                    "stage": "01-burst100",
                    "target_users": 100,
                    "inflight_at_submit": 100,
                    "t_submit": t0 + index * 0.001 + (attempt - 1) * timeout_s,
                    "create_s": 0.05,
                    "ready_s": None if failed else TTI_S - 0.06,
                    "tti_s": None if failed else TTI_S,
                    "exec_count": 0 if failed else 1,
                    "exec_s": None if failed else 0.01,
                    "terminate_s": 0.02,
                    "total_s": timeout_s if failed else TTI_S + 0.02,
                    "outcome": "failed" if failed else "ok",
                    "failure_kind": KINDS[(index + attempt) % len(KINDS)][0] if failed else None,
                    "failure_phase": KINDS[(index + attempt) % len(KINDS)][1] if failed else None,
                    "attempt": attempt,
                    "sdk_version": "test",
                }
            )
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    columns = {f.name: [row.get(f.name) for row in rows] for f in ROLLOUT_READ_SCHEMA}
    table = pa.table({f.name: pa.array(columns[f.name], type=f.type) for f in ROLLOUT_READ_SCHEMA})
    pq.write_table(table, run_dir / "rollouts-local-00000.parquet")
    manifest = {"run_id": run_id, "provider": "stub", "profile": "modal-like", "scenario": "burst"}
    (run_dir / "run.json").write_text(json.dumps({**manifest, "time_scale": 1.0, "status": "completed"}))
    return run_dir


def _column(text: str, header: str) -> str:
    """The value under `header` in the first data row of the first table in `text` that has that header."""
    lines = text.splitlines()
    for at, line in enumerate(lines):
        if header in line and at + 2 < len(lines) and set(lines[at + 1]) <= {"-", " "}:
            start = line.index(header)
            widths = [len(dashes) for dashes in lines[at + 1].split("  ") if dashes]
            spans, position = [], 0
            for width in widths:
                spans.append((position, position + width))
                position += width + 2
            for low, high in spans:
                if low <= start < high:
                    return lines[at + 2][low:high].strip()
    raise AssertionError(f"no column {header!r} in:\n{text}")


def test_run_table_and_summary_json_show_startup_across_retries(tmp_path: Path) -> None:
    run_dir = write_retried_run(tmp_path)
    result = stampede("summary", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert _column(result.stdout, "TTI p50") == "2.000"  # per attempt, still there
    assert _column(result.stdout, "startup p50") == "62.00"  # per rollout: two 30 s timeouts, then 2 s
    assert _column(result.stdout, "interactive/rollouts") == "100/100"

    summary = json.loads((run_dir / "summary.json").read_text())
    whole = summary["run"]
    assert whole["counts"]["rollouts"] == 220 and whole["counts"]["logical_rollouts"] == 100
    assert whole["quantiles"]["tti"]["p50"]["value"] == TTI_S
    assert whole["quantiles"]["startup"]["p50"]["value"] == 2 * TIMEOUT_S + TTI_S
    assert whole["quantiles"]["startup"]["n"] == 100


def test_report_shows_startup_and_draws_the_survival_curve_per_rollout(tmp_path: Path) -> None:
    run_dir = write_retried_run(tmp_path)
    report = build_report([run_dir], tmp_path / "report")
    assert _column(report.text, "startup p50") == "62.00"
    assert _column(report.text, "interactive/rollouts") == "100/100"
    assert (tmp_path / "report" / "startup_cdf.png").is_file()
    html = report.html_path.read_text()
    assert "Startup across retries survival" in html and "startup p50" in html
    # the curve's sample: each rollout once (100 points, not 220 attempts), all 62 s for the retried ones
    run = report.runs[0]
    startup = run.phase_samples["startup"].group(0)
    assert startup.size == 100 and run.stages[0].logical_rollouts == 100
    assert np.count_nonzero(startup == 2 * TIMEOUT_S + TTI_S) == RETRIED


def test_compare_shows_startup_beside_tti(tmp_path: Path) -> None:
    baseline = write_retried_run(tmp_path, "slow", timeout_s=TIMEOUT_S)
    candidate = write_retried_run(tmp_path, "fast", timeout_s=10.0)
    result = build_compare([baseline, candidate], tmp_path / "compare", figures=False)
    document = json.loads((tmp_path / "compare" / "compare.json").read_text())
    text = json.dumps(document)
    assert '"startup.p50"' in text
    assert "startup.p50" in result.text
    line = next(line for line in result.text.splitlines() if "startup.p50" in line)
    assert "62.00" in line and "22.00" in line  # 2 x 10 s + 2 s
