"""The end-of-run table: per stage, how many rollouts, how many failed and why, and the TTI distribution.

Percentiles are never trimmed and are nearest-rank (every value printed was observed). Failure rates are over
finished rollouts (ok + failed); cancelled rollouts (cut off by the end of the run) are counted apart, because
they are disproportionately the slow ones. Unfinished rollouts (submitted, no record of their end: the run crashed
or was aborted first; `harness.results.submit_ledger`) are counted apart too, in their own column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.results.concurrency import concurrency_at_submit
from harness.results.quantiles import quantiles
from harness.results.engine_load import EngineLoad
from harness.results.submit_ledger import OUTCOME_UNFINISHED
from harness.results.timing_error import FLAG_NOTE, TimingError, per_rollout_error_s, stage_timing_error


@dataclass(frozen=True, slots=True)
class StageRow:
    stage: str
    target_users: int
    rollouts: int
    ok: int
    failed: int
    cancelled: int
    failure_rate: float
    failures: dict[str, int]
    tti: dict[str, float]
    max_inflight: int
    start_rate: float
    timing_error: TimingError
    unfinished: int = 0


def stage_rows(rollouts: pd.DataFrame) -> list[StageRow]:
    rows: list[StageRow] = []
    if rollouts.empty:
        return rows
    rollouts = rollouts.assign(_concurrency=concurrency_at_submit(rollouts), _error=per_rollout_error_s(rollouts))
    # A stage lasts from its first submit to the next stage's first submit (the last one: to the run's end),
    # so the start rate is starts per second of the stage, not per second of a burst's release instant.
    firsts = rollouts.groupby("stage", sort=True)["t_submit"].min()
    ends = [*list(firsts.iloc[1:]), float((rollouts["t_submit"] + rollouts["total_s"].fillna(0)).max())]
    spans = dict(zip(firsts.index, [end - first for first, end in zip(firsts, ends, strict=True)], strict=True))
    for stage, group in rollouts.groupby("stage", sort=True):
        ok = int((group["outcome"] == "ok").sum())
        failed = int((group["outcome"] == "failed").sum())
        cancelled = int((group["outcome"] == "cancelled").sum())
        unfinished = int((group["outcome"] == OUTCOME_UNFINISHED).sum())
        finished = ok + failed
        failures = group.loc[group["outcome"] == "failed", "failure_kind"].value_counts().to_dict()
        span = float(spans[stage])
        tti = quantiles(group["tti_s"])
        rows.append(
            StageRow(
                stage=str(stage),
                target_users=int(group["target_users"].max()),
                rollouts=len(group),
                ok=ok,
                failed=failed,
                cancelled=cancelled,
                failure_rate=failed / finished if finished else 0.0,
                failures={str(k): int(v) for k, v in failures.items()},
                # any rollout that got its first command back has a TTI, even if cut off or failed later
                tti=tti,
                max_inflight=int(group["_concurrency"].max()),
                start_rate=len(group) / span if span > 0 else float("nan"),
                timing_error=stage_timing_error(group["_error"].to_numpy(dtype=float), tti["p50"]),
                unfinished=unfinished,
            )
        )
    return rows


def _seconds(value: float) -> str:
    if value != value:  # NaN
        return "-"
    if value < 10:
        return f"{value:.3f}"
    if value < 100:
        return f"{value:.2f}"
    return f"{value:.1f}"


def format_stage_table(rows: list[StageRow], engine: dict[str, EngineLoad] | None = None) -> str:
    """The per-stage table; `engine` (harness.results.engine_load) adds the engines' CPU and loop lag."""
    header = ["stage", "users", "rollouts", "ok", "failed", "cxl", "fail%", "TTI p50", "p90", "p99", "p99.9", "max",
              "inflight", "starts/s", "harness err", "failures by kind"]  # fmt: skip
    if engine:
        header.insert(-1, "engine")
    show_unfinished = any(row.unfinished for row in rows)
    if show_unfinished:
        header.insert(6, "unfinished")
    table = [header]
    for row in rows:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(row.failures.items(), key=lambda kv: -kv[1]))
        table.append(
            [
                row.stage,
                str(row.target_users),
                str(row.rollouts),
                str(row.ok),
                str(row.failed),
                str(row.cancelled),
                *([str(row.unfinished)] if show_unfinished else []),
                f"{100 * row.failure_rate:.1f}",
                _seconds(row.tti["p50"]),
                _seconds(row.tti["p90"]),
                _seconds(row.tti["p99"]),
                _seconds(row.tti["p99.9"]),
                _seconds(row.tti["max"]),
                str(row.max_inflight),
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
    if any(row.timing_error.flagged for row in rows):
        lines.append(FLAG_NOTE)
    return "\n".join(lines)


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
        "vendor_ready_p50_s": float(np.quantile(vendor_s, 0.5, method="inverted_cdf")),
        "harness_tti_p50_s": float(np.quantile(joined["tti_s"], 0.5, method="inverted_cdf")),
    }
    if "first_exec_done_wall" in joined:
        vendor_tti = joined["first_exec_done_wall"] - joined["created_wall"]
        result["vs_first_command_ms"] = quantiles((joined["tti_s"] - vendor_tti) * 1000.0)
    return result


def load_truth(run_dir: Path) -> pd.DataFrame:
    path = Path(run_dir) / "sim_truth.parquet"
    if not path.exists():
        return pd.DataFrame()
    return pd.read_parquet(path)
