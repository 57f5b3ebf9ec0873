"""What one protocol of one run showed, in the one shape every fit reads.

Our own runs give raw TTI samples; published benchmark files often give only trimmed quantiles. Both become a
`ProtocolObservation`, so the fit does not care where the evidence came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from foundation.quantiles import nearest_rank
from harness.results.read.dataset import load_rollouts, read_run_info
from harness.results.read.steps import has_steps, load_steps
from harness.results.read.vendor_time import to_vendor_seconds

QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}


@dataclass(frozen=True, slots=True)
class ProtocolObservation:
    protocol: str  # "sequential" | "staggered" | "burst" | "ramp" | "steady" (what the run's shape was)
    concurrency: int  # sandboxes asked for at once (burst width; 1 for sequential; peak for a ramp)
    attempts: int  # creates asked for
    tti_s: tuple[float, ...]  # raw TTI samples of the successes, vendor seconds (empty when only quantiles are known)
    quantiles: Mapping[str, float]  # e.g. {"p50": 1.7, "p95": 2.3, "p99": 2.5}; from tti_s when raw, else published
    trimmed: float  # fraction trimmed each side before the quantiles (computesdk: 0.05), 0 for our runs
    success_rate: float
    failures: Mapping[str, int]  # "kind@phase" -> count
    source: str  # run dir, or "computesdk results/burst_tti/2026-05-05.json, Modal"
    exec_overhead_s: tuple[float, ...] = ()  # per command call: its time beyond the command's own (a plan run's steps)


SEQUENTIAL_MAX_USERS = 1  # a steady run of one user is the public protocols' "sequential": one sandbox at a time
# cancelled by the harness (a stop) or never finished (a crash): neither a success nor a failure of the vendor
UNCOUNTED = ("cancelled", "unfinished")
_SHAPES = {"burst": "burst", "staggered": "staggered", "ramp": "ramp", "knee": "ramp", "steady": "steady"}


def _protocol(scenario: str, concurrency: int) -> str:
    shape = _SHAPES.get(scenario, scenario)
    if shape in ("steady", "ramp") and concurrency <= SEQUENTIAL_MAX_USERS:
        return "sequential"
    return shape


def observations_from_run(run_dir: Path | str) -> list[ProtocolObservation]:
    """One observation per stage of a stampede run: its shape, width, attempts, failures by kind@phase, and the
    vendor's own TTI of each success.

    The vendor's own TTI is `tti_vendor_s` less what the SDK side added: half the readiness poll window (the poll
    saw RUNNING somewhere inside it; the simulator notices it at once) and the engine's own loop stall, both in
    vendor seconds. So a slow poll loop is not fitted into the vendor's boot time. A folder that is not a run is
    one UsageError line (read_run_info)."""
    info = read_run_info(run_dir)
    frame = load_rollouts(info.run_dir)
    if frame.empty:
        return []
    seconds = to_vendor_seconds(info, frame)
    tti = seconds.durations["tti_s"]
    poll = np.nan_to_num(frame["ready_poll_s"].to_numpy(dtype=float)) * seconds.harness_factor
    lag = np.nan_to_num(frame["loop_lag_s"].to_numpy(dtype=float)) * seconds.harness_factor
    vendor_tti = np.maximum(tti - 0.5 * poll - lag, 0.0)
    ok = (frame["outcome"].astype(str) == "ok").to_numpy() & ~np.isnan(tti)
    stages = frame["stage"].astype(str).to_numpy()
    widths = frame["target_users"].to_numpy(dtype=float)
    kinds = frame["failure_kind"].astype(object).to_numpy()
    phases = frame["failure_phase"].astype(object).to_numpy()
    outcomes = frame["outcome"].astype(str).to_numpy()
    steps = load_steps(info) if has_steps(info.run_dir) else None
    out: list[ProtocolObservation] = []
    for stage in dict.fromkeys(stages):
        rows = stages == stage
        width = int(np.nanmax(widths[rows])) if np.isfinite(widths[rows]).any() else 1
        samples = tuple(sorted(float(v) for v in vendor_tti[rows & ok]))
        failures: dict[str, int] = {}
        for kind, phase, outcome in zip(kinds[rows], phases[rows], outcomes[rows], strict=True):
            if outcome in UNCOUNTED or outcome == "ok":
                continue
            key = f"{_text(kind)}@{_text(phase)}"
            failures[key] = failures.get(key, 0) + 1
        attempts = int(rows.sum() - np.isin(outcomes[rows], UNCOUNTED).sum())
        quantiles = {name: nearest_rank(samples, q) for name, q in QUANTILES.items()} if samples else {}
        out.append(
            ProtocolObservation(
                protocol=_protocol(info.scenario, width),
                concurrency=width,
                attempts=attempts,
                tti_s=samples,
                quantiles=quantiles,
                trimmed=0.0,
                success_rate=len(samples) / attempts if attempts else 0.0,
                failures=failures,
                source=f"{info.run_dir} ({stage})",
                exec_overhead_s=_exec_overheads(steps, stage),
            )
        )
    return out


def _exec_overheads(steps: pd.DataFrame | None, stage: str) -> tuple[float, ...]:
    """A plan run's exec calls in one stage: each call's vendor seconds beyond its command's own (`overhead`)."""
    if steps is None or steps.empty:
        return ()
    calls = steps[(steps["stage"] == stage) & (steps["kind"] == "exec") & steps["ok"]]["overhead"].dropna()
    return tuple(sorted(float(v) for v in calls))


def _text(value: object) -> str:
    return "unknown" if value is None or (isinstance(value, float) and np.isnan(value)) or value == "" else str(value)
