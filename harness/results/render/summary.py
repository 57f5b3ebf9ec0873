"""The end-of-run table (also `stampede summary`): per stage, how many rollouts, how many failed and why, and the
TTI distribution, built from the one aggregation (harness.results.figures.stage_aggregate) in vendor seconds by default.

Percentiles are never trimmed and are nearest-rank (every value printed was observed); a quantile with fewer
than 10 samples beyond it (harness.results.figures.quantiles.supported) is marked `~`. Failure rates are over finished
rollouts (ok + failed); cancelled rollouts (cut off by the end of the run) are counted apart, because they are
disproportionately the slow ones. Unfinished rollouts (submitted, no record of their end: the run crashed or was
aborted first; `harness.results.read.submit_ledger`) are counted apart too, in their own column.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from foundation.quantiles import nearest_rank
from harness.results.figures.engine_load import EngineLoad
from harness.results.figures.quantiles import (
    REPORT_QUANTILES,
    SMALL_SAMPLE_MARK,
    SMALL_SAMPLE_NOTE,
    quantiles,
    supported,
)
from harness.results.render.report_tables import FAIL_PERCENT, start_rate_header
from harness.results.figures.run_figures import unfinished
from harness.results.figures.stage_aggregate import STARTUP, StageStats, TimeBasis
from harness.results.figures.timing_error import FLAG_NOTE

START_RATE_NOTE = "rollouts submitted in the stage / its submit span (first submit to last; a burst's is its release)"
STARTUP_NOTE = (
    "startup: per rollout, its first attempt's submit to interactive across retries (TTI is per attempt; "
    "never interactive: in neither)"
)
_LEVELS = dict(REPORT_QUANTILES)


def _seconds(value: float) -> str:
    if value != value:  # NaN
        return "-"
    if value < 10:
        return f"{value:.3f}"
    if value < 100:
        return f"{value:.2f}"
    return f"{value:.1f}"


def _quantile(summary: dict[str, float], name: str) -> str:
    """A quantile as printed: marked when too few samples lie beyond it (the one small-sample rule)."""
    text = _seconds(summary.get(name, float("nan")))
    level = _LEVELS.get(name)
    if text != "-" and level is not None and not supported(level, int(summary.get("n", 0))):
        text += SMALL_SAMPLE_MARK
    return text


def format_stage_table(
    stages: Sequence[StageStats], engine: dict[str, EngineLoad] | None = None, basis: TimeBasis = "vendor"
) -> str:
    """The per-stage table; `engine` (harness.results.figures.engine_load) adds the engines' CPU and loop lag."""
    retried = any(stage.retries for stage in stages)
    header = [
        "stage",
        "target",
        "attempts" if retried else "rollouts",  # each attempt is a row, as report's table says
        "ok",
        "failed",
        "cxl",
        FAIL_PERCENT,
        f"TTI p50 ({basis} s)",
        "p90",
        "p99",
        "p99.9",
        "max",
        *([f"startup p50 ({basis} s)", "p99", "max", "interactive/rollouts"] if retried else []),
        "conc",
        start_rate_header(f"{basis} s"),
        "harness err",
        "failures by kind",
    ]
    if engine:
        header.insert(-1, "engine")
    counts = {stage.stage: unfinished(stage) for stage in stages}
    show_unfinished = any(counts.values())
    if show_unfinished:
        header.insert(6, "unfinished")
    table = [header]
    marked = False
    for row in stages:
        kinds = ", ".join(
            f"{kind} {count}" for kind, count in sorted(row.failures_by_kind.items(), key=lambda kv: -kv[1])
        )
        tti = row.phases.get("tti", {})
        cells = [_quantile(tti, name) for name in ("p50", "p90", "p99", "p99.9")]
        marked = marked or any(cell.endswith(SMALL_SAMPLE_MARK) for cell in cells)
        table.append(
            [
                row.stage,
                str(row.target) if row.target is not None else "-",
                str(row.rollouts),
                str(row.ok),
                str(row.failed),
                str(row.cancelled),
                *([str(counts[row.stage])] if show_unfinished else []),
                f"{100 * row.failure_rate:.1f}",
                *cells,
                _seconds(tti.get("max", float("nan"))),
                *(_startup_cells(row) if retried else []),
                str(row.concurrency),
                "-" if row.start_rate != row.start_rate else f"{row.start_rate:.1f}",
                row.timing_error.describe(),
                *([engine[row.stage].describe() if row.stage in engine else "-"] if engine else []),
                kinds or "-",
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = []
    for n, line in enumerate(table):
        cells = [
            cell.ljust(widths[i]) if i in (0, len(header) - 1) else cell.rjust(widths[i]) for i, cell in enumerate(line)
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * width for width in widths))
    if any(row.timing_error.flagged for row in stages):
        lines.append(FLAG_NOTE)
    if marked:
        lines.append(SMALL_SAMPLE_NOTE)
    if retried:
        lines.append(STARTUP_NOTE)
    lines.append(f"{start_rate_header(f'{basis} s')}: {START_RATE_NOTE}")
    return "\n".join(lines)


def _startup_cells(row: StageStats) -> list[str]:
    """Startup across retries p50, p99, max and how many logical rollouts ever became interactive."""
    startup = row.phases.get(STARTUP, {})
    reached = int(startup.get("n", 0))
    return [
        _quantile(startup, "p50"),
        _quantile(startup, "p99"),
        _seconds(startup.get("max", float("nan"))),
        f"{reached}/{row.logical_rollouts}",
    ]


def measurement_error(rollouts: pd.DataFrame, truth: pd.DataFrame) -> dict[str, Any] | None:
    """Harness TTI against the simulator's own record of the same sandbox, per sandbox, in milliseconds.

    `vs_usable_ms`: TTI minus the vendor's accept->RUNNING; includes what any client pays on top of the
    vendor (request round trips, the status poll interval, the first command). `vs_first_command_ms`: TTI
    minus the vendor's accept->first command completed; only the harness's own timing error is left
    (network travel of the create request and of the command's answer, and event-loop lag).
    """
    if rollouts.empty or truth.empty or "ready_wall" not in truth or "created_wall" not in truth:
        return None
    ok = rollouts.loc[(rollouts["outcome"] == "ok") & rollouts["tti_s"].notna(), ["sandbox_id", "tti_s"]]
    columns = ["id", "created_wall", "ready_wall"] + (
        ["first_exec_done_wall"] if "first_exec_done_wall" in truth else []
    )
    vendor = truth.dropna(subset=["ready_wall", "created_wall"])[columns]
    joined = ok.merge(vendor, left_on="sandbox_id", right_on="id", how="inner")
    if joined.empty:
        return None
    vendor_s = joined["ready_wall"] - joined["created_wall"]
    result: dict[str, Any] = {
        "samples": len(joined),
        "vs_usable_ms": quantiles((joined["tti_s"] - vendor_s) * 1000.0),
        "vendor_ready_p50_s": nearest_rank(np.sort(vendor_s.to_numpy(dtype=float)), 0.5),
        "harness_tti_p50_s": nearest_rank(np.sort(joined["tti_s"].to_numpy(dtype=float)), 0.5),
    }
    if "first_exec_done_wall" in joined:
        vendor_tti = joined["first_exec_done_wall"] - joined["created_wall"]
        result["vs_first_command_ms"] = quantiles((joined["tti_s"] - vendor_tti) * 1000.0)
    return result


def load_truth(run_dir: Path) -> pd.DataFrame:
    from harness.results.read.dataset import load_truth as load  # the one reader of both layouts (schema v2: truth/)

    return load(run_dir)
